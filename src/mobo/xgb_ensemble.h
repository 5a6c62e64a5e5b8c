// SPDX-License-Identifier: Apache-2.0
// Bootstrap ensemble of gradient-boosted trees through XGBoost's C API, as the published
// surrogates.py: point models on all rows for the mean, `members` bootstrap (energy, time)
// pairs for the spread. Deterministic: nthread 1 and fixed seeds.
#pragma once

#include "kareus/mobo/surrogate.h"

namespace kareus::mobo::internal {

class XgbEnsemble final : public Surrogate {
 public:
  explicit XgbEnsemble(const SurrogateOptions& options);
  ~XgbEnsemble() override;
  void Fit(const std::vector<std::vector<double>>& x, const std::vector<double>& time_s,
           const std::vector<double>& dynamic_energy_j) override;
  Predictions Predict(const std::vector<std::vector<double>>& x) const override;

 private:
  struct Model;  // one booster and its target scaling
  void FreeModels();
  SurrogateOptions options_;
  // [0] point model on all rows, [1..members] bootstrap members; one vector per target.
  std::vector<Model*> time_models_;
  std::vector<Model*> energy_models_;
};

}  // namespace kareus::mobo::internal
