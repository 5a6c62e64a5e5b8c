// SPDX-License-Identifier: Apache-2.0
#include "kareus/methods/run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <tuple>

#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/methods/metrics.h"
#include "kareus/pareto/pareto.h"
#include "kareus/report/report.h"
#include "methods/compose.h"

namespace kareus::methods {

const char* ToString(Method method) {
  switch (method) {
    case Method::kMegatron: return "megatron";
    case Method::kNanobatching: return "nanobatching";
    case Method::kPerseus: return "perseus";
    case Method::kNanobatchingPerseus: return "nanobatching+perseus";
    case Method::kKareus: return "kareus";
    case Method::kKareusOracle: return "kareus-oracle";
  }
  return "?";
}

const char* Label(Method method) {
  switch (method) {
    case Method::kMegatron: return "Megatron-LM";
    case Method::kNanobatching: return "Nanobatching";
    case Method::kPerseus: return "Perseus";
    case Method::kNanobatchingPerseus: return "Nanobatching+Perseus";
    case Method::kKareus: return "Kareus";
    case Method::kKareusOracle: return "Kareus (oracle)";
  }
  return "?";
}

std::vector<Method> DefaultMethods() {
  return {Method::kMegatron, Method::kNanobatching, Method::kPerseus,
          Method::kNanobatchingPerseus, Method::kKareus};
}

Method MethodFromString(const std::string& text) {
  for (Method m : {Method::kMegatron, Method::kNanobatching, Method::kPerseus,
                   Method::kNanobatchingPerseus, Method::kKareus, Method::kKareusOracle}) {
    if (text == ToString(m)) return m;
  }
  throw InputError("--methods = " + text +
                   ": unknown method (valid: megatron, nanobatching, perseus, "
                   "nanobatching+perseus, kareus, kareus-oracle)");
}

namespace {

using Clock = std::chrono::steady_clock;
using workload::Direction;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

void Progress(const RunOptions& options, const std::string& text) {
  if (!options.quiet) std::fprintf(stderr, "kareus: %s\n", text.c_str());
}

emulator::InstructionKnobs ToEmulatorKnobs(const plan::PlannedInstruction& knobs) {
  emulator::InstructionKnobs out;
  out.freq_mhz = knobs.freq_mhz;
  out.mode = knobs.mode == plan::ExecutionMode::kSequential ? emulator::ExecutionMode::kSequential
                                                            : emulator::ExecutionMode::kNanobatched;
  for (const auto& p : knobs.partitions) out.partitions[p.type] = {.sms = p.sms, .slot = p.slot};
  return out;
}

// The Nanobatching baselines' knobs: no per-type knobs, i.e. the library default (NCCL with its
// default channels, launched at the start of every partition), as the published runtime runs
// when no schedule is loaded (kareus-official.md §1.6).
std::vector<plan::PartitionKnobs> DefaultPartitionKnobs(const workload::WorkloadModel&) {
  return {};
}

// The clocks a method may pick per instruction: the GPU's profiling grid (published sub-grid),
// or every supported clock with the profiler's full_grid.
std::vector<int> PlanningClocks(const workload::WorkloadModel& model, const RunOptions& options) {
  const auto& clock = model.workload.gpu.clock;
  return options.profile.full_grid ? clock.Supported() : clock.ProfileGrid();
}

// Measures (emulates a measurement of) one whole instruction under `knobs`: the Perseus-style
// in-situ clock sweep. Deterministic per configuration so methods that share a configuration
// (Perseus and Kareus's sequential fallback) read the same value.
struct InstructionProfiler {
  const workload::WorkloadModel& model;
  emulator::MeasurementOptions measurement;
  uint64_t seed;
  double gpu_seconds = 0.0;
  int64_t measurements = 0;

  InstructionOption Measure(int stage, Direction direction, const plan::PlannedInstruction& knobs) {
    const auto truth = emulator::SimulateInstruction(model, stage, direction, ToEmulatorKnobs(knobs));
    std::string key = model.workload.Signature() + "|instruction|" + std::to_string(stage) + "|" +
                      workload::ToString(direction) + "|" + plan::ToString(knobs.mode) + "|" +
                      std::to_string(knobs.freq_mhz);
    for (const auto& p : knobs.partitions) key += "|" + p.type + ":" + std::to_string(p.sms) + "@" + p.slot;
    const auto m = emulator::Measure(truth, measurement, seed, HashString(key.c_str()));
    gpu_seconds += m.gpu_seconds * model.stages[stage].gpus;
    ++measurements;
    return {.time_s = m.value.time_s, .energy_j = m.value.energy_j, .knobs = knobs};
  }
};

plan::PlannedInstruction Knobs(int freq_mhz, plan::ExecutionMode mode,
                               std::vector<plan::PartitionKnobs> partitions = {}) {
  plan::PlannedInstruction k;
  k.freq_mhz = freq_mhz;
  k.mode = mode;
  k.partitions = std::move(partitions);
  return k;
}

// Options of the methods whose knobs are only clock and execution mode.
void ClockSweepOptions(MethodResult& result, const workload::WorkloadModel& model,
                       const std::vector<int>& clocks, plan::ExecutionMode mode,
                       InstructionProfiler& profiler) {
  const int stages = static_cast<int>(model.stages.size());
  result.forward_options.assign(stages, {});
  result.backward_options.assign(stages, {});
  const auto defaults = mode == plan::ExecutionMode::kNanobatched ? DefaultPartitionKnobs(model)
                                                                  : std::vector<plan::PartitionKnobs>{};
  for (int s = 0; s < stages; ++s) {
    for (int f : clocks) {
      result.forward_options[s].push_back(profiler.Measure(s, Direction::kForward, Knobs(f, mode, defaults)));
      result.backward_options[s].push_back(profiler.Measure(s, Direction::kBackward, Knobs(f, mode, defaults)));
    }
  }
}

pipeline::Problem MakeProblem(const MethodResult& result, const workload::WorkloadModel& model) {
  pipeline::Problem problem;
  problem.num_stages = static_cast<int>(model.stages.size());
  problem.num_microbatches = model.workload.microbatches;
  for (const auto& stage : model.stages) problem.gpus_per_stage.push_back(stage.gpus);
  auto convert = [](const std::vector<InstructionOption>& options) {
    std::vector<pipeline::Option> out;
    for (const auto& o : options) out.push_back({.time_s = o.time_s, .energy_j = o.energy_j});
    return out;
  };
  for (int s = 0; s < problem.num_stages; ++s) {
    problem.forward_options.push_back(convert(result.forward_options[s]));
    problem.backward_options.push_back(convert(result.backward_options[s]));
  }
  // Activations (forward) and gradients (backward) cross stages on the inter-node link.
  const auto& net = model.workload.gpu.interconnect;
  double bytes = 0.0;
  for (const auto& stage : model.stages) bytes = std::max(bytes, stage.forward.p2p_send.bytes);
  if (bytes > 0.0) {
    problem.p2p_time_s = bytes / (net.inter_node_bandwidth_gbps * 1e9) + net.inter_node_latency_us * 1e-6;
  }
  return problem;
}

// Solves the method's pipeline and runs every frontier plan on the emulated cluster.
void SolveAndEvaluate(MethodResult& result, const workload::WorkloadModel& model,
                      const RunOptions& options) {
  const double p_static = model.workload.gpu.power.static_w;
  result.problem = MakeProblem(result, model);
  auto start = Clock::now();
  const pipeline::Result solved =
      pipeline::Solve(result.problem, {.unit_time_s = options.unit_time_s, .p_static_w = p_static});
  result.phase_wall_s["solve"] = Seconds(start);
  result.solver = solved.summary;
  result.dag = solved.dag;
  if (solved.points.empty()) {
    throw Error(std::string(ToString(result.method)) + ": the solver returned no plan (" +
                pipeline::ToString(solved.summary.status) + ": " + solved.summary.message + ")");
  }
  // Ground truth of an option: the whole instruction simulated with its knobs, noise-free.
  start = Clock::now();
  pipeline::Problem truth = result.problem;
  std::map<std::tuple<int, int, int>, bool> simulated;
  for (const auto& p : solved.points) {
    for (size_t node = 0; node < p.choice.size(); ++node) {
      const auto& ins = result.dag.nodes[node];
      const bool forward = ins.kind == pipeline::InstructionKind::kForward;
      const auto key = std::make_tuple(ins.stage, forward ? 0 : 1, p.choice[node]);
      if (simulated.count(key)) continue;
      simulated[key] = true;
      const auto& option = (forward ? result.forward_options : result.backward_options)[ins.stage][p.choice[node]];
      const auto sim = emulator::SimulateInstruction(
          model, ins.stage, forward ? Direction::kForward : Direction::kBackward, ToEmulatorKnobs(option.knobs));
      auto& target = (forward ? truth.forward_options : truth.backward_options)[ins.stage][p.choice[node]];
      target = {.time_s = sim.time_s, .energy_j = sim.energy_j};
    }
    result.points.push_back({.step = p.step,
                             .choice = p.choice,
                             .predicted = p.cost,
                             .measured = pipeline::Evaluate(truth, result.dag, p.choice, p_static)});
  }
  result.phase_wall_s["evaluate"] = Seconds(start);
  result.sampled = PublishedFrontierSample(static_cast<int>(result.points.size()));
}

// Per clock, the effective-energy fronts of every partition type from measured (or exhaustive)
// configurations, then composed into instruction options.
void KareusOptions(MethodResult& result, const workload::WorkloadModel& model,
                   const std::vector<internal::TypeSamples>& samples, InstructionProfiler& profiler,
                   const std::vector<int>& clocks, const RunOptions& options) {
  const int stages = static_cast<int>(model.stages.size());
  result.forward_options.assign(stages, {});
  result.backward_options.assign(stages, {});
  const auto defaults = DefaultPartitionKnobs(model);
  const internal::ComposeInputs inputs = internal::MeasureComposeInputs(model, samples, clocks, profiler.measurement, profiler.seed);
  profiler.gpu_seconds += inputs.gpu_seconds;
  profiler.measurements += inputs.measurements;
  for (int s = 0; s < stages; ++s) {
    for (Direction d : {Direction::kForward, Direction::kBackward}) {
      auto& out = d == Direction::kForward ? result.forward_options[s] : result.backward_options[s];
      for (const auto& composed : internal::ComposeInstruction(model, s, d, inputs, clocks, options.max_options)) {
        out.push_back({.time_s = composed.time_s, .energy_j = composed.energy_j, .knobs = composed.knobs});
      }
      // Fallbacks the solver may pick where overlap does not pay: sequential execution and the
      // library-default nanobatched execution at every clock.
      for (int f : clocks) {
        out.push_back(profiler.Measure(s, d, Knobs(f, plan::ExecutionMode::kSequential)));
        if (model.nanobatching) {
          out.push_back(profiler.Measure(s, d, Knobs(f, plan::ExecutionMode::kNanobatched, defaults)));
        }
      }
      out = internal::FilterOptions(std::move(out), model.workload.gpu.power.static_w);
    }
  }
}

MethodResult RunMethod(Method method, const workload::WorkloadModel& model,
                       const RunOptions& options, const Context& context) {
  MethodResult result;
  result.method = method;
  const auto& gpu = model.workload.gpu;
  const auto clocks = PlanningClocks(model, options);
  InstructionProfiler profiler{model, options.measurement, DeriveSeed(context.seed, 0x1257)};
  if (method == Method::kKareusOracle) profiler.measurement.noise_free = true;
  const bool nanobatching_method = method == Method::kNanobatching ||
                                   method == Method::kNanobatchingPerseus ||
                                   method == Method::kKareus || method == Method::kKareusOracle;
  if (nanobatching_method && !model.nanobatching) {
    result.note = model.workload.CanNanobatch()
                      ? "no collective to overlap (tp = cp = 1): planned with sequential execution"
                      : "microbatch_size < 2 cannot be split into nanobatches: planned with "
                        "sequential execution";
  }
  const auto mode = nanobatching_method && model.nanobatching ? plan::ExecutionMode::kNanobatched
                                                              : plan::ExecutionMode::kSequential;
  auto start = Clock::now();
  switch (method) {
    case Method::kMegatron:
    case Method::kNanobatching:
      ClockSweepOptions(result, model, {gpu.clock.default_mhz}, mode, profiler);
      break;
    case Method::kPerseus:
    case Method::kNanobatchingPerseus:
      ClockSweepOptions(result, model, clocks, mode, profiler);
      break;
    case Method::kKareus:
    case Method::kKareusOracle: {
      std::vector<internal::TypeSamples> samples;
      if (model.nanobatching) {
        if (method == Method::kKareus) {
          mobo::ProfileOptions profile = options.profile;
          profile.oracle = false;
          result.profile = mobo::ProfileWorkload(model, profile, context);
          samples = internal::SamplesFromProfile(model, *result.profile);
          // Cost of every configuration the frontiers rest on, reused from the store or not: a
          // partition is measured on the GPUs of its collective's group (published harness).
          for (const auto& p : result.profile->partitions) {
            const int gpus = model.Type(p.type).collective.group_size;
            for (const auto& e : p.evaluations) profiler.gpu_seconds += e.sample.gpu_seconds * gpus;
            profiler.measurements += static_cast<int64_t>(p.evaluations.size());
          }
        } else {
          samples = internal::ExhaustiveSamples(model, clocks);
        }
      }
      result.phase_wall_s["profile"] = Seconds(start);
      start = Clock::now();
      KareusOptions(result, model, samples, profiler, clocks, options);
      result.phase_wall_s["compose"] = Seconds(start);
      break;
    }
  }
  if (!result.phase_wall_s.count("profile")) result.phase_wall_s["profile"] = Seconds(start);
  result.profiling_gpu_seconds = profiler.gpu_seconds;
  result.measurements = profiler.measurements;
  SolveAndEvaluate(result, model, options);
  return result;
}

std::vector<TimeEnergy> Measured(const MethodResult& m, bool sampled_only) {
  std::vector<TimeEnergy> out;
  if (sampled_only) {
    for (int i : m.sampled) out.push_back({m.points[i].measured.time_s, m.points[i].measured.energy_j});
  } else {
    for (const auto& p : m.points) out.push_back({p.measured.time_s, p.measured.energy_j});
  }
  return out;
}

Json PointJson(const pipeline::Evaluation& e) {
  return Json{{"time_s", e.time_s}, {"energy_j", e.energy_j}, {"static_energy_j", e.static_energy_j},
              {"dynamic_energy_j", e.dynamic_energy_j}};
}

Json OptionalPercent(const std::optional<double>& value) {
  return value ? Json(*value) : Json(nullptr);
}

// Start and end of every instruction of a plan on the emulated cluster (earliest start).
Json Timeline(const RunResult& run, const MethodResult& m, int point_index) {
  const PlanPoint& point = m.points[point_index];
  const auto& dag = m.dag;
  std::vector<double> duration(dag.nodes.size()), finish(dag.nodes.size(), 0.0), start(dag.nodes.size(), 0.0);
  for (size_t node = 0; node < dag.nodes.size(); ++node) {
    const auto& ins = dag.nodes[node];
    const bool forward = ins.kind == pipeline::InstructionKind::kForward;
    const auto& option = (forward ? m.forward_options : m.backward_options)[ins.stage][point.choice[node]];
    duration[node] = emulator::SimulateInstruction(run.model, ins.stage,
                                                   forward ? Direction::kForward : Direction::kBackward,
                                                   ToEmulatorKnobs(option.knobs)).time_s;
  }
  std::vector<std::vector<std::pair<int, double>>> preds(dag.nodes.size());
  for (const auto& e : dag.edges) preds[e.to].push_back({e.from, e.cross_stage ? m.problem.p2p_time_s : 0.0});
  for (int node : dag.topological_order) {
    for (const auto& [from, lag] : preds[node]) start[node] = std::max(start[node], finish[from] + lag);
    finish[node] = start[node] + duration[node];
  }
  Json stages = Json::array();
  for (int s = 0; s < dag.num_stages; ++s) {
    Json instructions = Json::array();
    for (size_t node = 0; node < dag.nodes.size(); ++node) {
      const auto& ins = dag.nodes[node];
      if (ins.stage != s) continue;
      const bool forward = ins.kind == pipeline::InstructionKind::kForward;
      const auto& option = (forward ? m.forward_options : m.backward_options)[s][point.choice[node]];
      instructions.push_back({{"kind", forward ? "forward" : "backward"},
                              {"microbatch", ins.microbatch},
                              {"start_s", start[node]},
                              {"end_s", finish[node]},
                              {"freq_mhz", option.knobs.freq_mhz},
                              {"mode", plan::ToString(option.knobs.mode)}});
    }
    stages.push_back({{"stage", s}, {"instructions", instructions}});
  }
  return Json{{"method", ToString(m.method)}, {"label", Label(m.method)}, {"stages", stages}};
}

Json PartitionFrontiers(const MethodResult& m) {
  Json out = Json::array();
  if (!m.profile) return out;
  for (const auto& p : m.profile->partitions) {
    if (!p.tunable) continue;
    Json clocks = Json::array();
    for (const auto& c : p.clock_frontiers) {
      Json points = Json::array();
      for (const auto& q : c.points) {
        points.push_back({{"time_s", q.time_s}, {"energy_j", q.energy_j}, {"sms", q.knobs.sms}, {"slot", q.knobs.slot}});
      }
      clocks.push_back({{"freq_mhz", c.freq_mhz}, {"points", points}});
    }
    out.push_back({{"type", p.type}, {"clocks", clocks}});
  }
  return out;
}

const MethodResult* Find(const RunResult& run, Method method) {
  for (const auto& m : run.methods) {
    if (m.method == method) return &m;
  }
  return nullptr;
}

Json BuildSummary(const RunResult& run) {
  Json methods = Json::array();
  for (const auto& m : run.methods) {
    Json frontier = Json::array();
    for (size_t i = 0; i < m.points.size(); ++i) {
      Json p = PointJson(m.points[i].measured);
      p["plan_index"] = static_cast<int>(i);
      p["predicted_time_s"] = m.points[i].predicted.time_s;
      p["predicted_energy_j"] = m.points[i].predicted.energy_j;
      frontier.push_back(p);
    }
    const auto fastest = m.points.back().measured;
    const auto lowest = std::min_element(m.points.begin(), m.points.end(), [](const auto& a, const auto& b) {
      return a.measured.energy_j < b.measured.energy_j;
    })->measured;
    Json phases = Json::object();
    for (const auto& [name, seconds] : m.phase_wall_s) phases[name] = seconds;
    Json entry{{"method", ToString(m.method)},
               {"label", Label(m.method)},
               {"fastest", PointJson(fastest)},
               {"lowest_energy", PointJson(lowest)},
               {"frontier", frontier},
               {"sampled_plans", m.sampled},
               {"profiling_gpu_hours", m.profiling_gpu_seconds / 3600.0},
               {"measurements", m.measurements},
               {"phase_wall_s", phases},
               {"options_per_instruction",
                {{"forward", m.forward_options.empty() ? 0 : m.forward_options[0].size()},
                 {"backward", m.backward_options.empty() ? 0 : m.backward_options[0].size()}}},
               {"solver",
                {{"status", pipeline::ToString(m.solver.status)},
                 {"message", m.solver.message},
                 {"steps", m.solver.steps}}}};
    if (!m.note.empty()) entry["note"] = m.note;
    methods.push_back(entry);
  }
  // The max-throughput table: each method's fastest plan against Megatron-LM's.
  Json max_throughput = Json::array();
  const MethodResult* megatron = Find(run, Method::kMegatron);
  for (const auto& m : run.methods) {
    const auto& f = m.points.back().measured;
    Json row{{"method", ToString(m.method)}, {"time_s", f.time_s}, {"energy_j", f.energy_j}};
    if (megatron) {
      const auto& ref = megatron->points.back().measured;
      row["delta_time_pct"] = ReductionPercent(ref.time_s, f.time_s);
      row["delta_energy_pct"] = ReductionPercent(ref.energy_j, f.energy_j);
    } else {
      row["delta_time_pct"] = nullptr;
      row["delta_energy_pct"] = nullptr;
    }
    max_throughput.push_back(row);
  }
  // The frontier tables against Perseus.
  Json frontier_table = Json::array(), interpolated = Json::array();
  const MethodResult* perseus = Find(run, Method::kPerseus);
  Json checks = Json::object();
  if (perseus) {
    const auto ref_sampled = Measured(*perseus, true);
    const auto ref_all = Measured(*perseus, false);
    for (const auto& m : run.methods) {
      if (m.method == Method::kPerseus) continue;
      frontier_table.push_back(
          {{"method", ToString(m.method)},
           {"iso_time_energy_reduction_pct", OptionalPercent(IsoTimeEnergyReduction(ref_sampled, Measured(m, true)))},
           {"iso_energy_time_reduction_pct", OptionalPercent(IsoEnergyTimeReduction(ref_sampled, Measured(m, true)))},
           {"iso_time_energy_reduction_full_pct", OptionalPercent(IsoTimeEnergyReduction(ref_all, Measured(m, false)))},
           {"iso_energy_time_reduction_full_pct", OptionalPercent(IsoEnergyTimeReduction(ref_all, Measured(m, false)))}});
      const auto cmp = CompareAtEqualTime(ref_all, Measured(m, false));
      interpolated.push_back({{"method", ToString(m.method)},
                              {"reference", "perseus"},
                              {"overlap", cmp.overlap},
                              {"range_begin_s", cmp.range_begin_s},
                              {"range_end_s", cmp.range_end_s},
                              {"mean_saving_pct", cmp.mean_percent},
                              {"max_saving_pct", cmp.max_percent},
                              {"min_saving_pct", cmp.min_percent}});
    }
  }
  // The project's own acceptance checks (issue: Kareus nowhere worse than the Perseus methods
  // beyond noise; its gap to the oracle at iso-time).
  if (const MethodResult* kareus = Find(run, Method::kKareus)) {
    for (Method ref : {Method::kPerseus, Method::kNanobatchingPerseus}) {
      if (const MethodResult* r = Find(run, ref)) {
        const auto cmp = CompareAtEqualTime(Measured(*r, false), Measured(*kareus, false));
        checks[std::string("kareus_vs_") + ToString(ref) + "_min_saving_pct"] =
            cmp.overlap ? Json(cmp.min_percent) : Json(nullptr);
      }
    }
    if (const MethodResult* oracle = Find(run, Method::kKareusOracle); oracle && perseus) {
      const auto ref = Measured(*perseus, false);
      const auto k = IsoTimeEnergyReduction(ref, Measured(*kareus, false));
      const auto o = IsoTimeEnergyReduction(ref, Measured(*oracle, false));
      checks["kareus_gap_to_oracle_iso_time_pct"] = k && o ? Json(*o - *k) : Json(nullptr);
      const auto gap = CompareAtEqualTime(Measured(*kareus, false), Measured(*oracle, false));
      checks["oracle_vs_kareus_mean_saving_pct"] = gap.overlap ? Json(gap.mean_percent) : Json(nullptr);
    }
  }
  const MethodResult* main = Find(run, Method::kKareus);
  if (!main) main = &run.methods.back();
  Json settings{{"seed", run.seed},
                {"methods", Json::array()},
                {"unit_time_s", run.options.unit_time_s},
                {"static_power_w", run.model.workload.gpu.power.static_w},
                {"planning_clocks_mhz", PlanningClocks(run.model, run.options)},
                {"profile",
                 {{"budget", run.options.profile.budget},
                  {"budget_fraction", run.options.profile.budget_fraction},
                  {"surrogate", mobo::ToString(run.options.profile.surrogate)},
                  {"strategy", mobo::ToString(run.options.profile.strategy)},
                  {"store", run.options.profile.store.string()}}},
                {"measurement_noise",
                 {{"time", run.options.measurement.time_noise}, {"energy", run.options.measurement.energy_noise}}},
                {"backend", "emulator"}};
  for (const auto& m : run.methods) settings["methods"].push_back(ToString(m.method));
  return Json{{"format", "kareus.summary/1"},
              {"source_note",
               "All times and energies come from the built-in GPU emulator (no GPU was used): "
               "plans are profiled with emulated measurement noise, then every plan is run on the "
               "emulated cluster noise-free. Energy is summed over all GPUs of one iteration."},
              {"workload", run.model.workload.ToJson()},
              {"settings", settings},
              {"methods", methods},
              {"max_throughput", max_throughput},
              {"frontier_table", frontier_table},
              {"interpolated", interpolated},
              {"checks", checks},
              {"timeline", Timeline(run, *main, static_cast<int>(main->points.size()) - 1)},
              {"partition_frontiers", PartitionFrontiers(*main)}};
}

}  // namespace

RunResult RunWorkload(const workload::Workload& workload, const RunOptions& options,
                      const Context& context) {
  if (options.methods.empty()) throw InputError("--methods: at least one method is required");
  if (!(options.unit_time_s > 0.0)) {
    ThrowInput("--unit-time", Describe(options.unit_time_s * 1e3) + " ms", "must be positive");
  }
  RunResult run;
  run.model = workload::BuildWorkloadModel(workload);
  run.options = options;
  run.seed = context.seed;
  for (Method method : options.methods) {
    Progress(options, std::string("planning ") + Label(method));
    run.methods.push_back(RunMethod(method, run.model, options, context));
  }
  run.summary = BuildSummary(run);
  return run;
}

plan::Plan MakePlan(const RunResult& run, const MethodResult& m, int point_index) {
  KAREUS_CHECK(point_index >= 0 && point_index < static_cast<int>(m.points.size()));
  const PlanPoint& point = m.points[point_index];
  plan::Plan out;
  out.method = ToString(m.method);
  out.workload = run.model.workload.ToJson();
  out.schedule = "1f1b";
  out.num_microbatches = run.model.workload.microbatches;
  out.iteration = {.time_s = point.measured.time_s,
                   .energy_j = point.measured.energy_j,
                   .static_energy_j = point.measured.static_energy_j,
                   .dynamic_energy_j = point.measured.dynamic_energy_j};
  for (int s = 0; s < m.dag.num_stages; ++s) {
    plan::PlannedStage stage;
    stage.stage = s;
    stage.gpus = run.model.stages[s].gpus;
    out.stages.push_back(stage);
  }
  // DAG nodes are listed per stage in execution order (node = stage * 2M + position).
  for (size_t node = 0; node < m.dag.nodes.size(); ++node) {
    const auto& ins = m.dag.nodes[node];
    const bool forward = ins.kind == pipeline::InstructionKind::kForward;
    const auto& option = (forward ? m.forward_options : m.backward_options)[ins.stage][point.choice[node]];
    plan::PlannedInstruction planned = option.knobs;
    planned.kind = forward ? plan::InstructionKind::kForward : plan::InstructionKind::kBackward;
    planned.microbatch = ins.microbatch;
    planned.time_s = option.time_s;
    planned.energy_j = option.energy_j;
    if (planned.mode == plan::ExecutionMode::kSequential) planned.partitions.clear();
    out.stages[ins.stage].instructions.push_back(planned);
  }
  return out;
}

namespace {

void WriteMethodFiles(const RunResult& run, const MethodResult& m, const std::filesystem::path& dir) {
  const int fastest = static_cast<int>(m.points.size()) - 1;
  plan::WritePlanFile(dir / "plan.json", MakePlan(run, m, fastest));
  plan::FrontierFile frontier;
  frontier.method = ToString(m.method);
  frontier.workload = run.model.workload.ToJson();
  std::vector<int> kept = m.sampled;
  if (std::find(kept.begin(), kept.end(), fastest) == kept.end()) kept.push_back(fastest);
  for (int i = fastest; i >= 0; --i) {
    const auto& e = m.points[i].measured;
    const bool has_plan = std::find(kept.begin(), kept.end(), i) != kept.end();
    frontier.points.push_back({.time_s = e.time_s,
                               .energy_j = e.energy_j,
                               .static_energy_j = e.static_energy_j,
                               .plan_index = has_plan ? i : -1});
  }
  std::sort(frontier.points.begin(), frontier.points.end(),
            [](const auto& a, const auto& b) { return a.time_s < b.time_s; });
  plan::WriteFrontierFile(dir / "frontier.json", frontier);
  for (int i : kept) {
    char name[32];
    std::snprintf(name, sizeof(name), "plan_%05d.json", i);
    plan::WritePlanFile(dir / "plans" / name, MakePlan(run, m, i));
  }
}

}  // namespace

void WriteRunOutputs(const RunResult& run, const std::filesystem::path& out) {
  const MethodResult* main = Find(run, Method::kKareus);
  if (!main) main = &run.methods.back();
  for (const auto& m : run.methods) WriteMethodFiles(run, m, out / "methods" / ToString(m.method));
  WriteMethodFiles(run, *main, out);
  WriteJsonFile(out / "summary.json", run.summary);
  WriteFileAtomic(out / "report.html", report::RenderHtml(run.summary));
}

EvaluationResult EvaluateWorkloads(const std::vector<std::filesystem::path>& workloads,
                                   const RunOptions& options, const Context& context,
                                   const std::filesystem::path& out) {
  // Validate every file before running anything.
  std::vector<workload::Workload> loaded;
  for (const auto& path : workloads) loaded.push_back(workload::LoadWorkloadFile(path));
  EvaluationResult result;
  result.evaluation = Json{{"format", "kareus.evaluation/1"}, {"rows", Json::array()}};
  for (const auto& w : loaded) {
    RunOptions per = options;
    if (!options.profile.store.empty()) {
      per.profile.store = options.profile.store;
    } else if (!out.empty()) {
      per.profile.store = out / w.name / "measurements.sqlite";
    }
    Progress(options, "workload " + w.name);
    const RunResult run = RunWorkload(w, per, context);
    if (!out.empty()) WriteRunOutputs(run, out / w.name);
    result.evaluation["rows"].push_back({{"workload", w.name},
                                         {"max_throughput", run.summary["max_throughput"]},
                                         {"frontier_table", run.summary["frontier_table"]},
                                         {"interpolated", run.summary["interpolated"]},
                                         {"checks", run.summary["checks"]}});
  }
  result.table = report::RenderEvaluationTable(result.evaluation);
  if (!out.empty()) {
    WriteJsonFile(out / "evaluation.json", result.evaluation);
    WriteFileAtomic(out / "evaluation.txt", result.table);
  }
  return result;
}

}  // namespace kareus::methods
