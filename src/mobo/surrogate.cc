// SPDX-License-Identifier: Apache-2.0
#include "kareus/mobo/surrogate.h"

#include "kareus/common/error.h"
#include "mobo/gaussian_process.h"
#include "mobo/xgb_ensemble.h"

namespace kareus::mobo {

const char* ToString(SurrogateKind kind) {
  switch (kind) {
    case SurrogateKind::kXgbEnsemble:
      return "xgb";
    case SurrogateKind::kGaussianProcess:
      return "gp";
  }
  return "?";
}

SurrogateKind SurrogateKindFromString(const std::string& text) {
  if (text == "xgb") return SurrogateKind::kXgbEnsemble;
  if (text == "gp") return SurrogateKind::kGaussianProcess;
  ThrowInput("surrogate", text, "must be one of: xgb, gp");
}

std::unique_ptr<Surrogate> MakeSurrogate(SurrogateKind kind, const SurrogateOptions& options) {
  switch (kind) {
    case SurrogateKind::kXgbEnsemble:
      return std::make_unique<internal::XgbEnsemble>(options);
    case SurrogateKind::kGaussianProcess:
      return std::make_unique<internal::GaussianProcessSurrogate>(options);
  }
  KAREUS_CHECK(false) << "unknown surrogate kind";
  return nullptr;
}

}  // namespace kareus::mobo
