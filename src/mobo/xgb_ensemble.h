// SPDX-License-Identifier: Apache-2.0
// Bootstrap ensemble of gradient-boosted trees through XGBoost's C API, as the published
// surrogates.py: point models on all rows for the mean, `members` bootstrap (energy, time)
// pairs for the spread. Deterministic: nthread 1 and fixed seeds.
//
// Prior mean: trees on the ratio value / prior (the residual), next to trees on the values; per
// target the one with the smaller 5-fold held-out error answers (weight 1 or 0).
// Related rows: each task's targets relative to the task's mean (a uniformly slower related
// workload still informs the shape) and a task-id feature the trees may split on (the learned
// similarity: without a split the rows are pooled).
#pragma once

#include "kareus/mobo/surrogate.h"

namespace kareus::mobo::internal {

// One ensemble per target pair (time, dynamic energy).
class XgbModels {
 public:
  explicit XgbModels(const SurrogateOptions& options) : options_(options) {}
  ~XgbModels();
  XgbModels(const XgbModels&) = delete;
  XgbModels& operator=(const XgbModels&) = delete;
  void Fit(const std::vector<std::vector<double>>& x, const std::vector<double>& time_s,
           const std::vector<double>& dynamic_energy_j, const std::vector<int>& task, int tasks);
  Predictions Predict(const std::vector<std::vector<double>>& x) const;
  HeldOutError CrossValidate() const;
  // Each bootstrap member's predictions (time, dynamic energy), members in order.
  std::vector<Predictions> Members(const std::vector<std::vector<double>>& x) const;

 private:
  struct Model;  // one booster and its target scaling
  void FreeModels();
  Model* Train(const std::vector<double>& target, const std::vector<std::size_t>& rows,
               uint64_t seed) const;
  std::vector<std::vector<double>> Features(const std::vector<std::vector<double>>& x) const;
  SurrogateOptions options_;
  // The last fit's rows (features as trained, targets relative to their task's mean).
  std::vector<std::vector<double>> x_;
  std::vector<double> time_, energy_;
  std::vector<int> task_;
  int tasks_ = 1;
  double time_scale_ = 1.0;  // the target task's mean time (1 without related rows)
  double energy_scale_ = 1.0;
  // [0] point model on all rows, [1..members] bootstrap members; one vector per target.
  std::vector<Model*> time_models_;
  std::vector<Model*> energy_models_;
};

class XgbEnsemble final : public Surrogate {
 public:
  explicit XgbEnsemble(const SurrogateOptions& options);
  using Surrogate::Fit;
  using Surrogate::Predict;
  void Fit(const TrainingRows& rows) override;
  Predictions Predict(const std::vector<std::vector<double>>& x,
                      const std::vector<double>& prior_time_s,
                      const std::vector<double>& prior_dynamic_energy_j) const override;
  HeldOutError CrossValidate() const override;
  PriorUse Use() const override { return use_; }
  std::vector<Predictions> Sample(const std::vector<std::vector<double>>& x,
                                  const std::vector<double>& prior_time_s,
                                  const std::vector<double>& prior_dynamic_energy_j, int count,
                                  uint64_t seed) const override;

 private:
  SurrogateOptions options_;
  XgbModels plain_;
  XgbModels residual_;
  bool has_prior_ = false;
  PriorUse use_;
};

}  // namespace kareus::mobo::internal
