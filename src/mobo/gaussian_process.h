// SPDX-License-Identifier: Apache-2.0
// Gaussian-process surrogate: one independent GP per target on log values (time and dynamic
// energy are positive and vary multiplicatively with clock and SMs), ARD Matern-5/2 kernel on
// the [0, 1]-scaled encoding, hyperparameters by a pattern search on the log marginal likelihood
// (Rasmussen & Williams, "Gaussian Processes for Machine Learning", 2006, eq. 2.30 and 4.17).
#pragma once

#include <Eigen/Dense>

#include "kareus/mobo/surrogate.h"

namespace kareus::mobo::internal {

// One GP on standardized scalar targets.
class GaussianProcess {
 public:
  // log_params = [log l_1 .. log l_d, log signal variance, log noise variance]
  void Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y, int max_sweeps);
  void Predict(const Eigen::MatrixXd& x, Eigen::VectorXd* mean, Eigen::VectorXd* std) const;
  double LogMarginalLikelihood(const Eigen::VectorXd& log_params) const;
  const Eigen::VectorXd& log_params() const { return log_params_; }

 private:
  Eigen::MatrixXd Kernel(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b,
                         const Eigen::VectorXd& log_params) const;
  Eigen::MatrixXd x_;
  Eigen::VectorXd y_;
  double y_mean_ = 0.0;
  double y_scale_ = 1.0;
  Eigen::VectorXd log_params_;  // kept between fits: the next batch starts from it
  Eigen::MatrixXd chol_l_;      // Cholesky factor of K + noise I
  Eigen::VectorXd alpha_;       // (K + noise I)^-1 y
};

class GaussianProcessSurrogate final : public Surrogate {
 public:
  explicit GaussianProcessSurrogate(const SurrogateOptions& options) : options_(options) {}
  void Fit(const std::vector<std::vector<double>>& x, const std::vector<double>& time_s,
           const std::vector<double>& dynamic_energy_j) override;
  Predictions Predict(const std::vector<std::vector<double>>& x) const override;

 private:
  SurrogateOptions options_;
  GaussianProcess time_;
  GaussianProcess energy_;
};

}  // namespace kareus::mobo::internal
