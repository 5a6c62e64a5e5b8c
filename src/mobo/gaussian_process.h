// SPDX-License-Identifier: Apache-2.0
// Gaussian-process surrogate: one independent GP per target on log values (time and dynamic
// energy are positive and vary multiplicatively with clock and SMs), ARD Matern-5/2 kernel on
// the [0, 1]-scaled encoding, hyperparameters by a pattern search on the log marginal likelihood
// (Rasmussen & Williams, "Gaussian Processes for Machine Learning", 2006, eq. 2.30 and 4.17).
//
// Prior mean (kareus/mobo/prior.h): y = w m(x) + c + f(x), m the model's log prediction, f the
// GP on the residual; the weight w in [0, 1] is a hyperparameter of the marginal likelihood
// (R&W §2.7, a mean function with a coefficient) fitted with the others on the residual: 1
// when the residual is simpler than the values (the model explains them), 0 when the model
// makes them harder to explain; a fitted weight below 0.5 drops the prior and the fit falls back
// to the GP without one (exactly the no-prior model; the next fit tries the prior again).
// Likelihoods of different weights are comparable because the targets are scaled by the values'
// spread, not the residual's.
//
// Transfer: rows of related workloads enter as further tasks of an intrinsic coregionalization
// model (Bonilla, Chai & Williams, "Multi-task Gaussian process prediction", NIPS 2007) with one
// learned similarity per related task: k((x, s), (x', s')) = k(x, x') C(s, s'), C(0, 0) =
// C(s, s) = 1, C(0, s) = rho_s, C(s, s') = rho_s rho_s' (task 0 is the target; C = rho rho^T +
// diag(1 - rho^2) is positive semi-definite). Each task is centred on its own mean, so a
// related workload that is uniformly slower (a longer sequence) still informs the target's
// shape; rho_s -> 0 when its shape does not help.
#pragma once

#include <Eigen/Dense>

#include "kareus/mobo/surrogate.h"

namespace kareus::mobo::internal {

// One GP on a scalar target.
class GaussianProcess {
 public:
  // prior: per row, the prior mean's value (size 0: no prior); task: per row, 0 for the
  // target, s = 1..tasks-1 for related rows (empty: all target). `learn_weight` false fixes
  // the prior's weight at 1. `min_noise_sd`: with a prior, the floor of the noise standard
  // deviation, in the units of y (0: none).
  void Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y, const Eigen::VectorXd& prior,
           const std::vector<int>& task, int tasks, bool learn_weight, int max_sweeps,
           double min_noise_sd = 0.0);
  // The target task's posterior at x (prior: its value at each row when the fit had one).
  void Predict(const Eigen::MatrixXd& x, const Eigen::VectorXd& prior, Eigen::VectorXd* mean,
               Eigen::VectorXd* std) const;
  // `count` joint posterior draws at x (columns).
  Eigen::MatrixXd Sample(const Eigen::MatrixXd& x, const Eigen::VectorXd& prior, int count,
                         uint64_t seed) const;
  // Exact leave-one-out residuals (value - LOO mean, original units) of the target's rows
  // (R&W eq. 5.12: alpha_i / [K^-1]_ii).
  std::vector<double> LeaveOneOutResiduals() const;
  double LogMarginalLikelihood(const Eigen::VectorXd& params) const;
  double PriorWeight() const { return prior_.size() > 0 ? Weight(params_) : 0.0; }
  // The learned similarity of related task s (1..tasks-1) to the target.
  double Similarity(int s) const;

 private:
  Eigen::MatrixXd Kernel(const Eigen::MatrixXd& a, const std::vector<int>& task_a,
                         const Eigen::MatrixXd& b, const std::vector<int>& task_b,
                         const Eigen::VectorXd& params) const;
  double Weight(const Eigen::VectorXd& params) const;
  // The standardized residual at `params`' prior weight; the per-task means into `means`.
  Eigen::VectorXd Residual(const Eigen::VectorXd& params, std::vector<double>* means) const;
  int WeightIndex() const { return static_cast<int>(x_.cols()) + 1 + tasks_; }
  int AdditiveIndex() const { return WeightIndex() + 1; }
  bool additive_ = false;

  Eigen::MatrixXd x_;
  Eigen::VectorXd y_raw_;  // the values
  Eigen::VectorXd prior_;  // the prior per row (size 0: none)
  bool learn_weight_ = true;
  std::vector<int> task_;
  int tasks_ = 1;
  double y_scale_ = 1.0;  // spread of the values (each task about its own mean)
  // [log l_1 .. log l_d, log signal variance, log noise variance, logit rho_1 .. rho_{tasks-1},
  //  prior weight (with a prior)]
  Eigen::VectorXd params_;  // kept between fits: the next batch starts from them
  // At the fitted parameters:
  Eigen::VectorXd y_;  // standardized residual
  std::vector<double> task_mean_;
  Eigen::MatrixXd chol_l_;  // Cholesky factor of K + noise I
  Eigen::VectorXd alpha_;   // (K + noise I)^-1 y
};

class GaussianProcessSurrogate final : public Surrogate {
 public:
  explicit GaussianProcessSurrogate(const SurrogateOptions& options) : options_(options) {}
  using Surrogate::Fit;
  using Surrogate::Predict;
  void Fit(const TrainingRows& rows) override;
  Predictions Predict(const std::vector<std::vector<double>>& x,
                      const std::vector<double>& prior_time_s,
                      const std::vector<double>& prior_dynamic_energy_j) const override;
  HeldOutError CrossValidate() const override;
  PriorUse Use() const override;
  std::vector<Predictions> Sample(const std::vector<std::vector<double>>& x,
                                  const std::vector<double>& prior_time_s,
                                  const std::vector<double>& prior_dynamic_energy_j, int count,
                                  uint64_t seed) const override;

 private:
  SurrogateOptions options_;
  GaussianProcess time_;
  GaussianProcess energy_;
  int tasks_ = 1;
  bool has_prior_ = false;
};

}  // namespace kareus::mobo::internal
