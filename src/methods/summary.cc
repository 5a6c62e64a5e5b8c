// SPDX-License-Identifier: Apache-2.0
#include "kareus/methods/summary.h"

#include <algorithm>
#include <cmath>

#include "kareus/methods/metrics.h"
#include "kareus/plan/plan_file.h"
#include "methods/summary_builder.h"

namespace kareus::methods {
namespace internal {
namespace {

using schedule::Direction;

PointSummary Point(const pipeline::Evaluation& e) {
  return {.time_s = e.time_s,
          .energy_j = e.energy_j,
          .static_energy_j = e.static_energy_j,
          .dynamic_energy_j = e.dynamic_energy_j};
}

std::vector<TimeEnergy> Evaluated(const MethodResult& m, bool sampled_only) {
  std::vector<TimeEnergy> out;
  if (sampled_only) {
    for (std::size_t i : m.solved.sampled)
      out.push_back({m.evaluated[i].time_s, m.evaluated[i].energy_j});
  } else {
    for (const auto& e : m.evaluated) out.push_back({e.time_s, e.energy_j});
  }
  return out;
}

const MethodResult* Find(const RunResult& run, const std::string& name) {
  for (const auto& m : run.methods) {
    if (m.method.name == name) return &m;
  }
  return nullptr;
}

Spread SpreadOf(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  Spread out{.min = values.front(),
             .median = n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]),
             .max = values.back(),
             .mean_abs = 0.0};
  for (double x : values) out.mean_abs += std::abs(x) / static_cast<double>(n);
  return out;
}

CompositionError Composition(const MethodResult& m) {
  CompositionError out;
  out.options = m.composition.size();
  std::vector<double> time_pct, energy_pct;
  for (const CompositionSample& c : m.composition) {
    time_pct.push_back(100.0 * (c.composed_time_s / c.evaluated_time_s - 1.0));
    energy_pct.push_back(100.0 * (c.composed_energy_j / c.evaluated_energy_j - 1.0));
    out.samples.push_back({.stage = c.stage,
                           .instruction = c.forward ? "forward" : "backward",
                           .freq_mhz = c.freq_mhz,
                           .composed_time_s = c.composed_time_s,
                           .evaluated_time_s = c.evaluated_time_s,
                           .composed_energy_j = c.composed_energy_j,
                           .evaluated_energy_j = c.evaluated_energy_j,
                           .time_error_pct = time_pct.back(),
                           .energy_error_pct = energy_pct.back()});
  }
  out.time_error_pct = SpreadOf(time_pct);
  out.energy_error_pct = SpreadOf(energy_pct);
  return out;
}

MethodSummary Summarize(const MethodResult& m) {
  MethodSummary out;
  out.method = m.method.name;
  out.label = m.method.label;
  out.traits = {{"execution", ToString(m.method.execution)},
                {"clock", ToString(m.method.clock)},
                {"comm", ToString(m.method.comm)}};
  for (std::size_t i = 0; i < m.evaluated.size(); ++i) {
    out.frontier.push_back({.point = Point(m.evaluated[i]),
                            .plan_index = static_cast<int>(i),
                            .predicted_time_s = m.solved.solve.points[i].cost.time_s,
                            .predicted_energy_j = m.solved.solve.points[i].cost.energy_j});
  }
  out.fastest = Point(m.evaluated[m.Fastest()]);
  out.lowest_energy = Point(
      *std::min_element(m.evaluated.begin(), m.evaluated.end(),
                        [](const auto& a, const auto& b) { return a.energy_j < b.energy_j; }));
  out.sampled_plans = m.solved.sampled;
  for (const auto& d : m.dropped) {
    out.dropped_after_evaluation.push_back({.solver_index = d.solver_index,
                                            .dominated_by = d.dominated_by,
                                            .predicted = Point(d.predicted),
                                            .evaluated = Point(d.evaluated)});
  }
  out.profiling_gpu_hours = m.profiling_gpu_seconds / 3600.0;
  out.measurements = m.measurements;
  // By name (the summary's maps are ordered by name, as the files list them).
  for (const auto& [kind, cost] : m.profiling_by_kind) {
    out.profiling_by_kind[ToString(kind)] = {.gpu_hours = cost.gpu_seconds / 3600.0,
                                             .measurements = cost.measurements};
  }
  out.evaluation_gpu_hours = m.evaluation_gpu_seconds / 3600.0;
  for (const auto& [phase, seconds] : m.phase_wall_s) out.phase_wall_s[ToString(phase)] = seconds;
  out.forward_options = m.problem.stages[0].forward.size();
  out.backward_options = m.problem.stages[0].backward.size();
  out.solver = {.status = pipeline::ToString(m.solved.solve.summary.status),
                .message = m.solved.solve.summary.message,
                .steps = m.solved.solve.summary.steps};
  out.note = m.note;
  if (!m.composition.empty()) out.composition_error = Composition(m);
  return out;
}

// Start and end of every instruction of the plan at `point` (earliest start), with the
// evaluated durations (the predicted ones when the run is not evaluated); a stage's gradient
// sync tail is an entry of kind "gradient_sync" after its last instruction.
Timeline MakeTimeline(const MethodResult& m, std::size_t point) {
  const auto& dag = m.solved.solve.dag;
  const auto& choice = m.Choice(point);
  auto option_of = [&](std::size_t node) -> const plan::InstructionOption& {
    return plan::ChosenOption(m.problem, dag, static_cast<int>(node), choice[node]);
  };
  const schedule::NodeClasses classes = m.problem.Classes();
  std::vector<double> durations(dag.nodes.size());
  for (std::size_t node = 0; node < dag.nodes.size(); ++node) {
    const std::map<int, measure::Sample>* evaluated =
        m.EvaluationsOf(classes.Get(classes.Of(dag, static_cast<int>(node))));
    const auto it = evaluated != nullptr ? evaluated->find(choice[node])
                                         : std::map<int, measure::Sample>::const_iterator();
    durations[node] =
        evaluated != nullptr && it != evaluated->end() ? it->second.time_s : option_of(node).time_s;
  }
  const schedule::Timing timing = schedule::StartTimes(dag, durations, m.problem.p2p_time_s);
  Timeline out{.method = m.method.name,
               .label = m.method.label,
               .schedule = schedule::ToString(dag.kind),
               .stages = {}};
  out.stages.resize(dag.num_stages);
  for (std::size_t node = 0; node < dag.nodes.size(); ++node) {
    const auto& ins = dag.nodes[node];
    const auto& option = option_of(node);
    const bool sync = ins.node == schedule::NodeKind::kGradientSync;
    out.stages[ins.stage].push_back(
        {.kind = sync ? "gradient_sync" : schedule::ToString(ins.kind),
         .chunk = ins.chunk,
         .microbatch = ins.microbatch,
         .start_s = timing.start[node],
         .end_s = timing.finish[node],
         .freq_mhz = option.freq_mhz,
         .mode = schedule::ToString(option.mode),
         .sync_sms = option.gradient_sync ? option.gradient_sync->sms : 0,
         .sync_overlapped = option.gradient_sync && option.gradient_sync->overlapped});
  }
  return out;
}

std::vector<PartitionFrontier> PartitionFrontiers(const MethodResult& m) {
  std::vector<PartitionFrontier> out;
  if (!m.profile) return out;
  for (const auto& p : m.profile->partitions) {
    if (!p.tunable) continue;
    PartitionFrontier frontier{.type = p.type, .clocks = {}};
    for (const auto& c : p.clock_frontiers) {
      std::vector<PartitionFrontierPoint> points;
      for (const auto& q : c.points) {
        points.push_back(
            {.time_s = q.time_s, .energy_j = q.energy_j, .sms = q.knobs.sms, .slot = q.knobs.slot});
      }
      frontier.clocks.emplace_back(c.freq_mhz, std::move(points));
    }
    out.push_back(std::move(frontier));
  }
  return out;
}

std::vector<PlanFileRow> PlanFiles(const MethodResult& m, const MethodResult* baseline) {
  std::vector<PlanFileRow> rows;
  const int gpus = std::max(m.problem.JobGpus(), 1);
  const std::size_t fastest = m.Fastest();
  for (std::size_t i : WrittenPlanIndices(m)) {
    const pipeline::Evaluation& e = m.evaluated[i];
    plan::FrontierPoint point;
    point.plan_index = static_cast<int>(i);
    PlanFileRow row{.file = plan::FrontierPlanPath(point),
                    .plan_index = static_cast<int>(i),
                    .is_plan_json = i == fastest,
                    .time_s = e.time_s,
                    .energy_j = e.energy_j,
                    .average_power_w = e.energy_j / e.time_s / gpus,
                    .delta_time_pct = std::nullopt,
                    .delta_energy_pct = std::nullopt};
    if (baseline) {
      const auto& ref = baseline->evaluated[baseline->Fastest()];
      row.delta_time_pct = ReductionPercent(ref.time_s, e.time_s);
      row.delta_energy_pct = ReductionPercent(ref.energy_j, e.energy_j);
    }
    rows.push_back(row);
  }
  // Fastest last, as the frontier's files are ordered slowest first.
  std::sort(rows.begin(), rows.end(), [](const PlanFileRow& a, const PlanFileRow& b) {
    return a.time_s != b.time_s ? a.time_s > b.time_s : a.plan_index < b.plan_index;
  });
  return rows;
}

// What a reader must know first: numbers from the emulator are not a GPU's, and a prior that
// is the emulator's own noise-free model makes the profiling look better than it would be.
std::string Caveat(const RunResult& run, bool prior_is_measuring_model) {
  if (run.backend.find("not a GPU result") != std::string::npos) {  // kareus.torch on a CPU
    return "CPU results: every measurement and evaluation ran kareus.torch's kernels on the "
           "CPU (host wall time; energy from the NVML library named in the backend), not on a "
           "GPU; they check the flow, not the savings.";
  }
  if (run.backend.rfind("emulator(", 0) != 0) return "";
  std::string caveat =
      "Emulator results: every measurement and evaluation comes from Kareus's built-in GPU "
      "emulator, not from a GPU; read them as what the planner does, not as measured savings.";
  if (prior_is_measuring_model) {
    caveat +=
        " The profiler's prior is the emulator's own noise-free model (the default), so "
        "the profiling results are flattering: they hold largely by construction. "
        "bench/profile_prior.py measures the method with a mismatched prior.";
  }
  return caveat;
}

}  // namespace

RunSummary BuildSummary(const RunResult& run) {
  RunSummary summary;
  summary.workload = run.model.workload.ToJson();
  summary.backend = run.backend;
  summary.evaluator = run.evaluator;
  summary.evaluated = run.evaluated;
  summary.gpu_hours_basis = mobo::kGpuHoursBasis;
  summary.peak_rss_mib = run.peak_rss_mib;
  summary.source_note =
      "Measurements come from " + run.backend + "; plans were evaluated by " + run.evaluator +
      " (a waiting GPU drawing its idle power). Energy is summed over all GPUs of one iteration." +
      (run.evaluated ? "" : " NOT EVALUATED: every figure is the planner's prediction.");
  const auto& profile = run.options.profile;
  summary.settings = {.seed = run.seed,
                      .methods = {},
                      .unit_time_s = run.options.unit_time_s,
                      .static_power_w = run.static_power_w,
                      .idle_power_w = run.idle_power_w,
                      .planning_clocks_mhz = PlanningClocks(run.model, run.options),
                      .sweep_anchor_stride = run.options.sweep_anchor_stride,
                      .confirm_readings = run.options.confirm_readings,
                      .budget = profile.budget,
                      .budget_fraction = profile.BudgetFraction(),
                      .min_budget = profile.budget > 0 ? 0 : profile.min_budget,
                      .surrogate = mobo::ToString(profile.surrogate),
                      .strategy = mobo::ToString(profile.strategy),
                      .store = profile.store.string(),
                      .prior = profile.prior ? profile.prior.description : "none",
                      .prior_note = "",
                      .prior_is_measuring_model = false,
                      .prior_calibrated = profile.prior && profile.prior_calibrate &&
                                          static_cast<bool>(profile.prior.make_calibrated),
                      .prior_front = profile.prior && profile.prior_front,
                      .related = {},
                      .evaluation = ToString(run.options.evaluation)};
  for (const auto& m : run.methods) {
    if (!m.profile) continue;
    summary.settings.prior_note = m.profile->prior_note;
    summary.settings.prior_is_measuring_model = m.profile->prior_is_measuring_model;
    summary.settings.related = m.profile->related;
  }
  for (const auto& m : run.methods) {
    summary.settings.methods.push_back(m.method.name);
    summary.methods.push_back(Summarize(m));
  }
  summary.caveat = Caveat(run, summary.settings.prior_is_measuring_model);
  // The max-throughput table: each method's fastest plan against the baseline's.
  const MethodResult* baseline = Find(run, kBaselineMethod);
  summary.plan_files = PlanFiles(MainMethod(run), baseline);
  for (const auto& m : run.methods) {
    const auto& f = m.evaluated[m.Fastest()];
    MaxThroughputRow row{.method = m.method.name,
                         .time_s = f.time_s,
                         .energy_j = f.energy_j,
                         .delta_time_pct = std::nullopt,
                         .delta_energy_pct = std::nullopt};
    if (baseline) {
      const auto& ref = baseline->evaluated[baseline->Fastest()];
      row.delta_time_pct = ReductionPercent(ref.time_s, f.time_s);
      row.delta_energy_pct = ReductionPercent(ref.energy_j, f.energy_j);
    }
    summary.max_throughput.push_back(row);
  }
  // The frontier tables against the reference.
  const MethodResult* reference = Find(run, kFrontierReference);
  if (reference) {
    const auto ref_sampled = Evaluated(*reference, true);
    const auto ref_all = Evaluated(*reference, false);
    for (const auto& m : run.methods) {
      if (&m == reference) continue;
      summary.frontier_table.push_back(
          {.method = m.method.name,
           .iso_time_energy_reduction_pct = IsoTimeEnergyReduction(ref_sampled, Evaluated(m, true)),
           .iso_energy_time_reduction_pct = IsoEnergyTimeReduction(ref_sampled, Evaluated(m, true)),
           .iso_time_energy_reduction_full_pct =
               IsoTimeEnergyReduction(ref_all, Evaluated(m, false)),
           .iso_energy_time_reduction_full_pct =
               IsoEnergyTimeReduction(ref_all, Evaluated(m, false))});
      const auto cmp = CompareAtEqualTime(ref_all, Evaluated(m, false));
      summary.interpolated.push_back({.method = m.method.name,
                                      .reference = reference->method.name,
                                      .overlap = cmp.overlap,
                                      .ranges_overlap = cmp.ranges_overlap,
                                      .range_begin_s = cmp.range_begin_s,
                                      .range_end_s = cmp.range_end_s,
                                      .mean_saving_pct = cmp.mean_percent,
                                      .max_saving_pct = cmp.max_percent,
                                      .min_saving_pct = cmp.min_percent});
    }
  }
  // The project's own acceptance checks: Kareus nowhere worse than the Perseus methods beyond
  // noise; its gap to the oracle at iso-time.
  if (const MethodResult* kareus = Find(run, "kareus")) {
    for (const char* ref : {"perseus", "nanobatching+perseus"}) {
      if (const MethodResult* r = Find(run, ref)) {
        const auto cmp = CompareAtEqualTime(Evaluated(*r, false), Evaluated(*kareus, false));
        summary.checks[std::string("kareus_vs_") + ref + "_min_saving_pct"] =
            cmp.overlap ? std::optional<double>(cmp.min_percent) : std::nullopt;
      }
    }
    if (const MethodResult* oracle = Find(run, "kareus-oracle"); oracle && reference) {
      const auto ref = Evaluated(*reference, false);
      const auto k = IsoTimeEnergyReduction(ref, Evaluated(*kareus, false));
      const auto o = IsoTimeEnergyReduction(ref, Evaluated(*oracle, false));
      summary.checks["kareus_gap_to_oracle_iso_time_pct"] =
          k && o ? std::optional<double>(*o - *k) : std::nullopt;
      const auto gap = CompareAtEqualTime(Evaluated(*kareus, false), Evaluated(*oracle, false));
      summary.checks["oracle_vs_kareus_mean_saving_pct"] =
          gap.overlap ? std::optional<double>(gap.mean_percent) : std::nullopt;
    }
  }
  const MethodResult& main = MainMethod(run);
  summary.timeline = MakeTimeline(main, main.Fastest());
  summary.partition_frontiers = PartitionFrontiers(main);
  return summary;
}

}  // namespace internal

namespace {

Json OptionalNumber(const std::optional<double>& value) {
  return value ? Json(*value) : Json(nullptr);
}

Json SpreadJson(const Spread& s) {
  return Json{{"min", s.min}, {"median", s.median}, {"max", s.max}, {"mean_abs", s.mean_abs}};
}

Json CompositionJson(const CompositionError& c) {
  Json samples = Json::array();
  for (const CompositionSampleSummary& s : c.samples) {
    samples.push_back({{"stage", s.stage},
                       {"instruction", s.instruction},
                       {"freq_mhz", s.freq_mhz},
                       {"composed_time_s", s.composed_time_s},
                       {"evaluated_time_s", s.evaluated_time_s},
                       {"composed_energy_j", s.composed_energy_j},
                       {"evaluated_energy_j", s.evaluated_energy_j},
                       {"time_error_pct", s.time_error_pct},
                       {"energy_error_pct", s.energy_error_pct}});
  }
  return Json{{"options", c.options},
              {"time_error_pct", SpreadJson(c.time_error_pct)},
              {"energy_error_pct", SpreadJson(c.energy_error_pct)},
              {"samples", samples}};
}

Json PointJson(const PointSummary& p) {
  return Json{{"time_s", p.time_s},
              {"energy_j", p.energy_j},
              {"static_energy_j", p.static_energy_j},
              {"dynamic_energy_j", p.dynamic_energy_j}};
}

}  // namespace

Json ToJson(const RunSummary& summary) {
  Json methods = Json::array();
  for (const MethodSummary& m : summary.methods) {
    Json frontier = Json::array();
    for (const FrontierPointSummary& p : m.frontier) {
      Json point = PointJson(p.point);
      point["plan_index"] = p.plan_index;
      point["predicted_time_s"] = p.predicted_time_s;
      point["predicted_energy_j"] = p.predicted_energy_j;
      frontier.push_back(point);
    }
    Json phases = Json::object();
    for (const auto& [name, seconds] : m.phase_wall_s) phases[name] = seconds;
    Json traits = Json::object();
    for (const auto& [name, value] : m.traits) traits[name] = value;
    Json by_kind = Json::object();
    for (const auto& [kind, cost] : m.profiling_by_kind) {
      by_kind[kind] = {{"gpu_hours", cost.gpu_hours}, {"measurements", cost.measurements}};
    }
    Json entry{
        {"method", m.method},
        {"label", m.label},
        {"traits", traits},
        {"fastest", PointJson(m.fastest)},
        {"lowest_energy", PointJson(m.lowest_energy)},
        {"frontier", frontier},
        {"sampled_plans", m.sampled_plans},
        {"profiling_gpu_hours", m.profiling_gpu_hours},
        {"measurements", m.measurements},
        {"profiling_by_kind", by_kind},
        {"evaluation_gpu_hours", m.evaluation_gpu_hours},
        {"phase_wall_s", phases},
        {"options_per_instruction",
         {{"forward", m.forward_options}, {"backward", m.backward_options}}},
        {"solver",
         {{"status", m.solver.status}, {"message", m.solver.message}, {"steps", m.solver.steps}}}};
    Json dropped = Json::array();
    for (const auto& d : m.dropped_after_evaluation) {
      dropped.push_back(
          {{"solver_index", d.solver_index},
           {"dominated_by", d.dominated_by},
           {"predicted", {{"time_s", d.predicted.time_s}, {"energy_j", d.predicted.energy_j}}},
           {"evaluated", PointJson(d.evaluated)}});
    }
    entry["dropped_after_evaluation"] = dropped;
    if (!m.note.empty()) entry["note"] = m.note;
    if (m.composition_error) entry["composition_error"] = CompositionJson(*m.composition_error);
    methods.push_back(entry);
  }
  Json max_throughput = Json::array();
  for (const MaxThroughputRow& r : summary.max_throughput) {
    max_throughput.push_back({{"method", r.method},
                              {"time_s", r.time_s},
                              {"energy_j", r.energy_j},
                              {"delta_time_pct", OptionalNumber(r.delta_time_pct)},
                              {"delta_energy_pct", OptionalNumber(r.delta_energy_pct)}});
  }
  Json frontier_table = Json::array();
  for (const FrontierTableRow& r : summary.frontier_table) {
    frontier_table.push_back(
        {{"method", r.method},
         {"iso_time_energy_reduction_pct", OptionalNumber(r.iso_time_energy_reduction_pct)},
         {"iso_energy_time_reduction_pct", OptionalNumber(r.iso_energy_time_reduction_pct)},
         {"iso_time_energy_reduction_full_pct",
          OptionalNumber(r.iso_time_energy_reduction_full_pct)},
         {"iso_energy_time_reduction_full_pct",
          OptionalNumber(r.iso_energy_time_reduction_full_pct)}});
  }
  Json interpolated = Json::array();
  for (const InterpolatedRow& r : summary.interpolated) {
    interpolated.push_back({{"method", r.method},
                            {"reference", r.reference},
                            {"overlap", r.overlap},
                            {"ranges_overlap", r.ranges_overlap},
                            {"range_begin_s", r.range_begin_s},
                            {"range_end_s", r.range_end_s},
                            {"mean_saving_pct", r.mean_saving_pct},
                            {"max_saving_pct", r.max_saving_pct},
                            {"min_saving_pct", r.min_saving_pct}});
  }
  Json checks = Json::object();
  for (const auto& [name, value] : summary.checks) checks[name] = OptionalNumber(value);
  Json stages = Json::array();
  for (std::size_t s = 0; s < summary.timeline.stages.size(); ++s) {
    Json instructions = Json::array();
    for (const TimelineInstruction& i : summary.timeline.stages[s]) {
      Json item{{"kind", i.kind},       {"chunk", i.chunk}, {"microbatch", i.microbatch},
                {"start_s", i.start_s}, {"end_s", i.end_s}, {"freq_mhz", i.freq_mhz},
                {"mode", i.mode}};
      if (i.sync_sms > 0) {
        item["gradient_sync"] = {{"sms", i.sync_sms}, {"overlapped", i.sync_overlapped}};
      }
      instructions.push_back(std::move(item));
    }
    stages.push_back({{"stage", static_cast<int>(s)}, {"instructions", instructions}});
  }
  Json partition_frontiers = Json::array();
  for (const PartitionFrontier& p : summary.partition_frontiers) {
    Json clocks = Json::array();
    for (const auto& [freq_mhz, points] : p.clocks) {
      Json list = Json::array();
      for (const PartitionFrontierPoint& q : points) {
        list.push_back(
            {{"time_s", q.time_s}, {"energy_j", q.energy_j}, {"sms", q.sms}, {"slot", q.slot}});
      }
      clocks.push_back({{"freq_mhz", freq_mhz}, {"points", list}});
    }
    partition_frontiers.push_back({{"type", p.type}, {"clocks", clocks}});
  }
  const RunSettings& s = summary.settings;
  Json settings{{"seed", s.seed},
                {"methods", s.methods},
                {"unit_time_s", s.unit_time_s},
                {"static_power_w", s.static_power_w},
                {"idle_power_w", s.idle_power_w},
                {"planning_clocks_mhz", s.planning_clocks_mhz},
                {"sweep_anchor_stride", s.sweep_anchor_stride},
                {"confirm_readings", s.confirm_readings},
                {"profile",
                 {{"budget", s.budget},
                  {"budget_fraction", s.budget_fraction},
                  {"min_budget", s.min_budget},
                  {"surrogate", s.surrogate},
                  {"strategy", s.strategy},
                  {"store", s.store},
                  {"prior", s.prior},
                  {"prior_note", s.prior_note},
                  {"prior_is_measuring_model", s.prior_is_measuring_model},
                  {"prior_calibrated", s.prior_calibrated},
                  {"prior_front", s.prior_front},
                  {"related_workloads", s.related}}},
                {"evaluation", s.evaluation},
                {"backend", summary.backend},
                {"evaluator", summary.evaluator}};
  Json plan_files = Json::array();
  for (const PlanFileRow& r : summary.plan_files) {
    plan_files.push_back({{"file", r.file},
                          {"plan_index", r.plan_index},
                          {"plan_json", r.is_plan_json},
                          {"time_s", r.time_s},
                          {"energy_j", r.energy_j},
                          {"average_power_w", r.average_power_w},
                          {"delta_time_pct", OptionalNumber(r.delta_time_pct)},
                          {"delta_energy_pct", OptionalNumber(r.delta_energy_pct)}});
  }
  return Json{{"format", kSummaryFormat},
              {"caveat", summary.caveat},
              {"source_note", summary.source_note},
              {"plan_files", plan_files},
              {"backend", summary.backend},
              {"evaluator", summary.evaluator},
              {"evaluated", summary.evaluated},
              {"gpu_hours_basis", summary.gpu_hours_basis},
              {"peak_rss_mib", summary.peak_rss_mib},
              {"workload", summary.workload},
              {"settings", settings},
              {"methods", methods},
              {"max_throughput", max_throughput},
              {"frontier_table", frontier_table},
              {"interpolated", interpolated},
              {"checks", checks},
              {"timeline",
               {{"method", summary.timeline.method},
                {"label", summary.timeline.label},
                {"schedule", summary.timeline.schedule},
                {"stages", stages}}},
              {"partition_frontiers", partition_frontiers}};
}

}  // namespace kareus::methods
