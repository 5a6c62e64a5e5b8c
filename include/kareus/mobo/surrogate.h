// SPDX-License-Identifier: Apache-2.0
// Surrogate models of one partition type's time and dynamic ("effective") energy over the
// encoded search space. Total energy is derived, never modelled: E = E_dyn + P_static x time
// (published DerivedRealEnergyModel, reference/kareus-official.md §3.3).
//
// A surrogate may be given a prior mean (kareus/mobo/prior.h: an analytic model's prediction at
// every row) and rows of related workloads (transfer); it then learns the residual between the
// values and the prior, and how much the prior and each related workload are worth.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/error.h"

namespace kareus::mobo {

enum class SurrogateKind {
  kXgbEnsemble,      // "xgb": bootstrap ensemble of gradient-boosted trees (published design)
  kGaussianProcess,  // "gp": ARD Matern-5/2 Gaussian process on log targets
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

// What a surrogate is fitted on: the target's rows and, for transfer, rows of related
// workloads. Prior values are the model's prediction at each row's configuration (for a
// related row: in its own workload).
struct TrainingRows {
  std::vector<std::vector<double>> x;          // encoded configurations (rows of equal length)
  std::vector<double> time_s;                  // positive
  std::vector<double> dynamic_energy_j;        // positive
  std::vector<double> prior_time_s;            // per row; empty: no prior
  std::vector<double> prior_dynamic_energy_j;  // per row; empty: no prior
  std::vector<int> task;  // per row: 0 the target, s = 1..tasks-1 a related workload; empty: all 0
  int tasks = 1;

  bool has_prior() const { return !prior_time_s.empty(); }
  // Appends one row (of `row_task`); prior values only when the rows have a prior.
  void Add(const std::vector<double>& encoded, double time, double dynamic_energy,
           int row_task = 0);
  void AddPrior(double time, double dynamic_energy);
};

// Out-of-sample error of a fit, per target: the root mean square over the target's rows of
// log(prediction / value), each row predicted by a model that did not see it.
struct HeldOutError {
  double time = 0.0;
  double dynamic_energy = 0.0;
};

// How much a fit rests on the prior and on related workloads, learned from the rows.
struct PriorUse {
  // Weight of the prior mean per target: the model is weight x prior + a learned residual (GP:
  // the weight in [0, 1] maximizes the marginal likelihood; the ensemble: 1 or 0, whichever of
  // the residual and the plain model has the smaller held-out error). 0: the prior was dropped.
  double time_weight = 0.0;
  double energy_weight = 0.0;
  HeldOutError held_out;                   // with a prior: of the fit as used
  std::vector<double> related_similarity;  // per related workload, in [0, 1] (GP only)
  // Set by the profiler when the prior was calibrated before the fit (mobo::CalibratePrior):
  // the calibration (ModelPerturbation::ToString()) and the RMS of log(measured / predicted)
  // over the target's rows before and after it.
  std::string calibration;
  double calibration_log_rms_before = 0.0;
  double calibration_log_rms_after = 0.0;
  // Set by the profiler: the batch picked after this fit went along the trusted prior's
  // frontier (ProfileOptions::prior_front).
  bool trusted = false;
};

struct SurrogateOptions {
  uint64_t seed = 42;  // published: RandomState(42 + i) and XGB seed 42 + i per member
  // XGBoost ensemble (published surrogates.py).
  int xgb_members = 5;                  // bootstrap members for the uncertainty
  double xgb_bootstrap_fraction = 0.8;  // rows per member, drawn with replacement
  int xgb_max_depth = 6;
  double xgb_eta = 0.3;
  int xgb_rounds = 100;
  double xgb_subsample = 0.8;
  double xgb_colsample = 0.8;
  // Gaussian process: log-marginal-likelihood pattern search in log-hyperparameter space.
  int gp_max_sweeps = 24;  // passes over the hyperparameters before stopping
  // With a prior: learn its weight (and drop a prior that explains the rows worse than none).
  // false: the weight is fixed at 1 (tests show what the check prevents).
  bool learn_prior_weight = true;
  // Gaussian process with a prior: floors of the noise standard deviation on log time and log
  // dynamic energy (relative units; 0: none): the measuring backend's declared repeatability
  // (measure::Backend::DeclaredNoise), so that a fit with few rows cannot explain the noise
  // of its readings as structure of the residual (e.g. by a per-(SMs, slot) offset). Without
  // a prior (the whole function, with narrow features) and in the XGBoost ensemble (no noise
  // term) they do not apply.
  double gp_min_time_noise = 0.0;
  double gp_min_energy_noise = 0.0;

  // The first invalid field, its value and the rule; nullopt when valid.
  std::optional<OptionError> Validate() const;
};

class Surrogate {
 public:
  virtual ~Surrogate() = default;
  // Fits on `rows` (at least one of the target's).
  virtual void Fit(const TrainingRows& rows) = 0;
  // Predictions for the target at x; the prior at each row when the fit had one (else empty).
  virtual Predictions Predict(const std::vector<std::vector<double>>& x,
                              const std::vector<double>& prior_time_s,
                              const std::vector<double>& prior_dynamic_energy_j) const = 0;
  // The held-out error of the last fit (GP: exact leave-one-out at the fitted hyperparameters,
  // Rasmussen & Williams eq. 5.12; XGBoost ensemble: 5-fold cross-validation of the point
  // model). Related rows are never scored.
  virtual HeldOutError CrossValidate() const = 0;
  // What the last fit made of its prior and related rows.
  virtual PriorUse Use() const = 0;
  // `count` draws of the target's values at x, jointly over the rows of x (GP: the joint
  // posterior; the ensemble: its bootstrap members in turn); only time_s and dynamic_energy_j
  // are set. Deterministic given the seed.
  virtual std::vector<Predictions> Sample(const std::vector<std::vector<double>>& x,
                                          const std::vector<double>& prior_time_s,
                                          const std::vector<double>& prior_dynamic_energy_j,
                                          int count, uint64_t seed) const = 0;

  // Without prior or related rows.
  void Fit(const std::vector<std::vector<double>>& x, const std::vector<double>& time_s,
           const std::vector<double>& dynamic_energy_j);
  Predictions Predict(const std::vector<std::vector<double>>& x) const {
    return Predict(x, {}, {});
  }
};

std::unique_ptr<Surrogate> MakeSurrogate(SurrogateKind kind, const SurrogateOptions& options);

}  // namespace kareus::mobo
