// SPDX-License-Identifier: Apache-2.0
#include "mobo/xgb_ensemble.h"

#include <xgboost/c_api.h>

#include <cmath>
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

struct XgbEnsemble::Model {
  BoosterHandle booster = nullptr;
  double mean = 0.0;   // targets are standardized before training: the trees do not care,
  double scale = 1.0;  // but XGBoost's base_score of 0.5 then sits near the data
  ~Model() {
    if (booster != nullptr) XGBoosterFree(booster);
  }
};

XgbEnsemble::XgbEnsemble(const SurrogateOptions& options) : options_(options) {
  static std::once_flag quiet;
  std::call_once(quiet, [] { XGBSetGlobalConfig(R"({"verbosity": 0})"); });
}

XgbEnsemble::~XgbEnsemble() { FreeModels(); }

void XgbEnsemble::FreeModels() {
  for (Model* m : time_models_) delete m;
  for (Model* m : energy_models_) delete m;
  time_models_.clear();
  energy_models_.clear();
}

void XgbEnsemble::Fit(const std::vector<std::vector<double>>& x,
                      const std::vector<double>& time_s,
                      const std::vector<double>& dynamic_energy_j) {
  KAREUS_CHECK(!x.empty() && x.size() == time_s.size() && x.size() == dynamic_energy_j.size());
  FreeModels();
  const std::size_t n = x.size();
  auto train = [&](const std::vector<double>& target, const std::vector<std::size_t>& rows,
                   uint64_t seed) {
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
    DMatrixHandle matrix = MakeMatrix(x, rows);
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
        {"nthread", "1"},  // determinism: one thread, fixed seed
        {"seed", std::to_string(seed & 0x7fffffffULL)},  // XGBoost parses a signed long
        {"verbosity", "0"},
    };
    for (const auto& [name, value] : params) {
      XgbCheck(XGBoosterSetParam(model->booster, name.c_str(), value.c_str()),
               "XGBoosterSetParam");
    }
    for (int round = 0; round < options_.xgb_rounds; ++round) {
      XgbCheck(XGBoosterUpdateOneIter(model->booster, round, matrix), "XGBoosterUpdateOneIter");
    }
    XGDMatrixFree(matrix);
    return model;
  };

  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  time_models_.push_back(train(time_s, all, options_.seed));
  energy_models_.push_back(train(dynamic_energy_j, all, options_.seed));
  const std::size_t draws = std::max<std::size_t>(
      2, static_cast<std::size_t>(std::lround(options_.xgb_bootstrap_fraction * n)));
  for (int member = 0; member < options_.xgb_members; ++member) {
    // Published: RandomState(42 + i).choice(n, round(0.8 n), replace=True), XGB seed 42 + i.
    const uint64_t seed = options_.seed + static_cast<uint64_t>(member);
    Rng rng(DeriveSeed(seed, n));
    std::uniform_int_distribution<std::size_t> pick(0, n - 1);
    std::vector<std::size_t> rows(draws);
    for (auto& r : rows) r = pick(rng);
    energy_models_.push_back(train(dynamic_energy_j, rows, seed));
    time_models_.push_back(train(time_s, rows, seed));
  }
}

Predictions XgbEnsemble::Predict(const std::vector<std::vector<double>>& x) const {
  KAREUS_CHECK(!time_models_.empty()) << "Predict before Fit";
  const std::size_t n = x.size();
  Predictions out;
  if (n == 0) return out;
  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  DMatrixHandle matrix = MakeMatrix(x, all);
  auto predict = [&](const Model* model) {
    bst_ulong length = 0;
    const float* result = nullptr;
    XgbCheck(XGBoosterPredict(model->booster, matrix, 0, 0, 0, &length, &result),
             "XGBoosterPredict");
    KAREUS_CHECK(length == n);
    std::vector<double> values(n);
    for (std::size_t i = 0; i < n; ++i) values[i] = model->mean + model->scale * result[i];
    return values;
  };
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
  XGDMatrixFree(matrix);
  return out;
}

}  // namespace kareus::mobo::internal
