// SPDX-License-Identifier: Apache-2.0
#include "mobo/gaussian_process.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "kareus/common/context.h"
#include "kareus/common/error.h"

namespace kareus::mobo::internal {
namespace {

// Bounds of the hyperparameters. Inputs live in [0, 1]: length scales from 0.03 (a single
// grid step of 18 clocks is 0.06) to 30 (irrelevant input). Targets are scaled by the values'
// spread: signal variance from e^-10 (a residual that is nearly all noise, the prior explaining
// the values) to e^3, noise variance from 1e-6 (noise-free emulator) to e^0.5. Task
// similarities are logits: rho from 0.018 (unrelated) to 0.9975. The prior weight is in [0, 1].
// Without a prior the historical bounds hold (signal from e^-3, noise up to e^-0.7: the values
// are mostly signal).
constexpr double kMinLogLength = -3.5, kMaxLogLength = 3.4;
constexpr double kMinLogSignal = -10.0, kMaxLogSignal = 3.0;
constexpr double kMinLogNoise = -13.8, kMaxLogNoise = 0.5;
constexpr double kMinLogSignalNoPrior = -3.0, kMaxLogNoiseNoPrior = -0.7;
constexpr double kMinLogit = -4.0, kMaxLogit = 6.0;
// A prior whose learned weight ends below this is dropped: the fit falls back to no prior.
constexpr double kMinPriorWeight = 0.5;

double Sigmoid(double u) { return 1.0 / (1.0 + std::exp(-u)); }

Eigen::MatrixXd ToMatrix(const std::vector<std::vector<double>>& rows) {
  const Eigen::Index n = static_cast<Eigen::Index>(rows.size());
  const Eigen::Index d = n == 0 ? 0 : static_cast<Eigen::Index>(rows[0].size());
  Eigen::MatrixXd m(n, d);
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index j = 0; j < d; ++j) m(i, j) = rows[i][j];
  }
  return m;
}

Eigen::VectorXd Logs(const std::vector<double>& values) {
  Eigen::VectorXd out(static_cast<Eigen::Index>(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) out(i) = std::log(std::max(values[i], 1e-30));
  return out;
}

double Rms(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double sum = 0.0;
  for (double x : v) sum += x * x;
  return std::sqrt(sum / static_cast<double>(v.size()));
}

}  // namespace

double GaussianProcess::Weight(const Eigen::VectorXd& params) const {
  if (prior_.size() == 0) return 0.0;
  return params(WeightIndex());
}

Eigen::VectorXd GaussianProcess::Residual(const Eigen::VectorXd& params,
                                          std::vector<double>* means) const {
  const Eigen::Index n = x_.rows();
  const double w = Weight(params);
  Eigen::VectorXd r = y_raw_;
  if (prior_.size() > 0) r -= w * prior_;
  means->assign(tasks_, 0.0);
  std::vector<int> count(tasks_, 0);
  for (Eigen::Index i = 0; i < n; ++i) {
    const int t = task_.empty() ? 0 : task_[i];
    (*means)[t] += r(i);
    ++count[t];
  }
  for (int t = 0; t < tasks_; ++t) (*means)[t] /= std::max(1, count[t]);
  for (Eigen::Index i = 0; i < n; ++i)
    r(i) = (r(i) - (*means)[task_.empty() ? 0 : task_[i]]) / y_scale_;
  return r;
}

// Matern-5/2: k(r) = s^2 (1 + sqrt5 r + 5/3 r^2) exp(-sqrt5 r), r^2 = sum_j ((a_j - b_j)/l_j)^2
// (Rasmussen & Williams eq. 4.17), times the task correlation C(task_a, task_b).
Eigen::MatrixXd GaussianProcess::Kernel(const Eigen::MatrixXd& a, const std::vector<int>& task_a,
                                        const Eigen::MatrixXd& b, const std::vector<int>& task_b,
                                        const Eigen::VectorXd& params) const {
  const Eigen::Index d = a.cols();
  const Eigen::ArrayXd inv_length = (-params.head(d).array()).exp();
  const double signal = std::exp(params(d));
  const Eigen::MatrixXd as = a.array().rowwise() * inv_length.transpose();
  const Eigen::MatrixXd bs = b.array().rowwise() * inv_length.transpose();
  const Eigen::VectorXd an = as.rowwise().squaredNorm();
  const Eigen::VectorXd bn = bs.rowwise().squaredNorm();
  Eigen::MatrixXd r2 = (-2.0 * as * bs.transpose()).colwise() + an;
  r2.rowwise() += bn.transpose();
  const double sqrt5 = std::sqrt(5.0);
  auto matern = [&](double amplitude) {
    return [=](double v) {
      const double r = std::sqrt(std::max(v, 0.0));
      return amplitude * (1.0 + sqrt5 * r + 5.0 / 3.0 * r * r) * std::exp(-sqrt5 * r);
    };
  };
  Eigen::MatrixXd k = r2.unaryExpr(matern(signal));
  if (additive_) {
    // Additive terms (Duvenaud et al. 2011): the clock alone and the comm knobs alone, so
    // that what one clock says about an (SMs, slot) pair carries to every clock.
    const double s_clock = std::exp(params(AdditiveIndex()));
    const double s_knobs = std::exp(params(AdditiveIndex() + 1));
    Eigen::MatrixXd c2 =
        (-2.0 * as.col(0) * bs.col(0).transpose()).colwise() + as.col(0).array().square().matrix();
    c2.rowwise() += bs.col(0).array().square().matrix().transpose();
    Eigen::MatrixXd k2 = r2 - c2;
    k += c2.unaryExpr(matern(s_clock)) + k2.unaryExpr(matern(s_knobs));
  }
  if (tasks_ > 1) {
    // rho of every task (rho_0 = 1 for the target): C(s, s') = rho_s rho_s' off the diagonal.
    std::vector<double> rho(tasks_, 1.0);
    for (int s = 1; s < tasks_; ++s) rho[s] = Sigmoid(params(d + 1 + s));
    for (Eigen::Index i = 0; i < k.rows(); ++i) {
      const int ta = task_a.empty() ? 0 : task_a[i];
      for (Eigen::Index j = 0; j < k.cols(); ++j) {
        const int tb = task_b.empty() ? 0 : task_b[j];
        if (ta != tb) k(i, j) *= rho[ta] * rho[tb];
      }
    }
  }
  return k;
}

// log p(y | X) = -1/2 y^T K^-1 y - sum log diag(L) - n/2 log 2 pi (R&W eq. 2.30) of the
// residual at the parameters' prior weight, with a weak log-normal prior on the length scales
// centred at 0.5 so that a handful of points cannot send them to the bounds.
double GaussianProcess::LogMarginalLikelihood(const Eigen::VectorXd& params) const {
  const Eigen::Index n = x_.rows(), d = x_.cols();
  std::vector<double> means;
  const Eigen::VectorXd y = Residual(params, &means);
  Eigen::MatrixXd k = Kernel(x_, task_, x_, task_, params);
  k.diagonal().array() += std::exp(params(d + 1)) + 1e-9;
  Eigen::LLT<Eigen::MatrixXd> llt(k);
  if (llt.info() != Eigen::Success) return -std::numeric_limits<double>::infinity();
  const Eigen::VectorXd alpha = llt.solve(y);
  const double log_det = 2.0 * llt.matrixLLT().diagonal().array().log().sum();
  double prior = 0.0;
  for (Eigen::Index j = 0; j < d; ++j) {
    const double z = (params(j) - std::log(0.5)) / 1.5;
    prior -= 0.5 * z * z;
  }
  return -0.5 * y.dot(alpha) - 0.5 * log_det - 0.5 * static_cast<double>(n) * std::log(2 * M_PI) +
         prior;
}

void GaussianProcess::Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y,
                          const Eigen::VectorXd& prior, const std::vector<int>& task, int tasks,
                          bool learn_weight, int max_sweeps, double min_noise_sd) {
  const Eigen::Index d = x.cols(), n = x.rows();
  KAREUS_CHECK(tasks >= 1 && (task.empty() || static_cast<Eigen::Index>(task.size()) == n));
  KAREUS_CHECK(prior.size() == 0 || prior.size() == n);
  x_ = x;
  y_raw_ = y;
  prior_ = prior;
  learn_weight_ = learn_weight;
  task_ = task;
  tasks_ = tasks;
  std::vector<int> count(tasks, 0);
  for (Eigen::Index i = 0; i < n; ++i) {
    const int t = task.empty() ? 0 : task[i];
    KAREUS_CHECK(t >= 0 && t < tasks);
    ++count[t];
  }
  KAREUS_CHECK(count[0] > 0) << "a fit needs rows of the target";
  // One scale for every prior weight: the values' spread about their task means.
  {
    y_scale_ = 1.0;
    Eigen::VectorXd no_prior = Eigen::VectorXd::Zero(WeightIndex() + 1);
    std::vector<double> means;
    const Eigen::VectorXd saved = prior_;
    prior_.resize(0);
    const Eigen::VectorXd centred = Residual(no_prior, &means);
    prior_ = saved;
    y_scale_ = std::sqrt(centred.array().square().mean());
    if (!(y_scale_ > 1e-12)) y_scale_ = 1.0;
  }

  additive_ = prior.size() > 0;
  const Eigen::Index params =
      d + 2 + (tasks - 1) + (prior.size() > 0 ? 1 : 0) + (additive_ ? 2 : 0);
  if (params_.size() != params) {
    params_ = Eigen::VectorXd::Constant(params, std::log(0.5));
    params_(d) = 0.0;
    params_(d + 1) = std::log(1e-3);
    for (Eigen::Index s = d + 2; s < d + 1 + tasks; ++s) params_(s) = 0.0;  // rho = 0.5
    if (prior.size() > 0) params_(WeightIndex()) = 1.0;                     // start from the model
    if (additive_) params_(AdditiveIndex()) = params_(AdditiveIndex() + 1) = -1.0;
  }
  if (prior.size() > 0 && !learn_weight) params_(WeightIndex()) = 1.0;
  const bool residual = prior.size() > 0;
  // The noise variance in standardized units: with a prior, its floor from `min_noise_sd`,
  // never above the upper bound (a floor that high would say the values are all noise).
  // Without a prior the GP models the whole function, whose narrow features (a 1-SM optimum
  // at the space's edge, wave quantization) a floored fit smooths away; there the readings'
  // noise is a small part of what it explains and no floor applies.
  const double max_log_noise = residual ? kMaxLogNoise : kMaxLogNoiseNoPrior;
  const double min_log_noise =
      residual && min_noise_sd > 0.0
          ? std::clamp(2.0 * std::log(min_noise_sd / y_scale_), kMinLogNoise, max_log_noise)
          : kMinLogNoise;
  params_(d + 1) = std::clamp(params_(d + 1), min_log_noise, max_log_noise);
  auto clamp = [&](Eigen::Index i, double v) {
    if (i < d) return std::clamp(v, kMinLogLength, kMaxLogLength);
    if (i == d)
      return std::clamp(v, residual ? kMinLogSignal : kMinLogSignalNoPrior, kMaxLogSignal);
    if (i == d + 1) return std::clamp(v, min_log_noise, max_log_noise);
    if (prior.size() > 0 && i == WeightIndex()) return std::clamp(v, 0.0, 1.0);
    if (additive_ && i >= AdditiveIndex()) return std::clamp(v, kMinLogSignal, kMaxLogSignal);
    return std::clamp(v, kMinLogit, kMaxLogit);
  };
  const Eigen::Index searched = params;
  // Pattern search (coordinate steps, halving when a sweep finds nothing): derivative-free,
  // deterministic, and cheap for the <= 12 hyperparameters and <= a few hundred points of a
  // partition space. Steps are in log space, on the logit for similarities, and plain for the
  // prior weight (a first step of 1 tries dropping the prior outright).
  double best = LogMarginalLikelihood(params_);
  double step = 1.0;
  for (int sweep = 0; sweep < max_sweeps && step > 0.06; ++sweep) {
    bool improved = false;
    for (Eigen::Index i = 0; i < searched; ++i) {
      if (prior.size() > 0 && !learn_weight && i == WeightIndex()) continue;
      for (double sign : {1.0, -1.0}) {
        Eigen::VectorXd trial = params_;
        trial(i) = clamp(i, trial(i) + sign * step);
        if (trial(i) == params_(i)) continue;
        const double value = LogMarginalLikelihood(trial);
        if (value > best + 1e-9) {
          best = value;
          params_ = trial;
          improved = true;
          break;
        }
      }
    }
    if (!improved) step *= 0.5;
  }

  if (prior.size() > 0 && learn_weight && params_(WeightIndex()) < kMinPriorWeight) {
    // The residuals say the model explains the values worse than half of it would: fall back
    // to the GP without a prior (the no-prior fit exactly; the next fit tries the prior again).
    Fit(x, y, Eigen::VectorXd(), task, tasks, learn_weight, max_sweeps, min_noise_sd);
    return;
  }
  y_ = Residual(params_, &task_mean_);
  Eigen::MatrixXd k = Kernel(x_, task_, x_, task_, params_);
  k.diagonal().array() += std::exp(params_(d + 1)) + 1e-9;
  Eigen::LLT<Eigen::MatrixXd> llt(k);
  while (llt.info() != Eigen::Success) {  // numerically singular: add jitter until it is not
    k.diagonal().array() += 1e-6;
    llt.compute(k);
  }
  chol_l_ = llt.matrixL();
  alpha_ = llt.solve(y_);
}

void GaussianProcess::Predict(const Eigen::MatrixXd& x, const Eigen::VectorXd& prior,
                              Eigen::VectorXd* mean, Eigen::VectorXd* std) const {
  const Eigen::Index d = x.cols();
  const Eigen::MatrixXd ks = Kernel(x, {}, x_, task_, params_);  // m x n, target task
  *mean = (ks * alpha_).array() * y_scale_ + task_mean_[0];
  if (prior_.size() > 0) {
    KAREUS_CHECK(prior.size() == x.rows()) << "the fit had a prior: predictions need it";
    *mean += Weight(params_) * prior;
  }
  const Eigen::MatrixXd v = chol_l_.triangularView<Eigen::Lower>().solve(ks.transpose());
  double signal = std::exp(params_(d));
  if (additive_)
    signal += std::exp(params_(AdditiveIndex())) + std::exp(params_(AdditiveIndex() + 1));
  const Eigen::VectorXd var = (signal - v.colwise().squaredNorm().array()).max(1e-12);
  *std = var.array().sqrt() * y_scale_;
}

Eigen::MatrixXd GaussianProcess::Sample(const Eigen::MatrixXd& x, const Eigen::VectorXd& prior,
                                        int count, uint64_t seed) const {
  const Eigen::Index m = x.rows();
  Eigen::VectorXd mean, std;
  Predict(x, prior, &mean, &std);
  const Eigen::MatrixXd ks = Kernel(x, {}, x_, task_, params_);
  const Eigen::MatrixXd v = chol_l_.triangularView<Eigen::Lower>().solve(ks.transpose());
  Eigen::MatrixXd cov = Kernel(x, {}, x, {}, params_) - v.transpose() * v;
  cov *= y_scale_ * y_scale_;
  const double jitter = 1e-10 + 1e-8 * cov.diagonal().cwiseAbs().maxCoeff();
  cov.diagonal().array() += jitter;
  Eigen::LLT<Eigen::MatrixXd> llt(cov);
  for (int attempt = 0; llt.info() != Eigen::Success && attempt < 20; ++attempt) {
    cov.diagonal().array() += jitter * std::pow(10.0, attempt + 1);
    llt.compute(cov);
  }
  Rng rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Eigen::MatrixXd z(m, count);
  for (Eigen::Index j = 0; j < count; ++j) {
    for (Eigen::Index i = 0; i < m; ++i) z(i, j) = normal(rng);
  }
  Eigen::MatrixXd draws;
  if (llt.info() == Eigen::Success) {
    draws = llt.matrixL() * z;
  } else {  // marginal draws when the covariance will not factor
    draws = z.array().colwise() * std.array();
  }
  draws.colwise() += mean;
  return draws;
}

std::vector<double> GaussianProcess::LeaveOneOutResiduals() const {
  const Eigen::Index n = x_.rows();
  // [K^-1]_ii = || L^-1 e_i ||^2.
  const Eigen::MatrixXd l_inv =
      chol_l_.triangularView<Eigen::Lower>().solve(Eigen::MatrixXd::Identity(n, n));
  const Eigen::VectorXd k_inv_diag = l_inv.colwise().squaredNorm();
  std::vector<double> out;
  for (Eigen::Index i = 0; i < n; ++i) {
    if (!task_.empty() && task_[i] != 0) continue;
    out.push_back(alpha_(i) / k_inv_diag(i) * y_scale_);
  }
  return out;
}

double GaussianProcess::Similarity(int s) const {
  KAREUS_CHECK(s >= 1 && s < tasks_);
  return Sigmoid(params_(x_.cols() + 1 + s));
}

void GaussianProcessSurrogate::Fit(const TrainingRows& rows) {
  const std::size_t n = rows.x.size();
  KAREUS_CHECK(n > 0 && rows.time_s.size() == n && rows.dynamic_energy_j.size() == n);
  has_prior_ = rows.has_prior();
  KAREUS_CHECK(!has_prior_ ||
               (rows.prior_time_s.size() == n && rows.prior_dynamic_energy_j.size() == n));
  const Eigen::MatrixXd xm = ToMatrix(rows.x);
  const Eigen::VectorXd prior_t = has_prior_ ? Logs(rows.prior_time_s) : Eigen::VectorXd();
  const Eigen::VectorXd prior_e =
      has_prior_ ? Logs(rows.prior_dynamic_energy_j) : Eigen::VectorXd();
  time_.Fit(xm, Logs(rows.time_s), prior_t, rows.task, rows.tasks, options_.learn_prior_weight,
            options_.gp_max_sweeps, options_.gp_min_time_noise);
  // Dynamic energy E - P_static t carries at least the total energy's relative noise (more:
  // the same absolute noise on a smaller value), so the total's floor is a floor for it.
  energy_.Fit(xm, Logs(rows.dynamic_energy_j), prior_e, rows.task, rows.tasks,
              options_.learn_prior_weight, options_.gp_max_sweeps, options_.gp_min_energy_noise);
  tasks_ = rows.tasks;
}

Predictions GaussianProcessSurrogate::Predict(
    const std::vector<std::vector<double>>& x, const std::vector<double>& prior_time_s,
    const std::vector<double>& prior_dynamic_energy_j) const {
  Predictions out;
  if (x.empty()) return out;
  const Eigen::MatrixXd xm = ToMatrix(x);
  Eigen::VectorXd mt, st, me, se;
  time_.Predict(xm, has_prior_ ? Logs(prior_time_s) : Eigen::VectorXd(), &mt, &st);
  energy_.Predict(xm, has_prior_ ? Logs(prior_dynamic_energy_j) : Eigen::VectorXd(), &me, &se);
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

HeldOutError GaussianProcessSurrogate::CrossValidate() const {
  // The GPs model log values, so their residuals are already log(value / prediction).
  return {.time = Rms(time_.LeaveOneOutResiduals()),
          .dynamic_energy = Rms(energy_.LeaveOneOutResiduals())};
}

PriorUse GaussianProcessSurrogate::Use() const {
  PriorUse use;
  use.time_weight = time_.PriorWeight();
  use.energy_weight = energy_.PriorWeight();
  use.held_out = CrossValidate();
  for (int s = 1; s < tasks_; ++s) {
    use.related_similarity.push_back(0.5 * (time_.Similarity(s) + energy_.Similarity(s)));
  }
  return use;
}

std::vector<Predictions> GaussianProcessSurrogate::Sample(
    const std::vector<std::vector<double>>& x, const std::vector<double>& prior_time_s,
    const std::vector<double>& prior_dynamic_energy_j, int count, uint64_t seed) const {
  std::vector<Predictions> out(count);
  if (x.empty() || count <= 0) return out;
  const Eigen::MatrixXd xm = ToMatrix(x);
  const Eigen::MatrixXd t = time_.Sample(xm, has_prior_ ? Logs(prior_time_s) : Eigen::VectorXd(),
                                         count, DeriveSeed(seed, 1));
  const Eigen::MatrixXd e =
      energy_.Sample(xm, has_prior_ ? Logs(prior_dynamic_energy_j) : Eigen::VectorXd(), count,
                     DeriveSeed(seed, 2));
  for (int j = 0; j < count; ++j) {
    out[j].time_s.resize(x.size());
    out[j].dynamic_energy_j.resize(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      out[j].time_s[i] = std::exp(t(static_cast<Eigen::Index>(i), j));
      out[j].dynamic_energy_j[i] = std::exp(e(static_cast<Eigen::Index>(i), j));
    }
  }
  return out;
}

}  // namespace kareus::mobo::internal
