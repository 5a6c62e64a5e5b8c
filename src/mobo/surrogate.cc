// SPDX-License-Identifier: Apache-2.0
#include "kareus/mobo/surrogate.h"

#include <algorithm>

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

std::optional<OptionError> SurrogateOptions::Validate() const {
  if (xgb_members < 1) return OptionError{"xgb_members", Describe(xgb_members), "must be >= 1"};
  if (!(xgb_bootstrap_fraction > 0.0 && xgb_bootstrap_fraction <= 1.0)) {
    return OptionError{"xgb_bootstrap_fraction", Describe(xgb_bootstrap_fraction),
                       "must be in (0, 1]"};
  }
  if (xgb_max_depth < 1)
    return OptionError{"xgb_max_depth", Describe(xgb_max_depth), "must be >= 1"};
  if (!(xgb_eta > 0.0 && xgb_eta <= 1.0))
    return OptionError{"xgb_eta", Describe(xgb_eta), "must be in (0, 1]"};
  if (xgb_rounds < 1) return OptionError{"xgb_rounds", Describe(xgb_rounds), "must be >= 1"};
  if (!(xgb_subsample > 0.0 && xgb_subsample <= 1.0)) {
    return OptionError{"xgb_subsample", Describe(xgb_subsample), "must be in (0, 1]"};
  }
  if (!(xgb_colsample > 0.0 && xgb_colsample <= 1.0)) {
    return OptionError{"xgb_colsample", Describe(xgb_colsample), "must be in (0, 1]"};
  }
  if (gp_max_sweeps < 1)
    return OptionError{"gp_max_sweeps", Describe(gp_max_sweeps), "must be >= 1"};
  if (!(gp_min_time_noise >= 0.0 && gp_min_time_noise < 1.0)) {
    return OptionError{"gp_min_time_noise", Describe(gp_min_time_noise), "must be in [0, 1)"};
  }
  if (!(gp_min_energy_noise >= 0.0 && gp_min_energy_noise < 1.0)) {
    return OptionError{"gp_min_energy_noise", Describe(gp_min_energy_noise), "must be in [0, 1)"};
  }
  return std::nullopt;
}

void TrainingRows::Add(const std::vector<double>& encoded, double time, double dynamic_energy,
                       int row_task) {
  x.push_back(encoded);
  time_s.push_back(time);
  dynamic_energy_j.push_back(dynamic_energy);
  if (row_task != 0 || !task.empty()) {
    task.resize(x.size() - 1, 0);
    task.push_back(row_task);
    tasks = std::max(tasks, row_task + 1);
  }
}

void TrainingRows::AddPrior(double time, double dynamic_energy) {
  prior_time_s.push_back(time);
  prior_dynamic_energy_j.push_back(dynamic_energy);
}

void Surrogate::Fit(const std::vector<std::vector<double>>& x, const std::vector<double>& time_s,
                    const std::vector<double>& dynamic_energy_j) {
  TrainingRows rows;
  rows.x = x;
  rows.time_s = time_s;
  rows.dynamic_energy_j = dynamic_energy_j;
  Fit(rows);
}

std::unique_ptr<Surrogate> MakeSurrogate(SurrogateKind kind, const SurrogateOptions& options) {
  ThrowIfInvalid(options.Validate());
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
