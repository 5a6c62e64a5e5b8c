// SPDX-License-Identifier: Apache-2.0
#include "mobo/gaussian_process.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kareus/common/error.h"

namespace kareus::mobo::internal {
namespace {

// Bounds of the log hyperparameters. Inputs live in [0, 1]: length scales from 0.03 (a single
// grid step of 18 clocks is 0.06) to 30 (irrelevant input). Targets are standardized: signal
// variance around 1, noise variance from 1e-6 (noise-free emulator) to 0.5.
constexpr double kMinLogLength = -3.5, kMaxLogLength = 3.4;
constexpr double kMinLogSignal = -3.0, kMaxLogSignal = 3.0;
constexpr double kMinLogNoise = -13.8, kMaxLogNoise = -0.7;

double Clamp(int i, int d, double v) {
  if (i < d) return std::clamp(v, kMinLogLength, kMaxLogLength);
  if (i == d) return std::clamp(v, kMinLogSignal, kMaxLogSignal);
  return std::clamp(v, kMinLogNoise, kMaxLogNoise);
}

Eigen::MatrixXd ToMatrix(const std::vector<std::vector<double>>& rows) {
  const Eigen::Index n = static_cast<Eigen::Index>(rows.size());
  const Eigen::Index d = n == 0 ? 0 : static_cast<Eigen::Index>(rows[0].size());
  Eigen::MatrixXd m(n, d);
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index j = 0; j < d; ++j) m(i, j) = rows[i][j];
  }
  return m;
}

}  // namespace

// Matern-5/2: k(r) = s^2 (1 + sqrt5 r + 5/3 r^2) exp(-sqrt5 r), r^2 = sum_j ((a_j - b_j)/l_j)^2
// (Rasmussen & Williams eq. 4.17).
Eigen::MatrixXd GaussianProcess::Kernel(const Eigen::MatrixXd& a, const Eigen::MatrixXd& b,
                                        const Eigen::VectorXd& log_params) const {
  const Eigen::Index d = a.cols();
  const Eigen::ArrayXd inv_length = (-log_params.head(d).array()).exp();
  const double signal = std::exp(log_params(d));
  const Eigen::MatrixXd as = a.array().rowwise() * inv_length.transpose();
  const Eigen::MatrixXd bs = b.array().rowwise() * inv_length.transpose();
  const Eigen::VectorXd an = as.rowwise().squaredNorm();
  const Eigen::VectorXd bn = bs.rowwise().squaredNorm();
  Eigen::MatrixXd r2 = (-2.0 * as * bs.transpose()).colwise() + an;
  r2.rowwise() += bn.transpose();
  const double sqrt5 = std::sqrt(5.0);
  return r2.unaryExpr([&](double v) {
    const double r = std::sqrt(std::max(v, 0.0));
    return signal * (1.0 + sqrt5 * r + 5.0 / 3.0 * r * r) * std::exp(-sqrt5 * r);
  });
}

// log p(y | X) = -1/2 y^T K^-1 y - sum log diag(L) - n/2 log 2 pi (R&W eq. 2.30), with a weak
// log-normal prior on the length scales centred at 0.5 so that a handful of points cannot send
// them to the bounds.
double GaussianProcess::LogMarginalLikelihood(const Eigen::VectorXd& log_params) const {
  const Eigen::Index n = x_.rows(), d = x_.cols();
  Eigen::MatrixXd k = Kernel(x_, x_, log_params);
  k.diagonal().array() += std::exp(log_params(d + 1)) + 1e-9;
  Eigen::LLT<Eigen::MatrixXd> llt(k);
  if (llt.info() != Eigen::Success) return -std::numeric_limits<double>::infinity();
  const Eigen::VectorXd alpha = llt.solve(y_);
  const double log_det = 2.0 * llt.matrixLLT().diagonal().array().log().sum();
  double prior = 0.0;
  for (Eigen::Index j = 0; j < d; ++j) {
    const double z = (log_params(j) - std::log(0.5)) / 1.5;
    prior -= 0.5 * z * z;
  }
  return -0.5 * y_.dot(alpha) - 0.5 * log_det - 0.5 * static_cast<double>(n) * std::log(2 * M_PI) +
         prior;
}

void GaussianProcess::Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y, int max_sweeps) {
  const Eigen::Index d = x.cols();
  x_ = x;
  y_mean_ = y.mean();
  y_scale_ = std::sqrt((y.array() - y_mean_).square().mean());
  if (!(y_scale_ > 1e-12)) y_scale_ = 1.0;
  y_ = (y.array() - y_mean_) / y_scale_;

  if (log_params_.size() != d + 2) {
    log_params_ = Eigen::VectorXd::Constant(d + 2, std::log(0.5));
    log_params_(d) = 0.0;
    log_params_(d + 1) = std::log(1e-3);
  }
  // Pattern search (coordinate steps in log space, halving when a sweep finds nothing):
  // derivative-free, deterministic, and cheap for the <= 10 hyperparameters and <= a few
  // hundred points of a partition space.
  double best = LogMarginalLikelihood(log_params_);
  double step = 1.0;
  for (int sweep = 0; sweep < max_sweeps && step > 0.06; ++sweep) {
    bool improved = false;
    for (Eigen::Index i = 0; i < d + 2; ++i) {
      for (double sign : {1.0, -1.0}) {
        Eigen::VectorXd trial = log_params_;
        trial(i) = Clamp(static_cast<int>(i), static_cast<int>(d), trial(i) + sign * step);
        if (trial(i) == log_params_(i)) continue;
        const double value = LogMarginalLikelihood(trial);
        if (value > best + 1e-9) {
          best = value;
          log_params_ = trial;
          improved = true;
          break;
        }
      }
    }
    if (!improved) step *= 0.5;
  }

  Eigen::MatrixXd k = Kernel(x_, x_, log_params_);
  k.diagonal().array() += std::exp(log_params_(d + 1)) + 1e-9;
  Eigen::LLT<Eigen::MatrixXd> llt(k);
  while (llt.info() != Eigen::Success) {  // numerically singular: add jitter until it is not
    k.diagonal().array() += 1e-6;
    llt.compute(k);
  }
  chol_l_ = llt.matrixL();
  alpha_ = llt.solve(y_);
}

void GaussianProcess::Predict(const Eigen::MatrixXd& x, Eigen::VectorXd* mean,
                              Eigen::VectorXd* std) const {
  const Eigen::Index d = x.cols();
  const Eigen::MatrixXd ks = Kernel(x, x_, log_params_);  // m x n
  *mean = (ks * alpha_).array() * y_scale_ + y_mean_;
  const Eigen::MatrixXd v = chol_l_.triangularView<Eigen::Lower>().solve(ks.transpose());
  const double signal = std::exp(log_params_(d));
  const Eigen::VectorXd var = (signal - v.colwise().squaredNorm().array()).max(1e-12);
  *std = var.array().sqrt() * y_scale_;
}

void GaussianProcessSurrogate::Fit(const std::vector<std::vector<double>>& x,
                                   const std::vector<double>& time_s,
                                   const std::vector<double>& dynamic_energy_j) {
  KAREUS_CHECK(!x.empty() && x.size() == time_s.size() && x.size() == dynamic_energy_j.size());
  const Eigen::MatrixXd xm = ToMatrix(x);
  Eigen::VectorXd log_time(x.size()), log_energy(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    log_time(i) = std::log(std::max(time_s[i], 1e-30));
    log_energy(i) = std::log(std::max(dynamic_energy_j[i], 1e-30));
  }
  time_.Fit(xm, log_time, options_.gp_max_sweeps);
  energy_.Fit(xm, log_energy, options_.gp_max_sweeps);
}

Predictions GaussianProcessSurrogate::Predict(const std::vector<std::vector<double>>& x) const {
  Predictions out;
  if (x.empty()) return out;
  const Eigen::MatrixXd xm = ToMatrix(x);
  Eigen::VectorXd mt, st, me, se;
  time_.Predict(xm, &mt, &st);
  energy_.Predict(xm, &me, &se);
  const std::size_t n = x.size();
  out.time_s.resize(n);
  out.time_std_s.resize(n);
  out.dynamic_energy_j.resize(n);
  out.dynamic_energy_std_j.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    // Median of the log-normal; spread by the delta method (std of exp(z) ~ exp(mu) sigma).
    out.time_s[i] = std::exp(mt(i));
    out.time_std_s[i] = out.time_s[i] * st(i);
    out.dynamic_energy_j[i] = std::exp(me(i));
    out.dynamic_energy_std_j[i] = out.dynamic_energy_j[i] * se(i);
  }
  return out;
}

}  // namespace kareus::mobo::internal
