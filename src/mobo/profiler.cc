// SPDX-License-Identifier: Apache-2.0
#include "kareus/mobo/profiler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/progress.h"
#include "kareus/measure/store.h"
#include "kareus/mobo/search_space.h"
#include "mobo/baselines.h"

namespace kareus::mobo {
namespace internal {
namespace {

// The smallest automatic initial design: enough points for a first surrogate fit over the
// three knobs; coverage of every clock then comes from the per-clock acquisition.
constexpr int kMinInitialDesign = 6;

struct Plan {
  const workload::PartitionType* type = nullptr;
  SearchSpace space;
  int64_t budget = 0;
  int initial = 0;
  int batch = 0;
};

}  // namespace
}  // namespace internal

std::optional<OptionError> ProfileOptions::Validate() const {
  if (budget < 0) return OptionError{"budget", Describe(budget), "must be >= 0 (0: budget_fraction)"};
  if (!(budget_fraction > 0.0 && budget_fraction <= 1.0)) {
    return OptionError{"budget_fraction", Describe(budget_fraction), "must be in (0, 1]"};
  }
  if (initial_design < 0 || initial_design == 1) {
    return OptionError{"initial_design", Describe(initial_design), "must be 0 (auto) or at least 2"};
  }
  if (!(initial_fraction > 0.0 && initial_fraction <= 1.0)) {
    return OptionError{"initial_fraction", Describe(initial_fraction), "must be in (0, 1]"};
  }
  if (batch_size < 0) return OptionError{"batch_size", Describe(batch_size), "must be >= 0 (0: auto)"};
  return std::nullopt;
}

namespace internal {
namespace {

// Validates the budget of one type before anything is measured.
Plan PlanType(const workload::PartitionType& type, const hw::GpuSpec& gpu,
              const ProfileOptions& options) {
  Plan plan{.type = &type, .space = SearchSpace::For(gpu, type, options.full_grid)};
  const int64_t size = plan.space.Size();
  if (!type.tunable) {  // fixed knobs: every clock, no search
    plan.budget = size;
    plan.initial = static_cast<int>(size);
    plan.batch = 0;
    return plan;
  }
  if (options.budget > 0) {
    plan.budget = options.budget;
  } else {
    plan.budget = static_cast<int64_t>(std::ceil(options.budget_fraction * size - 1e-9));
  }
  if (plan.budget > size) {
    ThrowInput("budget", std::to_string(plan.budget),
               "exceeds the search space of partition " + type.name + " (" +
                   std::to_string(size) + " configurations)");
  }
  if (options.initial_design > 0) {
    plan.initial = options.initial_design;
  } else {
    plan.initial = std::max<int>(
        kMinInitialDesign, static_cast<int>(std::lround(options.initial_fraction * plan.budget)));
  }
  if (plan.budget < plan.initial) {
    ThrowInput("budget", std::to_string(plan.budget),
               "below the initial design of partition " + type.name + " (" +
                   std::to_string(plan.initial) +
                   " configurations)");
  }
  const int64_t rest = plan.budget - plan.initial;
  if (options.batch_size > 0) {
    plan.batch = options.batch_size;
  } else {
    // About eight batches: sample efficiency grows with the number of model updates, while a
    // real GPU pays a process and communicator start per batch (§3.7).
    plan.batch = static_cast<int>(std::max<int64_t>(3, (rest + 7) / 8));
  }
  return plan;
}

// Latin-hypercube initial design on the discrete levels: for each knob, point j takes level
// floor((pi(j) + u) m / n) of its m levels (pi a random permutation, u uniform), so every knob's
// levels are covered as evenly as n allows and the knobs are paired at random. A duplicate is
// moved to the nearest free configuration of its clock.
std::vector<int64_t> InitialDesign(const SearchSpace& space, int count, Rng& rng) {
  const int levels[3] = {static_cast<int>(space.clocks_mhz().size()),
                         static_cast<int>(space.sms().size()),
                         static_cast<int>(space.slots().size())};
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<std::vector<int>> level(3, std::vector<int>(count));
  for (int d = 0; d < 3; ++d) {
    std::vector<int> perm(count);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < count; ++j) {
      level[d][j] = std::min(levels[d] - 1,
                             static_cast<int>((perm[j] + unit(rng)) * levels[d] / count));
    }
  }
  const int64_t per_clock = static_cast<int64_t>(levels[1]) * levels[2];
  std::set<int64_t> chosen;
  std::vector<int64_t> design;
  for (int j = 0; j < count; ++j) {
    int64_t index = level[0][j] * per_clock + static_cast<int64_t>(level[1][j]) * levels[2] +
                    level[2][j];
    for (int64_t step = 0; chosen.contains(index) && step < space.Size(); ++step) {
      index = (index + 1) % space.Size();  // next configuration (same clock first)
    }
    chosen.insert(index);
    design.push_back(index);
  }
  return design;
}

class PartitionRun {
 public:
  PartitionRun(const Plan& plan, const ProfileOptions& options, measure::Backend& backend,
               measure::MeasurementStore* store, Progress& progress, uint64_t seed,
               const std::string& label)
      : plan_(plan), options_(options), backend_(backend), store_(store), progress_(progress),
        seed_(seed), label_(label) {}

  PartitionResult Run() {
    PartitionResult result;
    result.type = plan_.type->name;
    result.tunable = plan_.type->tunable;
    result.space_size = plan_.space.Size();
    result.budget = plan_.budget;
    result.initial_design = plan_.initial;
    result.batch_size = plan_.batch;
    const double cost_before = backend_.GpuSeconds();

    Rng rng(DeriveSeed(seed_, HashString("initial-design")));
    std::vector<int64_t> initial;
    if (!plan_.type->tunable) {
      initial.resize(plan_.space.Size());
      std::iota(initial.begin(), initial.end(), 0);
    } else {
      initial = InitialDesign(plan_.space, plan_.initial, rng);
    }
    Evaluate(initial, 0, plan_.type->tunable ? "initial" : "exhaustive", &result);
    result.hypervolume_trace.push_back(MeasuredHypervolume(result));

    std::unique_ptr<Surrogate> surrogate;
    if (plan_.type->tunable) {
      surrogate = MakeSurrogate(options_.surrogate,
                                {.seed = DeriveSeed(seed_, HashString("surrogate"))});
    }
    std::vector<bool> measured(plan_.space.Size(), false);
    for (const Evaluation& e : result.evaluations) measured[e.index] = true;
    for (int batch = 1; plan_.type->tunable &&
                        static_cast<int64_t>(result.evaluations.size()) < plan_.budget;
         ++batch) {
      AcquisitionInput input;
      input.space = &plan_.space;
      input.static_power_w = backend_.StaticPowerW();
      std::vector<std::vector<double>> x;
      for (const Evaluation& e : result.evaluations) {
        input.measured.push_back(e.index);
        input.measured_time_s.push_back(e.sample.time_s);
        input.measured_energy_j.push_back(e.sample.energy_j);
        input.measured_dynamic_energy_j.push_back(e.sample.dynamic_energy_j);
        x.push_back(plan_.space.Encode(e.index));
      }
      surrogate->Fit(x, input.measured_time_s, input.measured_dynamic_energy_j);
      std::vector<std::vector<double>> candidates_x;
      for (int64_t i = 0; i < plan_.space.Size(); ++i) {
        if (measured[i]) continue;
        input.candidates.push_back(i);
        candidates_x.push_back(plan_.space.Encode(i));
      }
      if (input.candidates.empty()) break;
      input.predictions = surrogate->Predict(candidates_x);
      const int k = static_cast<int>(std::min<int64_t>(
          plan_.batch, plan_.budget - static_cast<int64_t>(result.evaluations.size())));
      const std::vector<Pick> picks = SelectBatch(options_.strategy, input, k);
      KAREUS_CHECK(!picks.empty());
      std::vector<int64_t> indices;
      std::vector<std::string> reasons;
      for (const Pick& p : picks) {
        indices.push_back(p.index);
        reasons.push_back(ToString(p.reason));
        measured[p.index] = true;
      }
      Evaluate(indices, batch, reasons, &result);
      result.hypervolume_trace.push_back(MeasuredHypervolume(result));
    }
    result.gpu_seconds = backend_.GpuSeconds() - cost_before;
    // What the result costs whether or not the store served some of it: every batch's
    // overhead and every measurement, on the GPUs of the collective's group.
    const int gpus = measure::PartitionGpus(*plan_.type);
    std::set<int> batches;
    result.cost_gpu_seconds = 0.0;
    for (const Evaluation& e : result.evaluations) {
      batches.insert(e.batch);
      result.cost_gpu_seconds += e.sample.GpuSeconds();
    }
    result.batches = static_cast<int>(batches.size());
    result.cost_gpu_seconds += static_cast<double>(result.batches) * backend_.BatchOverheadSeconds() * gpus;
    result.hypervolume = result.hypervolume_trace.back();
    {
      std::vector<int64_t> indices;
      std::vector<measure::Sample> samples;
      for (const Evaluation& e : result.evaluations) {
        indices.push_back(e.index);
        samples.push_back(e.sample);
      }
      const std::vector<measure::Sample> estimates =
          Estimates(plan_.space, indices, samples, options_.surrogate,
                    options_.denoise && plan_.type->tunable, backend_.StaticPowerW(),
                    DeriveSeed(seed_, HashString("final-surrogate")));
      for (std::size_t i = 0; i < estimates.size(); ++i) result.evaluations[i].estimate = estimates[i];
    }
    BuildFrontiers(&result);
    return result;
  }

 private:
  void Evaluate(const std::vector<int64_t>& indices, int batch, const std::string& reason,
                PartitionResult* result) {
    Evaluate(indices, batch, std::vector<std::string>(indices.size(), reason), result);
  }

  // Reads what the store has, measures the rest in one backend batch, commits each new
  // measurement as it arrives. Evaluation order is the pick order either way, so a resumed
  // run is indistinguishable from an uninterrupted one.
  void Evaluate(const std::vector<int64_t>& indices, int batch,
                const std::vector<std::string>& reasons, PartitionResult* result) {
    const std::size_t first = result->evaluations.size();
    std::vector<std::size_t> missing;
    std::vector<measure::PartitionKnobs> to_measure;
    for (std::size_t i = 0; i < indices.size(); ++i) {
      Evaluation e;
      e.index = indices[i];
      e.knobs = plan_.space.At(indices[i]);
      e.batch = batch;
      e.reason = reasons[i];
      if (store_ != nullptr) {
        if (auto stored = store_->Find(plan_.type->name, e.knobs)) {
          e.sample = *stored;
          e.sample.gpus = measure::PartitionGpus(*plan_.type);
          e.from_store = true;
          ++result->reused;
        }
      }
      if (!e.from_store) {
        missing.push_back(first + i);
        to_measure.push_back(e.knobs);
      }
      result->evaluations.push_back(std::move(e));
    }
    ShowProgress(*result, batch);
    if (to_measure.empty()) return;
    backend_.MeasureBatch(*plan_.type, to_measure,
                          [&](std::size_t j, const measure::Sample& sample) {
                            Evaluation& e = result->evaluations[missing[j]];
                            if (store_ != nullptr) store_->Insert(plan_.type->name, e.knobs, sample);
                            e.sample = sample;
                            ++result->measured;
                            ShowProgress(*result, batch);
                          });
  }

  double MeasuredHypervolume(const PartitionResult& result) const {
    std::vector<pareto::Point> points;
    double t_max = 0, e_max = 0;
    for (const Evaluation& e : result.evaluations) {
      points.push_back({.time_s = e.sample.time_s, .energy_j = e.sample.energy_j});
      t_max = std::max(t_max, e.sample.time_s);
      e_max = std::max(e_max, e.sample.energy_j);
    }
    return pareto::Hypervolume(points, {.time_s = 1.1 * t_max, .energy_j = 1.1 * e_max});
  }

  void ShowProgress(const PartitionResult& result, int batch) {
    if (!progress_.active()) return;
    const int64_t done = result.measured + result.reused;
    const double spent = backend_.GpuSeconds();
    const double per_eval = result.measured > 0 ? spent / static_cast<double>(
                                                              std::max<int64_t>(1, measured_total_ + result.measured))
                                                : 12.0;
    const double left_s = static_cast<double>(result.budget - done) * per_eval;
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%s %-12s batch %d  %lld/%lld measured  best HV %.4g  GPU time left ~%.1f min",
                  label_.c_str(), plan_.type->name.c_str(), batch,
                  static_cast<long long>(done), static_cast<long long>(result.budget),
                  result.hypervolume_trace.empty() ? 0.0 : result.hypervolume_trace.back(),
                  left_s / 60.0);
    progress_.Update(line);
  }

  void BuildFrontiers(PartitionResult* result) const {
    auto point = [&](const Evaluation& e) {
      return FrontierPoint{.knobs = e.knobs, .time_s = e.estimate.time_s,
                           .energy_j = e.estimate.energy_j,
                           .dynamic_energy_j = e.estimate.dynamic_energy_j,
                           .measured_time_s = e.sample.time_s,
                           .measured_energy_j = e.sample.energy_j};
    };
    std::vector<pareto::Point> all;
    std::map<int, std::vector<pareto::Point>> by_clock;
    for (std::size_t i = 0; i < result->evaluations.size(); ++i) {
      const Evaluation& e = result->evaluations[i];
      const pareto::Point p{.time_s = e.estimate.time_s, .energy_j = e.estimate.energy_j,
                            .payload = static_cast<int64_t>(i)};
      all.push_back(p);
      by_clock[e.knobs.freq_mhz].push_back(p);
    }
    for (const pareto::Point& p : pareto::Filter(all)) {
      result->frontier.push_back(point(result->evaluations[p.payload]));
    }
    for (int clock : plan_.space.clocks_mhz()) {
      ClockFrontier cf;
      cf.freq_mhz = clock;
      for (const pareto::Point& p : pareto::Filter(by_clock[clock])) {
        cf.points.push_back(point(result->evaluations[p.payload]));
      }
      result->clock_frontiers.push_back(std::move(cf));
    }
  }

 public:
  int64_t measured_total_ = 0;  // measurements of earlier types (progress estimate)

 private:
  const Plan& plan_;
  const ProfileOptions& options_;
  measure::Backend& backend_;
  measure::MeasurementStore* store_;
  Progress& progress_;
  uint64_t seed_;
  std::string label_;
};

Json KnobsJson(const measure::PartitionKnobs& knobs) {
  return Json{{"freq_mhz", knobs.freq_mhz}, {"sms", knobs.sms}, {"slot", knobs.slot}};
}

Json PointJson(const FrontierPoint& p) {
  return Json{{"knobs", KnobsJson(p.knobs)},
              {"time_s", p.time_s},
              {"energy_j", p.energy_j},
              {"dynamic_energy_j", p.dynamic_energy_j},
              {"measured_time_s", p.measured_time_s},
              {"measured_energy_j", p.measured_energy_j}};
}

}  // namespace
}  // namespace internal

ProfileSummary ProfileWorkload(const workload::WorkloadModel& model, const ProfileOptions& options,
                               measure::Backend& backend, const Context& context) {
  // Validate everything before the first measurement: options, names, budgets, the store.
  ThrowIfInvalid(options.Validate());
  std::vector<const workload::PartitionType*> types;
  if (options.partitions.empty()) {
    for (const auto& type : model.partition_types) types.push_back(&type);
  } else {
    for (const std::string& name : options.partitions) {
      auto it = std::find_if(model.partition_types.begin(), model.partition_types.end(),
                             [&](const workload::PartitionType& t) { return t.name == name; });
      if (it == model.partition_types.end()) {
        std::vector<std::string> valid;
        for (const auto& t : model.partition_types) valid.push_back(t.name);
        ThrowInput("partition", name, "not a partition type of this workload (valid: " +
                                          (valid.empty() ? std::string("none") : JoinNames(valid)) + ")");
      }
      types.push_back(&*it);
    }
  }
  std::vector<internal::Plan> plans;
  for (const auto* type : types) plans.push_back(internal::PlanType(*type, backend.Gpu(), options));
  std::unique_ptr<measure::Backend> oracle;
  if (options.oracle) {
    oracle = backend.NoiseFreeTwin();
    if (!oracle) {
      ThrowInput("oracle", backend.Description(),
                 "the exhaustive oracle needs a backend with noise-free values (the emulator)");
    }
  }
  std::unique_ptr<measure::MeasurementStore> store;
  if (!options.store.empty()) {
    store = measure::MeasurementStore::Open(
        options.store, {.gpu = backend.Gpu().name,
                        .workload_signature = model.workload.Signature(),
                        .backend = backend.Description()});
  }

  ProfileSummary summary;
  summary.gpu = backend.Gpu().name;
  summary.workload_signature = model.workload.Signature();
  summary.backend = backend.Description();
  summary.surrogate = ToString(options.surrogate);
  summary.strategy = ToString(options.strategy);
  summary.seed = context.seed;
  Progress progress(!context.quiet);
  int64_t measured_so_far = 0;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const uint64_t seed = DeriveSeed(context.seed, HashString(plans[i].type->name.c_str()));
    const std::string label = "[" + std::to_string(i + 1) + "/" + std::to_string(plans.size()) + "]";
    internal::PartitionRun run(plans[i], options, backend, store.get(), progress, seed, label);
    run.measured_total_ = measured_so_far;
    PartitionResult result = run.Run();
    measured_so_far += result.measured;
    summary.measurements_reused += result.reused;
    if (oracle && result.tunable) {  // a fixed type is measured exhaustively: nothing to compare
      const uint64_t random_seed = DeriveSeed(seed, HashString("random-search"));
      result.oracle = internal::CompareWithOracle(plans[i].space, *plans[i].type, result,
                                                  backend, *oracle, options, random_seed);
    }
    summary.partitions.push_back(std::move(result));
  }
  progress.Finish();
  // The random baseline's measurements are not the profile's: count the optimizer's only.
  summary.measurements_taken = measured_so_far;
  summary.gpu_seconds = 0.0;
  summary.cost_gpu_seconds = 0.0;
  for (const auto& r : summary.partitions) {
    summary.gpu_seconds += r.gpu_seconds;
    summary.cost_gpu_seconds += r.cost_gpu_seconds;
  }
  return summary;
}

Json ProfileSummary::ToJson(bool with_evaluations) const {
  Json doc;
  doc["format"] = "kareus-profile";
  doc["version"] = 1;
  doc["gpu"] = gpu;
  doc["workload_signature"] = workload_signature;
  doc["backend"] = backend;
  doc["surrogate"] = surrogate;
  doc["strategy"] = strategy;
  doc["seed"] = seed;
  doc["gpu_seconds"] = gpu_seconds;
  doc["gpu_hours"] = gpu_seconds / 3600.0;
  doc["cost_gpu_hours"] = cost_gpu_seconds / 3600.0;
  doc["gpu_hours_basis"] = kGpuHoursBasis;
  doc["measurements_taken"] = measurements_taken;
  doc["measurements_reused"] = measurements_reused;
  Json types = Json::array();
  for (const PartitionResult& r : partitions) {
    Json t;
    t["type"] = r.type;
    t["tunable"] = r.tunable;
    t["space_size"] = r.space_size;
    t["evaluations"] = static_cast<int64_t>(r.evaluations.size());
    t["budget_fraction"] =
        static_cast<double>(r.evaluations.size()) / static_cast<double>(r.space_size);
    t["measured"] = r.measured;
    t["reused"] = r.reused;
    t["gpu_seconds"] = r.gpu_seconds;
    t["cost_gpu_seconds"] = r.cost_gpu_seconds;
    t["batches"] = r.batches;
    t["hypervolume"] = r.hypervolume;
    t["hypervolume_trace"] = r.hypervolume_trace;
    Json front = Json::array();
    for (const FrontierPoint& p : r.frontier) front.push_back(internal::PointJson(p));
    t["frontier"] = front;
    Json clocks = Json::array();
    for (const ClockFrontier& cf : r.clock_frontiers) {
      Json points = Json::array();
      for (const FrontierPoint& p : cf.points) points.push_back(internal::PointJson(p));
      clocks.push_back(Json{{"freq_mhz", cf.freq_mhz}, {"points", points}});
    }
    t["clock_frontiers"] = clocks;
    if (r.oracle) {
      t["oracle_hypervolume"] = r.oracle->oracle_hypervolume;
      t["oracle_reference"] = Json{{"time_s", r.oracle->reference.time_s},
                                   {"energy_j", r.oracle->reference.energy_j}};
      t["measured_hypervolume_noise_free"] = r.oracle->hypervolume;
      t["hv_ratio"] = r.oracle->hv_ratio;
      t["random_hv_ratio"] = r.oracle->random_hv_ratio;
      t["space_reference"] = Json{{"time_s", r.oracle->space_reference.time_s},
                                  {"energy_j", r.oracle->space_reference.energy_j}};
      t["space_ref_hv_ratio"] = r.oracle->space_ref_hv_ratio;
      t["random_space_ref_hv_ratio"] = r.oracle->random_space_ref_hv_ratio;
      t["clock_hv_ratio"] = r.oracle->clock_hv_ratio;
      t["random_clock_hv_ratio"] = r.oracle->random_clock_hv_ratio;
    }
    if (with_evaluations) {
      Json evals = Json::array();
      for (const Evaluation& e : r.evaluations) {
        evals.push_back(Json{{"knobs", internal::KnobsJson(e.knobs)},
                             {"time_s", e.sample.time_s},
                             {"energy_j", e.sample.energy_j},
                             {"dynamic_energy_j", e.sample.dynamic_energy_j},
                             {"estimated_time_s", e.estimate.time_s},
                             {"estimated_energy_j", e.estimate.energy_j},
                             {"batch", e.batch},
                             {"reason", e.reason},
                             {"from_store", e.from_store}});
      }
      t["evaluated"] = evals;
    }
    types.push_back(std::move(t));
  }
  doc["partitions"] = types;
  return doc;
}

}  // namespace kareus::mobo
