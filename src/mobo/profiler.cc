// SPDX-License-Identifier: Apache-2.0
#include "kareus/mobo/profiler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
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
  if (unit_size < 0) return OptionError{"unit_size", Describe(unit_size), "must be >= 0 (0: whole batch)"};
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

// One partition type's profiling as explicit steps (WorkloadProfiler): the initial design,
// then per batch a surrogate fit and a pick, each batch's missing configurations measured by
// whoever the caller chooses, then the denoised frontiers. Every decision depends only on the
// type's own seed and its own measurements, so types may advance in any interleaving.
class TypeState {
 public:
  TypeState(const Plan& plan, const ProfileOptions& options, const measure::Backend& backend,
            measure::MeasurementStore* store, uint64_t seed)
      : plan_(plan), options_(options), backend_(backend), store_(store), seed_(seed),
        gpus_(measure::PartitionGpus(*plan.type)) {
    result_.type = plan_.type->name;
    result_.tunable = plan_.type->tunable;
    result_.space_size = plan_.space.Size();
    result_.budget = plan_.budget;
    result_.initial_design = plan_.initial;
    result_.batch_size = plan_.batch;
    measured_.assign(plan_.space.Size(), false);
  }

  bool complete() const { return complete_; }
  bool in_flight() const { return !missing_.empty() && pending_ > 0; }
  const PartitionResult& result() const { return result_; }
  PartitionResult& result() { return result_; }

  // The next batch that needs measuring (store hits are read here), or nullopt when done.
  std::optional<MeasurementBatch> NextBatch(int type_index) {
    KAREUS_CHECK(pending_ == 0) << plan_.type->name << ": the previous batch is still being measured";
    while (!complete_) {
      std::vector<int64_t> indices;
      std::vector<std::string> reasons;
      if (!started_) {
        started_ = true;
        Rng rng(DeriveSeed(seed_, HashString("initial-design")));
        if (!plan_.type->tunable) {
          indices.resize(plan_.space.Size());
          std::iota(indices.begin(), indices.end(), 0);
        } else {
          indices = InitialDesign(plan_.space, plan_.initial, rng);
        }
        reasons.assign(indices.size(), plan_.type->tunable ? "initial" : "exhaustive");
        if (plan_.type->tunable) {
          surrogate_ = MakeSurrogate(options_.surrogate,
                                     {.seed = DeriveSeed(seed_, HashString("surrogate"))});
        }
      } else if (!PickBatch(&indices, &reasons)) {
        Finalize();
        break;
      }
      for (int64_t index : indices) measured_[index] = true;
      if (Evaluate(indices, reasons)) {
        MeasurementBatch batch{.type = type_index, .number = batch_, .knobs = {}, .units = {}};
        for (std::size_t i : missing_) batch.knobs.push_back(result_.evaluations[i].knobs);
        const std::size_t unit = options_.unit_size > 0 ? static_cast<std::size_t>(options_.unit_size)
                                                        : batch.knobs.size();
        for (std::size_t b = 0; b < batch.knobs.size(); b += unit) {
          batch.units.push_back({b, std::min(batch.knobs.size(), b + unit)});
        }
        units_issued_ += static_cast<int64_t>(batch.units.size());
        return batch;
      }
      BatchComplete();  // everything came from the store
    }
    return std::nullopt;
  }

  // A sample of the batch in flight (`index` into its knobs), committed to the store at once.
  void Record(std::size_t index, const measure::Sample& sample, Progress& progress,
              const std::string& label, double per_eval_s) {
    KAREUS_CHECK(index < missing_.size() && pending_ > 0) << plan_.type->name << ": sample " << index
                                                          << " outside the batch in flight";
    Evaluation& e = result_.evaluations[missing_[index]];
    KAREUS_CHECK(!recorded_[index]) << plan_.type->name << ": sample " << index << " recorded twice";
    recorded_[index] = true;
    if (store_ != nullptr) store_->Insert(plan_.type->name, e.knobs, sample);
    e.sample = sample;
    ++result_.measured;
    --pending_;
    ShowProgress(progress, label, per_eval_s);
    if (pending_ == 0) BatchComplete();
  }

  void ShowProgress(Progress& progress, const std::string& label, double per_eval_s) const {
    if (!progress.active()) return;
    const int64_t done = result_.measured + result_.reused;
    const double left_s = static_cast<double>(result_.budget - done) * per_eval_s;
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%s %-12s batch %d  %lld/%lld measured  best HV %.4g  GPU time left ~%.1f min",
                  label.c_str(), plan_.type->name.c_str(), batch_,
                  static_cast<long long>(done), static_cast<long long>(result_.budget),
                  result_.hypervolume_trace.empty() ? 0.0 : result_.hypervolume_trace.back(),
                  left_s / 60.0);
    progress.Update(line);
  }

 private:
  // Fits the surrogate on every measurement and picks the next batch; false when the type is
  // done (budget spent, space exhausted, or not tunable).
  bool PickBatch(std::vector<int64_t>* indices, std::vector<std::string>* reasons) {
    if (!plan_.type->tunable || static_cast<int64_t>(result_.evaluations.size()) >= plan_.budget) {
      return false;
    }
    AcquisitionInput input;
    input.space = &plan_.space;
    input.static_power_w = backend_.StaticPowerW();
    std::vector<std::vector<double>> x;
    for (const Evaluation& e : result_.evaluations) {
      input.measured.push_back(e.index);
      input.measured_time_s.push_back(e.sample.time_s);
      input.measured_energy_j.push_back(e.sample.energy_j);
      input.measured_dynamic_energy_j.push_back(e.sample.dynamic_energy_j);
      x.push_back(plan_.space.Encode(e.index));
    }
    surrogate_->Fit(x, input.measured_time_s, input.measured_dynamic_energy_j);
    std::vector<std::vector<double>> candidates_x;
    for (int64_t i = 0; i < plan_.space.Size(); ++i) {
      if (measured_[i]) continue;
      input.candidates.push_back(i);
      candidates_x.push_back(plan_.space.Encode(i));
    }
    if (input.candidates.empty()) return false;
    input.predictions = surrogate_->Predict(candidates_x);
    const int k = static_cast<int>(std::min<int64_t>(
        plan_.batch, plan_.budget - static_cast<int64_t>(result_.evaluations.size())));
    const std::vector<Pick> picks = SelectBatch(options_.strategy, input, k);
    KAREUS_CHECK(!picks.empty());
    ++batch_;
    for (const Pick& p : picks) {
      indices->push_back(p.index);
      reasons->push_back(ToString(p.reason));
    }
    return true;
  }

  // Appends the batch's evaluations, reading what the store has. Evaluation order is the pick
  // order either way, so a resumed run is indistinguishable from an uninterrupted one. True
  // when something is left to measure.
  bool Evaluate(const std::vector<int64_t>& indices, const std::vector<std::string>& reasons) {
    const std::size_t first = result_.evaluations.size();
    missing_.clear();
    for (std::size_t i = 0; i < indices.size(); ++i) {
      Evaluation e;
      e.index = indices[i];
      e.knobs = plan_.space.At(indices[i]);
      e.batch = batch_;
      e.reason = reasons[i];
      if (store_ != nullptr) {
        if (auto stored = store_->Find(plan_.type->name, e.knobs)) {
          e.sample = *stored;
          e.sample.gpus = gpus_;
          e.from_store = true;
          ++result_.reused;
        }
      }
      if (!e.from_store) missing_.push_back(first + i);
      result_.evaluations.push_back(std::move(e));
    }
    pending_ = missing_.size();
    recorded_.assign(missing_.size(), false);
    return pending_ > 0;
  }

  void BatchComplete() {
    missing_.clear();
    result_.hypervolume_trace.push_back(MeasuredHypervolume());
  }

  double MeasuredHypervolume() const {
    std::vector<pareto::Point> points;
    double t_max = 0, e_max = 0;
    for (const Evaluation& e : result_.evaluations) {
      points.push_back({.time_s = e.sample.time_s, .energy_j = e.sample.energy_j});
      t_max = std::max(t_max, e.sample.time_s);
      e_max = std::max(e_max, e.sample.energy_j);
    }
    return pareto::Hypervolume(points, {.time_s = 1.1 * t_max, .energy_j = 1.1 * e_max});
  }

  // Costs, the final (denoising) surrogate and the frontiers.
  void Finalize() {
    complete_ = true;
    surrogate_.reset();
    // Measured in this run: every sample taken plus each unit's overhead, summed in evaluation
    // order from the samples' own costs, so it does not depend on who measured or when.
    const double overhead_gpu_s = backend_.BatchOverheadSeconds() * gpus_;
    result_.gpu_seconds = static_cast<double>(units_issued_) * overhead_gpu_s;
    for (const Evaluation& e : result_.evaluations) {
      if (!e.from_store) result_.gpu_seconds += e.sample.GpuSeconds();
    }
    // What the result costs whether or not the store served some of it: every unit's overhead
    // and every measurement, on the GPUs of the collective's group.
    std::map<int, int64_t> batch_sizes;
    result_.cost_gpu_seconds = 0.0;
    for (const Evaluation& e : result_.evaluations) {
      ++batch_sizes[e.batch];
      result_.cost_gpu_seconds += e.sample.GpuSeconds();
    }
    result_.batches = static_cast<int>(batch_sizes.size());
    int64_t units = 0;
    for (const auto& [batch, size] : batch_sizes) {
      units += options_.unit_size > 0 ? (size + options_.unit_size - 1) / options_.unit_size : 1;
    }
    result_.cost_gpu_seconds += static_cast<double>(units) * overhead_gpu_s;
    result_.hypervolume = result_.hypervolume_trace.back();
    {
      std::vector<int64_t> indices;
      std::vector<measure::Sample> samples;
      for (const Evaluation& e : result_.evaluations) {
        indices.push_back(e.index);
        samples.push_back(e.sample);
      }
      const std::vector<measure::Sample> estimates =
          Estimates(plan_.space, indices, samples, options_.surrogate,
                    options_.denoise && plan_.type->tunable, backend_.StaticPowerW(),
                    DeriveSeed(seed_, HashString("final-surrogate")));
      for (std::size_t i = 0; i < estimates.size(); ++i) result_.evaluations[i].estimate = estimates[i];
    }
    BuildFrontiers();
  }

  void BuildFrontiers() {
    auto point = [&](const Evaluation& e) {
      return FrontierPoint{.knobs = e.knobs, .time_s = e.estimate.time_s,
                           .energy_j = e.estimate.energy_j,
                           .dynamic_energy_j = e.estimate.dynamic_energy_j,
                           .measured_time_s = e.sample.time_s,
                           .measured_energy_j = e.sample.energy_j};
    };
    std::vector<pareto::Point> all;
    std::map<int, std::vector<pareto::Point>> by_clock;
    for (std::size_t i = 0; i < result_.evaluations.size(); ++i) {
      const Evaluation& e = result_.evaluations[i];
      const pareto::Point p{.time_s = e.estimate.time_s, .energy_j = e.estimate.energy_j,
                            .payload = static_cast<int64_t>(i)};
      all.push_back(p);
      by_clock[e.knobs.freq_mhz].push_back(p);
    }
    for (const pareto::Point& p : pareto::Filter(all)) {
      result_.frontier.push_back(point(result_.evaluations[p.payload]));
    }
    for (int clock : plan_.space.clocks_mhz()) {
      ClockFrontier cf;
      cf.freq_mhz = clock;
      for (const pareto::Point& p : pareto::Filter(by_clock[clock])) {
        cf.points.push_back(point(result_.evaluations[p.payload]));
      }
      result_.clock_frontiers.push_back(std::move(cf));
    }
  }

  const Plan& plan_;
  const ProfileOptions& options_;
  const measure::Backend& backend_;
  measure::MeasurementStore* store_;
  uint64_t seed_;
  int gpus_;
  PartitionResult result_;
  std::unique_ptr<Surrogate> surrogate_;
  std::vector<bool> measured_;       // picked (space index), measured or in flight
  std::vector<std::size_t> missing_;  // evaluations of the batch in flight to be measured
  std::vector<bool> recorded_;        // per missing_ entry
  std::size_t pending_ = 0;           // samples of the batch in flight not yet recorded
  int batch_ = 0;                     // number of the current batch (0: initial design)
  int64_t units_issued_ = 0;          // backend batches handed out in this run
  bool started_ = false;
  bool complete_ = false;
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

struct WorkloadProfiler::State {
  const workload::WorkloadModel* model = nullptr;
  ProfileOptions options;
  measure::Backend* backend = nullptr;
  Context context;
  std::vector<const workload::PartitionType*> types;
  std::vector<internal::Plan> plans;
  std::unique_ptr<measure::Backend> oracle;
  std::unique_ptr<measure::MeasurementStore> store;
  std::vector<std::unique_ptr<internal::TypeState>> states;
  std::vector<std::string> labels;
  std::unique_ptr<Progress> progress;
  int64_t measured = 0;         // samples recorded (progress estimate)
  double measured_gpu_s = 0.0;  // their cost
  bool finished = false;
};

WorkloadProfiler::WorkloadProfiler(const workload::WorkloadModel& model,
                                   const ProfileOptions& options, measure::Backend& backend,
                                   const Context& context)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.model = &model;
  s.options = options;
  s.backend = &backend;
  s.context = context;
  // Validate everything before the first measurement: options, names, budgets, the store.
  ThrowIfInvalid(options.Validate());
  if (options.partitions.empty()) {
    for (const auto& type : model.partition_types) s.types.push_back(&type);
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
      s.types.push_back(&*it);
    }
  }
  for (const auto* type : s.types) s.plans.push_back(internal::PlanType(*type, backend.Gpu(), s.options));
  if (options.oracle) {
    s.oracle = backend.NoiseFreeTwin();
    if (!s.oracle) {
      ThrowInput("oracle", backend.Description(),
                 "the exhaustive oracle needs a backend with noise-free values (the emulator)");
    }
  }
  if (!options.store.empty()) {
    s.store = measure::MeasurementStore::Open(
        options.store, {.gpu = backend.Gpu().name,
                        .workload_signature = model.workload.Signature(),
                        .backend = backend.Description()});
  }
  for (std::size_t i = 0; i < s.plans.size(); ++i) {
    const uint64_t seed = DeriveSeed(context.seed, HashString(s.plans[i].type->name.c_str()));
    s.states.push_back(std::make_unique<internal::TypeState>(s.plans[i], s.options, backend,
                                                             s.store.get(), seed));
    s.labels.push_back("[" + std::to_string(i + 1) + "/" + std::to_string(s.plans.size()) + "]");
  }
  s.progress = std::make_unique<Progress>(!context.quiet);
}

WorkloadProfiler::~WorkloadProfiler() = default;

const std::vector<const workload::PartitionType*>& WorkloadProfiler::Types() const {
  return state_->types;
}

std::optional<MeasurementBatch> WorkloadProfiler::NextBatch(int type) {
  KAREUS_CHECK(type >= 0 && type < static_cast<int>(state_->states.size())) << "type " << type;
  return state_->states[type]->NextBatch(type);
}

void WorkloadProfiler::Record(int type, std::size_t index, const measure::Sample& sample) {
  KAREUS_CHECK(type >= 0 && type < static_cast<int>(state_->states.size())) << "type " << type;
  State& s = *state_;
  ++s.measured;
  s.measured_gpu_s += sample.GpuSeconds();
  const double per_eval_s = s.measured_gpu_s / static_cast<double>(s.measured);
  s.states[type]->Record(index, sample, *s.progress, s.labels[type], per_eval_s);
}

bool WorkloadProfiler::Complete(int type) const {
  KAREUS_CHECK(type >= 0 && type < static_cast<int>(state_->states.size())) << "type " << type;
  return state_->states[type]->complete();
}

ProfileSummary WorkloadProfiler::Finish() {
  State& s = *state_;
  KAREUS_CHECK(!s.finished) << "WorkloadProfiler::Finish called twice";
  s.finished = true;
  ProfileSummary summary;
  summary.gpu = s.backend->Gpu().name;
  summary.workload_signature = s.model->workload.Signature();
  summary.backend = s.backend->Description();
  summary.surrogate = ToString(s.options.surrogate);
  summary.strategy = ToString(s.options.strategy);
  summary.seed = s.context.seed;
  for (std::size_t i = 0; i < s.states.size(); ++i) {
    KAREUS_CHECK(s.states[i]->complete()) << s.plans[i].type->name << " is not profiled yet";
    PartitionResult result = std::move(s.states[i]->result());
    summary.measurements_taken += result.measured;
    summary.measurements_reused += result.reused;
    if (s.oracle && result.tunable) {  // a fixed type is measured exhaustively: nothing to compare
      const uint64_t seed = DeriveSeed(s.context.seed, HashString(s.plans[i].type->name.c_str()));
      const uint64_t random_seed = DeriveSeed(seed, HashString("random-search"));
      result.oracle = internal::CompareWithOracle(s.plans[i].space, *s.plans[i].type, result,
                                                  *s.backend, *s.oracle, s.options, random_seed);
    }
    summary.partitions.push_back(std::move(result));
  }
  s.progress->Finish();
  // The random baseline's measurements are not the profile's: count the optimizer's only.
  for (const auto& r : summary.partitions) {
    summary.gpu_seconds += r.gpu_seconds;
    summary.cost_gpu_seconds += r.cost_gpu_seconds;
  }
  return summary;
}

ProfileSummary ProfileWorkload(const workload::WorkloadModel& model, const ProfileOptions& options,
                               measure::Backend& backend, const Context& context) {
  WorkloadProfiler profiler(model, options, backend, context);
  for (int t = 0; t < static_cast<int>(profiler.Types().size()); ++t) {
    const workload::PartitionType& type = *profiler.Types()[t];
    while (std::optional<MeasurementBatch> batch = profiler.NextBatch(t)) {
      for (const auto& [begin, end] : batch->units) {
        const std::vector<measure::PartitionKnobs> unit(batch->knobs.begin() + begin,
                                                        batch->knobs.begin() + end);
        backend.MeasureBatch(type, unit, [&](std::size_t j, const measure::Sample& sample) {
          profiler.Record(t, begin + j, sample);
        });
      }
    }
  }
  return profiler.Finish();
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
