// SPDX-License-Identifier: Apache-2.0
#include "kareus/methods/run.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/progress.h"
#include "kareus/methods/metrics.h"
#include "kareus/report/report.h"
#include "kareus/plan/compose.h"
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
  throw InputError("--methods = " + ShownValue(text) +
                   ": unknown method (valid: megatron, nanobatching, perseus, "
                   "nanobatching+perseus, kareus, kareus-oracle)");
}

namespace {

using Clock = std::chrono::steady_clock;
using workload::Direction;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// One line per phase on a terminal; silent with --quiet or when stderr is not a terminal (the
// profiler draws its own progress line within a phase).
void Progress(const RunOptions& options, const std::string& text) {
  if (!options.quiet && kareus::Progress::StderrIsTerminal()) {
    std::fprintf(stderr, "kareus: %s\n", text.c_str());
  }
}

emulator::InstructionKnobs ToEmulatorKnobs(const plan::InstructionOption& option) {
  emulator::InstructionKnobs out;
  out.freq_mhz = option.freq_mhz;
  out.mode = option.mode == plan::ExecutionMode::kSequential ? emulator::ExecutionMode::kSequential
                                                             : emulator::ExecutionMode::kNanobatched;
  for (const auto& p : option.partitions) out.partitions[p.type] = {.sms = p.sms, .slot = p.slot};
  return out;
}

// The clocks a method may pick per instruction: the GPU's profiling grid (published sub-grid),
// or every supported clock with the profiler's full_grid.
std::vector<int> PlanningClocks(const workload::WorkloadModel& model, const RunOptions& options) {
  const auto& clock = model.workload.gpu.clock;
  return options.profile.full_grid ? clock.Supported() : clock.ProfileGrid();
}

// Measures (emulates a measurement of) one whole instruction: the Perseus-style in-situ clock
// sweep. Nanobatched with no per-type knobs means the library default (NCCL with its default
// channels, launched at the start of every partition), as the published runtime runs when no
// schedule is loaded (kareus-official.md §1.6). Deterministic per configuration, so methods that
// share one (Perseus and Kareus's sequential fallback) read the same value.
struct InstructionProfiler {
  const workload::WorkloadModel& model;
  emulator::MeasurementOptions measurement;
  uint64_t seed;
  double gpu_seconds = 0.0;
  int64_t measurements = 0;

  plan::InstructionOption Measure(int stage, Direction direction, int freq_mhz, plan::ExecutionMode mode) {
    plan::InstructionOption option{.freq_mhz = freq_mhz, .mode = mode};
    const auto truth = emulator::SimulateInstruction(model, stage, direction, ToEmulatorKnobs(option));
    const std::string key = model.workload.Signature() + "|instruction|" + std::to_string(stage) + "|" +
                            workload::ToString(direction) + "|" + plan::ToString(mode) + "|" +
                            std::to_string(freq_mhz);
    const auto m = emulator::Measure(truth, measurement, seed, HashString(key.c_str()));
    gpu_seconds += m.gpu_seconds * model.stages[stage].gpus;
    ++measurements;
    option.time_s = m.value.time_s;
    option.energy_j = m.value.energy_j;
    return option;
  }
};

plan::PlanProblem EmptyProblem(Method method, const workload::WorkloadModel& model) {
  plan::PlanProblem problem;
  problem.method = ToString(method);
  problem.workload = model.workload.ToJson();
  problem.num_microbatches = model.workload.microbatches;
  for (const auto& stage : model.stages) problem.stages.push_back({.gpus = stage.gpus, .forward = {}, .backward = {}});
  // Activations (forward) and gradients (backward) cross stages on the inter-node link.
  const auto& net = model.workload.gpu.interconnect;
  double bytes = 0.0;
  for (const auto& stage : model.stages) bytes = std::max(bytes, stage.forward.p2p_send.bytes);
  if (bytes > 0.0) {
    problem.p2p_time_s = bytes / (net.inter_node_bandwidth_gbps * 1e9) + net.inter_node_latency_us * 1e-6;
  }
  return problem;
}

// Options of the methods whose knobs are only the clock and the execution mode.
void ClockSweepOptions(plan::PlanProblem& problem, const workload::WorkloadModel& model,
                       const std::vector<int>& clocks, plan::ExecutionMode mode,
                       InstructionProfiler& profiler) {
  for (int s = 0; s < static_cast<int>(model.stages.size()); ++s) {
    for (int f : clocks) {
      problem.stages[s].forward.push_back(profiler.Measure(s, Direction::kForward, f, mode));
      problem.stages[s].backward.push_back(profiler.Measure(s, Direction::kBackward, f, mode));
    }
  }
}

// Kareus's options: per clock, the composition of the partition types' measured fronts plus
// the fixed work (plan/compose.h), the sequential execution, and the library-default nanobatched
// execution as fallbacks the solver may pick where tuned overlap does not pay.
void KareusOptions(plan::PlanProblem& problem, const workload::WorkloadModel& model,
                   const std::vector<internal::TypeSamples>& samples, InstructionProfiler& profiler,
                   const std::vector<int>& clocks, const RunOptions& options) {
  const double p_static = model.workload.gpu.power.static_w;
  internal::FixedWork fixed;
  if (model.nanobatching) {
    fixed = internal::MeasureFixedWork(model, clocks, profiler.measurement, profiler.seed);
    profiler.gpu_seconds += fixed.gpu_seconds;
    profiler.measurements += fixed.measurements;
  }
  for (int s = 0; s < static_cast<int>(model.stages.size()); ++s) {
    for (Direction d : {Direction::kForward, Direction::kBackward}) {
      std::map<int, std::pair<double, double>> sequential;
      std::vector<plan::InstructionOption> fallbacks;
      for (int f : clocks) {
        const auto seq = profiler.Measure(s, d, f, plan::ExecutionMode::kSequential);
        sequential[f] = {seq.time_s, seq.energy_j};
        if (model.nanobatching) fallbacks.push_back(profiler.Measure(s, d, f, plan::ExecutionMode::kNanobatched));
      }
      std::vector<plan::InstructionOption> all;
      if (model.nanobatching) {
        all = plan::ComposeInstruction(internal::ClockInputs(model, s, d, samples, fixed, clocks, sequential),
                                       {.p_static_w = p_static, .epsilon = options.compose_epsilon})
                  .options;
      } else {
        for (const auto& [f, seq] : sequential) {
          all.push_back({.time_s = seq.first, .energy_j = seq.second, .freq_mhz = f,
                         .mode = plan::ExecutionMode::kSequential});
        }
      }
      all.insert(all.end(), fallbacks.begin(), fallbacks.end());
      auto& target = d == Direction::kForward ? problem.stages[s].forward : problem.stages[s].backward;
      target = internal::FilterOptions(all, p_static);
    }
  }
}

MethodResult RunMethod(Method method, const workload::WorkloadModel& model,
                       const RunOptions& options, const Context& context) {
  MethodResult result;
  result.method = method;
  result.problem = EmptyProblem(method, model);
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
      ClockSweepOptions(result.problem, model, {gpu.clock.default_mhz}, mode, profiler);
      result.phase_wall_s["profile"] = Seconds(start);
      break;
    case Method::kPerseus:
    case Method::kNanobatchingPerseus:
      ClockSweepOptions(result.problem, model, clocks, mode, profiler);
      result.phase_wall_s["profile"] = Seconds(start);
      break;
    case Method::kKareus:
    case Method::kKareusOracle: {
      std::vector<internal::TypeSamples> samples;
      if (model.nanobatching) {
        if (method == Method::kKareus) {
          mobo::ProfileOptions profile = options.profile;
          profile.oracle = false;
          result.profile = mobo::ProfileWorkload(model, profile, context);
          samples = internal::SamplesFromProfile(*result.profile);
          // Cost of every configuration the fronts rest on, reused from the store or not: a
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
      KareusOptions(result.problem, model, samples, profiler, clocks, options);
      result.phase_wall_s["compose"] = Seconds(start);
      break;
    }
  }
  result.profiling_gpu_seconds = profiler.gpu_seconds;
  result.measurements = profiler.measurements;

  // Solve, then run every frontier plan on the emulated cluster.
  const double p_static = gpu.power.static_w;
  start = Clock::now();
  result.solved = plan::SolvePlans(result.problem, {.unit_time_s = options.unit_time_s, .p_static_w = p_static});
  result.phase_wall_s["solve"] = Seconds(start);
  const pipeline::Result& solved = result.solved.solve;
  if (solved.points.empty()) {
    if (solved.summary.status == pipeline::Status::kInvalidInput) {
      // The options' times follow from the workload: name the fields that set them.
      const workload::Workload& w = model.workload;
      throw InputError(
          w.name + ": " + ToString(method) + ": the solver refused the instruction options (" +
          solved.summary.message + "); their times follow from the workload's sequence_length (" +
          std::to_string(w.sequence_length) + "), microbatch_size (" +
          std::to_string(w.microbatch_size) + "), model.layers (" +
          std::to_string(w.model.layers) + ") and parallelism (tp " +
          std::to_string(w.parallelism.tp) + ", cp " + std::to_string(w.parallelism.cp) +
          ", pp " + std::to_string(w.parallelism.pp) +
          "): make the instructions shorter or raise --unit-time");
    }
    throw Error(std::string(ToString(method)) + ": the solver returned no plan (" +
                pipeline::ToString(solved.summary.status) + ": " + solved.summary.message + ")");
  }
  start = Clock::now();
  // Ground truth of an option: the whole instruction simulated with its knobs, noise-free; only
  // the options some frontier plan uses are simulated.
  pipeline::Problem truth;
  truth.schedule = result.problem.schedule;
  truth.num_stages = static_cast<int>(model.stages.size());
  truth.num_microbatches = result.problem.num_microbatches;
  truth.p2p_time_s = result.problem.p2p_time_s;
  for (const auto& stage : result.problem.stages) {
    truth.gpus_per_stage.push_back(stage.gpus);
    truth.forward_options.emplace_back(stage.forward.size());
    truth.backward_options.emplace_back(stage.backward.size());
  }
  std::set<std::tuple<int, bool, int>> simulated;
  for (const auto& point : solved.points) {
    for (size_t node = 0; node < point.choice.size(); ++node) {
      const auto& ins = solved.dag.nodes[node];
      const bool forward = ins.kind == pipeline::InstructionKind::kForward;
      if (!simulated.insert({ins.stage, forward, point.choice[node]}).second) continue;
      const auto& stage = result.problem.stages[ins.stage];
      const auto& option = (forward ? stage.forward : stage.backward)[point.choice[node]];
      const auto sim = emulator::SimulateInstruction(
          model, ins.stage, forward ? Direction::kForward : Direction::kBackward, ToEmulatorKnobs(option));
      (forward ? truth.forward_options : truth.backward_options)[ins.stage][point.choice[node]] =
          {.time_s = sim.time_s, .energy_j = sim.energy_j};
    }
    result.measured.push_back(pipeline::Evaluate(truth, solved.dag, point.choice, p_static));
  }
  result.phase_wall_s["evaluate"] = Seconds(start);
  return result;
}

std::vector<TimeEnergy> Measured(const MethodResult& m, bool sampled_only) {
  std::vector<TimeEnergy> out;
  if (sampled_only) {
    for (size_t i : m.solved.sampled) out.push_back({m.measured[i].time_s, m.measured[i].energy_j});
  } else {
    for (const auto& e : m.measured) out.push_back({e.time_s, e.energy_j});
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
Json Timeline(const RunResult& run, const MethodResult& m, size_t point) {
  const auto& dag = m.solved.solve.dag;
  const auto& choice = m.Choice(point);
  auto option_of = [&](size_t node) -> const plan::InstructionOption& {
    const auto& ins = dag.nodes[node];
    const auto& stage = m.problem.stages[ins.stage];
    return (ins.kind == pipeline::InstructionKind::kForward ? stage.forward : stage.backward)[choice[node]];
  };
  std::vector<double> duration(dag.nodes.size()), finish(dag.nodes.size(), 0.0), start(dag.nodes.size(), 0.0);
  for (size_t node = 0; node < dag.nodes.size(); ++node) {
    const auto& ins = dag.nodes[node];
    const bool forward = ins.kind == pipeline::InstructionKind::kForward;
    duration[node] = emulator::SimulateInstruction(run.model, ins.stage,
                                                   forward ? Direction::kForward : Direction::kBackward,
                                                   ToEmulatorKnobs(option_of(node))).time_s;
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
      instructions.push_back({{"kind", pipeline::ToString(ins.kind)},
                              {"microbatch", ins.microbatch},
                              {"start_s", start[node]},
                              {"end_s", finish[node]},
                              {"freq_mhz", option_of(node).freq_mhz},
                              {"mode", plan::ToString(option_of(node).mode)}});
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
    for (size_t i = 0; i < m.measured.size(); ++i) {
      Json p = PointJson(m.measured[i]);
      p["plan_index"] = static_cast<int>(i);
      p["predicted_time_s"] = m.solved.solve.points[i].cost.time_s;
      p["predicted_energy_j"] = m.solved.solve.points[i].cost.energy_j;
      frontier.push_back(p);
    }
    const auto fastest = m.measured[m.Fastest()];
    const auto lowest = *std::min_element(m.measured.begin(), m.measured.end(), [](const auto& a, const auto& b) {
      return a.energy_j < b.energy_j;
    });
    Json phases = Json::object();
    for (const auto& [name, seconds] : m.phase_wall_s) phases[name] = seconds;
    Json entry{{"method", ToString(m.method)},
               {"label", Label(m.method)},
               {"fastest", PointJson(fastest)},
               {"lowest_energy", PointJson(lowest)},
               {"frontier", frontier},
               {"sampled_plans", m.solved.sampled},
               {"profiling_gpu_hours", m.profiling_gpu_seconds / 3600.0},
               {"measurements", m.measurements},
               {"phase_wall_s", phases},
               {"options_per_instruction",
                {{"forward", m.problem.stages[0].forward.size()},
                 {"backward", m.problem.stages[0].backward.size()}}},
               {"solver",
                {{"status", pipeline::ToString(m.solved.solve.summary.status)},
                 {"message", m.solved.solve.summary.message},
                 {"steps", m.solved.solve.summary.steps}}}};
    if (!m.note.empty()) entry["note"] = m.note;
    methods.push_back(entry);
  }
  // The max-throughput table: each method's fastest plan against Megatron-LM's.
  Json max_throughput = Json::array();
  const MethodResult* megatron = Find(run, Method::kMegatron);
  for (const auto& m : run.methods) {
    const auto& f = m.measured[m.Fastest()];
    Json row{{"method", ToString(m.method)}, {"time_s", f.time_s}, {"energy_j", f.energy_j}};
    if (megatron) {
      const auto& ref = megatron->measured[megatron->Fastest()];
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
              {"timeline", Timeline(run, *main, main->Fastest())},
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

namespace {

// The solve with every point's cost replaced by its run on the emulated cluster, so plans and
// frontier files carry measured iteration costs (instructions keep their predicted costs).
plan::PlanResult MeasuredResult(const MethodResult& m) {
  plan::PlanResult out = m.solved;
  for (size_t i = 0; i < out.solve.points.size(); ++i) out.solve.points[i].cost = m.measured[i];
  return out;
}

}  // namespace

plan::Plan MakePlan(const MethodResult& m, size_t point) {
  return plan::BuildPlan(m.problem, MeasuredResult(m).solve, point);
}

void WriteRunOutputs(const RunResult& run, const std::filesystem::path& out) {
  const MethodResult* main = Find(run, Method::kKareus);
  if (!main) main = &run.methods.back();
  for (const auto& m : run.methods) {
    plan::WriteSolveOutputs(out / "methods" / ToString(m.method), m.problem, MeasuredResult(m));
  }
  plan::WriteSolveOutputs(out, main->problem, MeasuredResult(*main));
  WriteJsonFile(out / "summary.json", run.summary);
  WriteFileAtomic(out / "report.html", report::RenderHtml(run.summary));
}

EvaluationResult EvaluateWorkloads(const std::vector<std::filesystem::path>& workloads,
                                   const RunOptions& options, const Context& context,
                                   const std::filesystem::path& out) {
  // Validate every file before running anything; each workload writes OUT/<name>.
  std::vector<workload::Workload> loaded;
  for (const auto& path : workloads) {
    loaded.push_back(workload::LoadWorkloadFile(path));
    for (std::size_t i = 0; i + 1 < loaded.size(); ++i) {
      if (loaded[i].name == loaded.back().name) {
        ThrowInput(path.string() + ": name", loaded.back().name,
                   "another workload of this evaluation (" + workloads[i].string() +
                       ") has this name; each writes its own folder OUT/<name>");
      }
    }
  }
  std::optional<OutputFolder> folder;  // OUT is replaced as a whole at the end
  if (!out.empty()) {
    folder.emplace(out);
    for (const auto& w : loaded) {
      folder->Keep(options.profile.store.empty() ? out / w.name / "measurements.sqlite"
                                                 : options.profile.store);
    }
  }
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
    if (folder) WriteRunOutputs(run, folder->staging() / w.name);
    result.evaluation["rows"].push_back({{"workload", w.name},
                                         {"max_throughput", run.summary["max_throughput"]},
                                         {"frontier_table", run.summary["frontier_table"]},
                                         {"interpolated", run.summary["interpolated"]},
                                         {"checks", run.summary["checks"]}});
  }
  result.table = report::RenderEvaluationTable(result.evaluation);
  if (folder) {
    WriteJsonFile(folder->staging() / "evaluation.json", result.evaluation);
    WriteFileAtomic(folder->staging() / "evaluation.txt", result.table);
    folder->Commit();
  }
  return result;
}

}  // namespace kareus::methods
