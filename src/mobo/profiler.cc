// SPDX-License-Identifier: Apache-2.0
#include "kareus/mobo/profiler.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/progress.h"
#include "kareus/measure/store.h"
#include "mobo/baselines.h"
#include "mobo/type_state.h"

namespace kareus::mobo {

const char* ToString(PriorDesignOutcome outcome) {
  switch (outcome) {
    case PriorDesignOutcome::kNone:
      return "";
    case PriorDesignOutcome::kPrior:
      return "prior";
    case PriorDesignOutcome::kFallback:
      return "fallback";
    case PriorDesignOutcome::kRefuted:
      return "refuted";
  }
  return "";
}

double ProfileOptions::BudgetFraction() const {
  if (budget_fraction > 0.0) return budget_fraction;
  return prior ? kBudgetFractionWithPrior : kBudgetFraction;
}

std::optional<OptionError> ProfileOptions::Validate() const {
  if (budget < 0)
    return OptionError{"budget", Describe(budget), "must be >= 0 (0: budget_fraction)"};
  if (!(budget_fraction == 0.0 || (budget_fraction > 0.0 && budget_fraction <= 1.0))) {
    return OptionError{"budget_fraction", Describe(budget_fraction),
                       "must be in (0, 1], or 0 (automatic)"};
  }
  if (initial_design < 0 || initial_design == 1) {
    return OptionError{"initial_design", Describe(initial_design),
                       "must be 0 (auto) or at least 2"};
  }
  if (!(initial_fraction > 0.0 && initial_fraction <= 1.0)) {
    return OptionError{"initial_fraction", Describe(initial_fraction), "must be in (0, 1]"};
  }
  if (batch_size < 0)
    return OptionError{"batch_size", Describe(batch_size), "must be >= 0 (0: auto)"};
  if (unit_size < 0)
    return OptionError{"unit_size", Describe(unit_size), "must be >= 0 (0: whole batch)"};
  if (min_budget < 0) return OptionError{"min_budget", Describe(min_budget), "must be >= 0"};
  if (related_max_rows < 1) {
    return OptionError{"related_max_rows", Describe(related_max_rows), "must be >= 1"};
  }
  return std::nullopt;
}

namespace internal {
namespace {

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

// Whether `model` reads what `backend`'s noise-free twin reads: the same description and the
// GPU figures a model's predictions rest on.
bool SameModel(measure::Backend& model, measure::Backend& backend) {
  const std::unique_ptr<measure::Backend> twin = backend.NoiseFreeTwin();
  if (!twin || twin->Description() != model.Description()) return false;
  const hw::GpuSpec& a = model.Gpu();
  const hw::GpuSpec& b = twin->Gpu();
  bool same_curve = a.voltage_curve.size() == b.voltage_curve.size();
  for (std::size_t i = 0; same_curve && i < a.voltage_curve.size(); ++i) {
    same_curve = a.voltage_curve[i].freq_mhz == b.voltage_curve[i].freq_mhz &&
                 a.voltage_curve[i].volts == b.voltage_curve[i].volts;
  }
  return same_curve && a.name == b.name && a.sm_count == b.sm_count &&
         a.power.dynamic_max_w == b.power.dynamic_max_w && a.power.static_w == b.power.static_w &&
         a.power.cap_w == b.power.cap_w && a.power.memory_w == b.power.memory_w &&
         a.gemm_efficiency == b.gemm_efficiency &&
         a.attention_efficiency == b.attention_efficiency &&
         a.hbm_bandwidth_gbps == b.hbm_bandwidth_gbps &&
         a.interconnect.bus_bandwidth_gbps == b.interconnect.bus_bandwidth_gbps &&
         a.interconnect.channel_bandwidth_gbps == b.interconnect.channel_bandwidth_gbps;
}

std::string PriorNote(const ProfileOptions& options, bool measuring_model) {
  if (!options.prior) return "no prior: the surrogates start from the measurements alone";
  if (measuring_model) {
    return "the prior is the measuring backend's own noise-free model, i.e. the truth up to "
           "measurement noise: results with it (small budgets in particular) are flattering, "
           "they hold largely by construction here; the mismatched-prior benchmark "
           "(bench/profile_prior.py, a perturbed GPU model as the prior) is the measure of the "
           "method";
  }
  return "the prior is a model distinct from the measuring backend: its physical scales are "
         "calibrated to each type's measurements (when it has them), the surrogates learn the "
         "residual between the measurements and it, and its weight per target (0 drops it)";
}

// What the last fit (the one the frontier was selected with) made of the prior, and every fit.
Json PriorJson(const std::vector<PriorUse>& uses) {
  Json fits = Json::array();
  for (const PriorUse& u : uses) {
    Json fit{
        {"time_weight", u.time_weight}, {"energy_weight", u.energy_weight}, {"trusted", u.trusted}};
    if (!u.related_similarity.empty()) fit["related_similarity"] = u.related_similarity;
    if (!u.calibration.empty()) fit["calibration"] = u.calibration;
    fits.push_back(std::move(fit));
  }
  const PriorUse& last = uses.back();
  Json out{{"time_weight", last.time_weight},
           {"energy_weight", last.energy_weight},
           {"held_out_log_error",
            {{"time", last.held_out.time}, {"dynamic_energy", last.held_out.dynamic_energy}}},
           {"fits", fits}};
  if (!last.calibration.empty()) {
    out["calibration"] = Json{{"perturbation", last.calibration},
                              {"log_rms_before", last.calibration_log_rms_before},
                              {"log_rms_after", last.calibration_log_rms_after}};
  }
  return out;
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
  std::unique_ptr<measure::Backend> prior_model;  // predictions only (never counted)
  std::vector<RelatedWorkload> related;           // transfer: read once, read-only
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
        ThrowInput("partition", name,
                   "not a partition type of this workload (valid: " +
                       (valid.empty() ? std::string("none") : JoinNames(valid)) + ")");
      }
      s.types.push_back(&*it);
    }
  }
  for (const auto* type : s.types)
    s.plans.push_back(internal::PlanType(*type, backend.Gpu(), s.options));
  if (options.oracle) {
    s.oracle = backend.NoiseFreeTwin();
    if (!s.oracle) {
      ThrowInput("oracle", backend.Description(),
                 "the exhaustive oracle needs a backend with noise-free values (the emulator)");
    }
  }
  if (options.prior) {
    s.prior_model = options.prior.make(model);
    KAREUS_CHECK(s.prior_model != nullptr) << "the prior's model factory returned nothing";
  }
  for (const std::filesystem::path& path : options.related_stores) {
    s.related.push_back(LoadRelatedWorkload(path, model, backend.Description()));
  }
  if (!options.store.empty()) {
    s.store = measure::MeasurementStore::Open(
        options.store,
        {.gpu = backend.Gpu().name,
         .workload_signature = model.workload.Signature(),
         .backend = backend.Description()},
        {.damaged = options.remeasure_damaged ? measure::StoreOptions::DamagedRows::kSetAside
                                              : measure::StoreOptions::DamagedRows::kFail});
  }
  for (std::size_t i = 0; i < s.plans.size(); ++i) {
    const uint64_t seed = DeriveSeed(context.seed, HashString(s.plans[i].type->name.c_str()));
    TypeKnowledge knowledge;
    if (s.plans[i].type->tunable) {
      if (s.prior_model) {
        knowledge.prior = PredictSpace(*s.prior_model, *s.plans[i].type, s.plans[i].space);
      }
      knowledge.related =
          RelatedRowsFor(s.related, *s.plans[i].type, s.plans[i].space, options.prior,
                         options.related_max_rows, DeriveSeed(seed, HashString("related")));
    }
    s.states.push_back(std::make_unique<internal::TypeState>(
        s.plans[i], s.options, backend, s.store.get(), seed, std::move(knowledge), model));
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

ProfileResult WorkloadProfiler::Finish() {
  State& s = *state_;
  KAREUS_CHECK(!s.finished) << "WorkloadProfiler::Finish called twice";
  s.finished = true;
  ProfileResult summary;
  summary.gpu = s.backend->Gpu().name;
  summary.workload_signature = s.model->workload.Signature();
  summary.backend = s.backend->Description();
  summary.surrogate = ToString(s.options.surrogate);
  summary.strategy = ToString(s.options.strategy);
  if (s.options.prior) summary.prior = s.options.prior.description;
  summary.prior_is_measuring_model =
      s.prior_model && internal::SameModel(*s.prior_model, *s.backend);
  summary.prior_note = internal::PriorNote(s.options, summary.prior_is_measuring_model);
  for (const RelatedWorkload& r : s.related) summary.related.push_back(r.workload_signature);
  summary.seed = s.context.seed;
  for (std::size_t i = 0; i < s.states.size(); ++i) {
    KAREUS_CHECK(s.states[i]->complete()) << s.plans[i].type->name << " is not profiled yet";
    PartitionResult result = std::move(s.states[i]->result());
    summary.measurements_taken += result.measured;
    summary.measurements_reused += result.reused;
    if (s.oracle && result.tunable) {  // a fixed type is measured exhaustively: nothing to compare
      const uint64_t seed = DeriveSeed(s.context.seed, HashString(s.plans[i].type->name.c_str()));
      const uint64_t random_seed = DeriveSeed(seed, HashString("random-search"));
      result.oracle =
          internal::CompareWithOracle(s.plans[i].space, *s.plans[i].type, result, *s.backend,
                                      *s.oracle, s.options, random_seed, s.states[i]->knowledge());
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

ProfileResult ProfileWorkload(const workload::WorkloadModel& model, const ProfileOptions& options,
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

Json ProfileResult::ToJson(bool with_evaluations) const {
  Json doc;
  doc["format"] = "kareus-profile";
  doc["version"] = 1;
  doc["gpu"] = gpu;
  doc["workload_signature"] = workload_signature;
  doc["backend"] = backend;
  doc["surrogate"] = surrogate;
  doc["strategy"] = strategy;
  doc["prior"] = prior;
  doc["prior_is_measuring_model"] = prior_is_measuring_model;
  doc["prior_note"] = prior_note;
  doc["related_workloads"] = related;
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
    t["initial_design"] = r.initial_design;
    if (r.prior_design != PriorDesignOutcome::kNone) t["prior_design"] = ToString(r.prior_design);
    if (std::isfinite(r.prior_design_log_rms)) t["prior_design_log_rms"] = r.prior_design_log_rms;
    if (std::isfinite(r.prior_recheck_log_rms))
      t["prior_recheck_log_rms"] = r.prior_recheck_log_rms;
    t["hypervolume"] = r.hypervolume;
    t["hypervolume_trace"] = r.hypervolume_trace;
    if (!r.prior_uses.empty()) t["prior"] = internal::PriorJson(r.prior_uses);
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
      t["oracle_reference"] =
          Json{{"time_s", r.oracle->reference.time_s}, {"energy_j", r.oracle->reference.energy_j}};
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
