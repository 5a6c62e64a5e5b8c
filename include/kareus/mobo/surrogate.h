// SPDX-License-Identifier: Apache-2.0
// Surrogate models of one partition type's time and dynamic ("effective") energy over the
// encoded search space. Total energy is derived, never modelled: E = E_dyn + P_static x t
// (published DerivedRealEnergyModel, reference/kareus-official.md §3.3).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/error.h"

namespace kareus::mobo {

enum class SurrogateKind {
  kXgbEnsemble,       // "xgb": bootstrap ensemble of gradient-boosted trees (published design)
  kGaussianProcess,   // "gp": ARD Matern-5/2 Gaussian process on log targets
};
const char* ToString(SurrogateKind kind);
SurrogateKind SurrogateKindFromString(const std::string& text);  // InputError lists the names

// Per candidate: predicted mean and standard deviation of time and dynamic energy.
struct Predictions {
  std::vector<double> time_s;
  std::vector<double> dynamic_energy_j;
  std::vector<double> time_std_s;
  std::vector<double> dynamic_energy_std_j;
};

struct SurrogateOptions {
  uint64_t seed = 42;  // published: RandomState(42 + i) and XGB seed 42 + i per member
  // XGBoost ensemble (published surrogates.py).
  int xgb_members = 5;              // bootstrap members for the uncertainty
  double xgb_bootstrap_fraction = 0.8;  // rows per member, drawn with replacement
  int xgb_max_depth = 6;
  double xgb_eta = 0.3;
  int xgb_rounds = 100;
  double xgb_subsample = 0.8;
  double xgb_colsample = 0.8;
  // Gaussian process: log-marginal-likelihood pattern search in log-hyperparameter space.
  int gp_max_sweeps = 24;  // passes over the hyperparameters before stopping

  // The first invalid field, its value and the rule; nullopt when valid.
  std::optional<OptionError> Validate() const;
};

class Surrogate {
 public:
  virtual ~Surrogate() = default;
  // x: encoded configurations (rows of equal length); targets are positive.
  virtual void Fit(const std::vector<std::vector<double>>& x, const std::vector<double>& time_s,
                   const std::vector<double>& dynamic_energy_j) = 0;
  virtual Predictions Predict(const std::vector<std::vector<double>>& x) const = 0;
};

std::unique_ptr<Surrogate> MakeSurrogate(SurrogateKind kind, const SurrogateOptions& options);

}  // namespace kareus::mobo
