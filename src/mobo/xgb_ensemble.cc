// SPDX-License-Identifier: Apache-2.0
#include "mobo/xgb_ensemble.h"

#include <xgboost/c_api.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>

#include "kareus/common/context.h"
#include "kareus/common/error.h"

namespace kareus::mobo::internal {
namespace {

void XgbCheck(int rc, const char* what) {
  KAREUS_CHECK(rc == 0) << "XGBoost " << what << " failed: " << XGBGetLastError();
}

// Rows as a dense float matrix owned by XGBoost.
DMatrixHandle MakeMatrix(const std::vector<std::vector<double>>& x,
                         const std::vector<std::size_t>& rows) {
  const std::size_t cols = x.empty() ? 0 : x[0].size();
  std::vector<float> data;
  data.reserve(rows.size() * cols);
  for (std::size_t r : rows) {
    for (double v : x[r]) data.push_back(static_cast<float>(v));
  }
  DMatrixHandle matrix = nullptr;
  XgbCheck(XGDMatrixCreateFromMat(data.data(), rows.size(), cols, std::nanf(""), &matrix),
           "XGDMatrixCreateFromMat");
  return matrix;
}

}  // namespace

struct XgbModels::Model {
  BoosterHandle booster = nullptr;
  double mean = 0.0;   // targets are standardized before training: the trees do not care,
  double scale = 1.0;  // but XGBoost's base_score of 0.5 then sits near the data
  ~Model() {
    if (booster != nullptr) XGBoosterFree(booster);
  }
  // The booster's predictions for the `rows` rows of `matrix`, back in target units.
  std::vector<double> Predict(DMatrixHandle matrix, std::size_t rows) const {
    bst_ulong length = 0;
    const float* result = nullptr;
    XgbCheck(XGBoosterPredict(booster, matrix, 0, 0, 0, &length, &result), "XGBoosterPredict");
    KAREUS_CHECK(length == rows);
    std::vector<double> values(rows);
    for (std::size_t i = 0; i < rows; ++i) values[i] = mean + scale * result[i];
    return values;
  }
};

XgbModels::~XgbModels() { FreeModels(); }

void XgbModels::FreeModels() {
  for (Model* m : time_models_) delete m;
  for (Model* m : energy_models_) delete m;
  time_models_.clear();
  energy_models_.clear();
}

XgbModels::Model* XgbModels::Train(const std::vector<double>& target,
                                   const std::vector<std::size_t>& rows, uint64_t seed) const {
  auto* model = new Model;
  double mean = 0.0;
  for (std::size_t r : rows) mean += target[r];
  mean /= static_cast<double>(rows.size());
  double var = 0.0;
  for (std::size_t r : rows) var += (target[r] - mean) * (target[r] - mean);
  model->mean = mean;
  model->scale = std::sqrt(var / static_cast<double>(rows.size()));
  if (!(model->scale > 0.0)) model->scale = std::max(std::abs(mean), 1e-30);
  std::vector<float> labels;
  labels.reserve(rows.size());
  for (std::size_t r : rows) {
    labels.push_back(static_cast<float>((target[r] - model->mean) / model->scale));
  }
  DMatrixHandle matrix = MakeMatrix(x_, rows);
  XgbCheck(XGDMatrixSetFloatInfo(matrix, "label", labels.data(), labels.size()),
           "XGDMatrixSetFloatInfo");
  XgbCheck(XGBoosterCreate(&matrix, 1, &model->booster), "XGBoosterCreate");
  const std::string params[][2] = {
      {"objective", "reg:squarederror"},
      {"eval_metric", "rmse"},
      {"max_depth", std::to_string(options_.xgb_max_depth)},
      {"eta", std::to_string(options_.xgb_eta)},
      {"subsample", std::to_string(options_.xgb_subsample)},
      {"colsample_bytree", std::to_string(options_.xgb_colsample)},
      {"min_child_weight", "1"},
      {"tree_method", "exact"},
      {"nthread", "1"},                                // determinism: one thread, fixed seed
      {"seed", std::to_string(seed & 0x7fffffffULL)},  // XGBoost parses a signed long
      {"verbosity", "0"},
  };
  for (const auto& [name, value] : params) {
    XgbCheck(XGBoosterSetParam(model->booster, name.c_str(), value.c_str()), "XGBoosterSetParam");
  }
  for (int round = 0; round < options_.xgb_rounds; ++round) {
    XgbCheck(XGBoosterUpdateOneIter(model->booster, round, matrix), "XGBoosterUpdateOneIter");
  }
  XGDMatrixFree(matrix);
  return model;
}

std::vector<std::vector<double>> XgbModels::Features(
    const std::vector<std::vector<double>>& x) const {
  if (tasks_ == 1) return x;
  std::vector<std::vector<double>> out = x;
  for (auto& row : out) row.push_back(0.0);  // the target's task id
  return out;
}

void XgbModels::Fit(const std::vector<std::vector<double>>& x, const std::vector<double>& time_s,
                    const std::vector<double>& dynamic_energy_j, const std::vector<int>& task,
                    int tasks) {
  KAREUS_CHECK(!x.empty() && x.size() == time_s.size() && x.size() == dynamic_energy_j.size());
  KAREUS_CHECK(tasks >= 1 && (task.empty() || task.size() == x.size()));
  FreeModels();
  const std::size_t n = x.size();
  tasks_ = tasks;
  task_ = task.empty() ? std::vector<int>(n, 0) : task;
  x_ = x;
  time_ = time_s;
  energy_ = dynamic_energy_j;
  time_scale_ = energy_scale_ = 1.0;
  if (tasks > 1) {
    std::vector<double> t_mean(tasks, 0.0), e_mean(tasks, 0.0);
    std::vector<int> count(tasks, 0);
    for (std::size_t i = 0; i < n; ++i) {
      t_mean[task_[i]] += time_s[i];
      e_mean[task_[i]] += dynamic_energy_j[i];
      ++count[task_[i]];
    }
    KAREUS_CHECK(count[0] > 0) << "a fit needs rows of the target";
    for (int t = 0; t < tasks; ++t) {
      t_mean[t] /= std::max(1, count[t]);
      e_mean[t] /= std::max(1, count[t]);
    }
    for (std::size_t i = 0; i < n; ++i) {
      x_[i].push_back(static_cast<double>(task_[i]));
      time_[i] /= t_mean[task_[i]];
      energy_[i] /= e_mean[task_[i]];
    }
    time_scale_ = t_mean[0];
    energy_scale_ = e_mean[0];
  }
  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  time_models_.push_back(Train(time_, all, options_.seed));
  energy_models_.push_back(Train(energy_, all, options_.seed));
  const std::size_t draws = std::max<std::size_t>(
      2, static_cast<std::size_t>(std::lround(options_.xgb_bootstrap_fraction * n)));
  for (int member = 0; member < options_.xgb_members; ++member) {
    // Published: RandomState(42 + i).choice(n, round(0.8 n), replace=True), XGB seed 42 + i.
    const uint64_t seed = options_.seed + static_cast<uint64_t>(member);
    Rng rng(DeriveSeed(seed, n));
    std::uniform_int_distribution<std::size_t> pick(0, n - 1);
    std::vector<std::size_t> rows(draws);
    for (auto& r : rows) r = pick(rng);
    energy_models_.push_back(Train(energy_, rows, seed));
    time_models_.push_back(Train(time_, rows, seed));
  }
}

HeldOutError XgbModels::CrossValidate() const {
  KAREUS_CHECK(!time_models_.empty()) << "CrossValidate before Fit";
  // 5-fold over the target's rows (related rows always train); fold of row i: i mod 5.
  std::vector<std::size_t> target;
  for (std::size_t i = 0; i < x_.size(); ++i) {
    if (task_[i] == 0) target.push_back(i);
  }
  const std::size_t folds = std::min<std::size_t>(5, target.size());
  if (folds < 2) return {};
  double t_sum = 0.0, e_sum = 0.0;
  for (std::size_t f = 0; f < folds; ++f) {
    std::vector<std::size_t> train, held;
    for (std::size_t i = 0; i < x_.size(); ++i) train.push_back(i);
    for (std::size_t k = f; k < target.size(); k += folds) held.push_back(target[k]);
    std::vector<bool> out(x_.size(), false);
    for (std::size_t i : held) out[i] = true;
    train.erase(std::remove_if(train.begin(), train.end(), [&](std::size_t i) { return out[i]; }),
                train.end());
    const std::unique_ptr<Model> t_model(Train(time_, train, options_.seed));
    const std::unique_ptr<Model> e_model(Train(energy_, train, options_.seed));
    DMatrixHandle matrix = MakeMatrix(x_, held);
    auto predict = [&](const Model* model, const std::vector<double>& target_values) {
      const std::vector<double> predicted = model->Predict(matrix, held.size());
      double sum = 0.0;
      for (std::size_t k = 0; k < held.size(); ++k) {
        const double p = std::max(predicted[k], 1e-30);
        const double v = std::max(target_values[held[k]], 1e-30);
        sum += std::log(p / v) * std::log(p / v);
      }
      return sum;
    };
    t_sum += predict(t_model.get(), time_);
    e_sum += predict(e_model.get(), energy_);
    XGDMatrixFree(matrix);
  }
  const double n = static_cast<double>(target.size());
  return {.time = std::sqrt(t_sum / n), .dynamic_energy = std::sqrt(e_sum / n)};
}

Predictions XgbModels::Predict(const std::vector<std::vector<double>>& x) const {
  KAREUS_CHECK(!time_models_.empty()) << "Predict before Fit";
  const std::size_t n = x.size();
  Predictions out;
  if (n == 0) return out;
  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  DMatrixHandle matrix = MakeMatrix(Features(x), all);
  auto predict = [&](const Model* model) { return model->Predict(matrix, n); };
  auto mean_and_spread = [&](const std::vector<Model*>& models, std::vector<double>* mean,
                             std::vector<double>* spread) {
    *mean = predict(models[0]);
    spread->assign(n, 0.0);
    if (models.size() < 3) return;
    std::vector<double> sum(n, 0.0), sum_sq(n, 0.0);
    for (std::size_t m = 1; m < models.size(); ++m) {
      const std::vector<double> v = predict(models[m]);
      for (std::size_t i = 0; i < n; ++i) {
        sum[i] += v[i];
        sum_sq[i] += v[i] * v[i];
      }
    }
    const double k = static_cast<double>(models.size() - 1);
    for (std::size_t i = 0; i < n; ++i) {
      const double mu = sum[i] / k;
      (*spread)[i] = std::sqrt(std::max(0.0, sum_sq[i] / k - mu * mu));
    }
  };
  mean_and_spread(time_models_, &out.time_s, &out.time_std_s);
  mean_and_spread(energy_models_, &out.dynamic_energy_j, &out.dynamic_energy_std_j);
  for (std::size_t i = 0; i < n; ++i) {  // back from the target task's relative units
    out.time_s[i] *= time_scale_;
    out.time_std_s[i] *= time_scale_;
    out.dynamic_energy_j[i] *= energy_scale_;
    out.dynamic_energy_std_j[i] *= energy_scale_;
  }
  XGDMatrixFree(matrix);
  return out;
}

std::vector<Predictions> XgbModels::Members(const std::vector<std::vector<double>>& x) const {
  KAREUS_CHECK(!time_models_.empty()) << "Members before Fit";
  const std::size_t n = x.size();
  std::vector<Predictions> out;
  if (n == 0) return out;
  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  DMatrixHandle matrix = MakeMatrix(Features(x), all);
  auto predict = [&](const Model* model, double scale) {
    std::vector<double> values = model->Predict(matrix, n);
    for (double& v : values) v = std::max(1e-30, v * scale);
    return values;
  };
  const std::size_t first = time_models_.size() > 1 ? 1 : 0;  // members, else the point model
  for (std::size_t m = first; m < time_models_.size(); ++m) {
    Predictions p;
    p.time_s = predict(time_models_[m], time_scale_);
    p.dynamic_energy_j = predict(energy_models_[m], energy_scale_);
    out.push_back(std::move(p));
  }
  XGDMatrixFree(matrix);
  return out;
}

std::vector<Predictions> XgbEnsemble::Sample(const std::vector<std::vector<double>>& x,
                                             const std::vector<double>& prior_time_s,
                                             const std::vector<double>& prior_dynamic_energy_j,
                                             int count, uint64_t seed) const {
  (void)seed;  // the members are the draws
  std::vector<Predictions> out;
  if (x.empty() || count <= 0) return out;
  const bool use_time = has_prior_ && use_.time_weight > 0.5;
  const bool use_energy = has_prior_ && use_.energy_weight > 0.5;
  const std::vector<Predictions> plain =
      !use_time || !use_energy ? plain_.Members(x) : std::vector<Predictions>();
  const std::vector<Predictions> residual =
      use_time || use_energy ? residual_.Members(x) : std::vector<Predictions>();
  const std::size_t members = std::max(plain.size(), residual.size());
  for (int j = 0; j < count; ++j) {
    const std::size_t m = static_cast<std::size_t>(j) % members;
    Predictions p;
    p.time_s = use_time ? residual[m].time_s : plain[m].time_s;
    p.dynamic_energy_j = use_energy ? residual[m].dynamic_energy_j : plain[m].dynamic_energy_j;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (use_time) p.time_s[i] *= prior_time_s[i];
      if (use_energy) p.dynamic_energy_j[i] *= prior_dynamic_energy_j[i];
    }
    out.push_back(std::move(p));
  }
  return out;
}

XgbEnsemble::XgbEnsemble(const SurrogateOptions& options)
    : options_(options), plain_(options), residual_(options) {
  static std::once_flag quiet;
  std::call_once(quiet, [] { XGBSetGlobalConfig(R"({"verbosity": 0})"); });
}

void XgbEnsemble::Fit(const TrainingRows& rows) {
  const std::size_t n = rows.x.size();
  KAREUS_CHECK(n > 0 && rows.time_s.size() == n && rows.dynamic_energy_j.size() == n);
  has_prior_ = rows.has_prior();
  use_ = PriorUse{};
  if (!has_prior_ || options_.learn_prior_weight) {
    plain_.Fit(rows.x, rows.time_s, rows.dynamic_energy_j, rows.task, rows.tasks);
  }
  if (!has_prior_) return;
  KAREUS_CHECK(rows.prior_time_s.size() == n && rows.prior_dynamic_energy_j.size() == n);
  std::vector<double> time_ratio(n), energy_ratio(n);
  for (std::size_t i = 0; i < n; ++i) {
    time_ratio[i] = std::max(rows.time_s[i], 1e-30) / std::max(rows.prior_time_s[i], 1e-30);
    energy_ratio[i] =
        std::max(rows.dynamic_energy_j[i], 1e-30) / std::max(rows.prior_dynamic_energy_j[i], 1e-30);
  }
  residual_.Fit(rows.x, time_ratio, energy_ratio, rows.task, rows.tasks);
  const HeldOutError with = residual_.CrossValidate();
  if (!options_.learn_prior_weight) {
    use_.time_weight = use_.energy_weight = 1.0;
    use_.held_out = with;
    return;
  }
  // The residual's error in log(ratio) is its error in log(value): the two compare directly.
  // Ties go to the prior.
  const HeldOutError without = plain_.CrossValidate();
  use_.time_weight = with.time <= without.time ? 1.0 : 0.0;
  use_.energy_weight = with.dynamic_energy <= without.dynamic_energy ? 1.0 : 0.0;
  use_.held_out = {.time = std::min(with.time, without.time),
                   .dynamic_energy = std::min(with.dynamic_energy, without.dynamic_energy)};
}

Predictions XgbEnsemble::Predict(const std::vector<std::vector<double>>& x,
                                 const std::vector<double>& prior_time_s,
                                 const std::vector<double>& prior_dynamic_energy_j) const {
  const bool use_time = has_prior_ && use_.time_weight > 0.5;
  const bool use_energy = has_prior_ && use_.energy_weight > 0.5;
  Predictions out;
  if (!use_time || !use_energy) out = plain_.Predict(x);
  if (!use_time && !use_energy) return out;
  KAREUS_CHECK(prior_time_s.size() == x.size() && prior_dynamic_energy_j.size() == x.size());
  const Predictions r = residual_.Predict(x);
  if (out.time_s.empty()) out = r;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (use_time) {
      out.time_s[i] = prior_time_s[i] * r.time_s[i];
      out.time_std_s[i] = prior_time_s[i] * r.time_std_s[i];
    }
    if (use_energy) {
      out.dynamic_energy_j[i] = prior_dynamic_energy_j[i] * r.dynamic_energy_j[i];
      out.dynamic_energy_std_j[i] = prior_dynamic_energy_j[i] * r.dynamic_energy_std_j[i];
    }
  }
  return out;
}

HeldOutError XgbEnsemble::CrossValidate() const {
  return has_prior_ ? use_.held_out : plain_.CrossValidate();
}

}  // namespace kareus::mobo::internal
