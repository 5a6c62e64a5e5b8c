// SPDX-License-Identifier: Apache-2.0
// The one flow every method runs (methods/run.h): measure through the backend, compose,
// solve, evaluate. What a method may choose comes only from its MethodSpec.
// MethodRun is declared in methods/flow_internal.h, which lists the files of its parts.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include <sys/resource.h>

#include "kareus/common/error.h"
#include "kareus/common/progress.h"
#include "kareus/methods/run.h"
#include "methods/flow_internal.h"
#include "methods/summary_builder.h"

namespace kareus::methods {

std::optional<OptionError> RunOptions::Validate() const {
  if (methods.empty()) return OptionError{"methods", "(none)", "at least one method is required"};
  std::set<std::string> names;
  for (const MethodSpec& m : methods) {
    if (m.name.empty()) return OptionError{"methods", "\"\"", "a method needs a name"};
    if (!names.insert(m.name).second) {
      return OptionError{"methods", m.name, "each method may appear only once"};
    }
  }
  if (auto error = profile.Validate()) return error->Nested("profile");
  if (!(unit_time_s > 0.0) || !std::isfinite(unit_time_s)) {
    return OptionError{"unit_time_s", Describe(unit_time_s), "must be a finite number > 0"};
  }
  if (!(compose_epsilon >= 0.0) || !std::isfinite(compose_epsilon)) {
    return OptionError{"compose_epsilon", Describe(compose_epsilon),
                       "must be a finite number >= 0"};
  }
  if (sweep_anchor_stride < 1) {
    return OptionError{"sweep_anchor_stride", std::to_string(sweep_anchor_stride),
                       "must be an integer >= 1"};
  }
  if (confirm_readings < 0) {
    return OptionError{"confirm_readings", std::to_string(confirm_readings),
                       "must be an integer >= 0"};
  }
  return std::nullopt;
}

const char* ToString(CostKind kind) {
  switch (kind) {
    case CostKind::kPartitionsProfiled:
      return "partitions_profiled";
    case CostKind::kPartitionsExhaustive:
      return "partitions_exhaustive";
    case CostKind::kFixedWork:
      return "fixed_work";
    case CostKind::kInstructions:
      return "instructions";
    case CostKind::kGradientSync:
      break;
  }
  return "gradient_sync";
}

const char* ToString(Phase phase) {
  switch (phase) {
    case Phase::kProfile:
      return "profile";
    case Phase::kCompose:
      return "compose";
    case Phase::kSolve:
      return "solve";
    case Phase::kEvaluate:
      break;
  }
  return "evaluate";
}

std::size_t MethodResult::Fastest() const {
  KAREUS_CHECK(!evaluated.empty()) << method.name << " has no frontier point";
  std::size_t best = 0;
  for (std::size_t i = 1; i < evaluated.size(); ++i) {
    const auto& a = evaluated[i];
    const auto& b = evaluated[best];
    if (a.time_s < b.time_s || (a.time_s == b.time_s && a.energy_j < b.energy_j)) best = i;
  }
  return best;
}

const std::map<int, measure::Sample>* MethodResult::EvaluationsOf(
    const schedule::NodeClass& c) const {
  const std::size_t i = static_cast<std::size_t>(c.index);
  switch (c.kind) {
    case schedule::NodeClassKind::kForward:
    case schedule::NodeClassKind::kBackward:
      if (i >= option_evaluations.size()) return nullptr;
      return &option_evaluations[i][c.kind == schedule::NodeClassKind::kForward ? 0 : 1];
    case schedule::NodeClassKind::kLastBackward:
      return i < last_backward_evaluations.size() ? &last_backward_evaluations[i] : nullptr;
    case schedule::NodeClassKind::kGradientSync:
      break;
  }
  return i < sync_evaluations.size() ? &sync_evaluations[i] : nullptr;
}

namespace internal {
namespace {

using Clock = std::chrono::steady_clock;

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

plan::PlanProblem EmptyProblem(const MethodSpec& method, const workload::WorkloadModel& model) {
  plan::PlanProblem problem;
  problem.method = method.name;
  problem.workload = model.workload.ToJson();
  problem.schedule = model.workload.Schedule();
  problem.num_microbatches = model.workload.microbatches;
  problem.num_chunks = model.num_chunks;
  for (const auto& unit : model.stages)
    problem.stages.push_back({.gpus = unit.gpus, .forward = {}, .backward = {}});
  if (model.gradient_sync.enabled) {
    problem.gradient_sync = model.gradient_sync.overlap ? schedule::GradientSync::kOverlapped
                                                        : schedule::GradientSync::kAtEnd;
    if (model.gradient_sync.overlap)
      problem.last_backward.assign(static_cast<std::size_t>(model.num_stages), {});
    problem.sync_nodes.assign(
        static_cast<std::size_t>(model.num_stages * problem.SyncNodesPerStage()), {});
  }
  // Activations (forward) and gradients (backward) cross stages on the inter-node link.
  const auto& net = model.workload.gpu.interconnect;
  double bytes = 0.0;
  for (const auto& stage : model.stages) bytes = std::max(bytes, stage.forward.p2p_send.bytes);
  if (bytes > 0.0) {
    problem.p2p_time_s =
        bytes / (net.inter_node_bandwidth_gbps * 1e9) + net.inter_node_latency_us * 1e-6;
  }
  return problem;
}

// Units (stage, chunk) that run the same instructions: the same layers and the same work
// outside the layers (the embedding of the first unit, the loss of the last), and the same
// share of the gradient buckets (chunk 0 leaves its last bucket to the stage's tail). Each is
// measured once, at its first unit; rep[u] is that unit's index.
std::vector<int> Representatives(const workload::WorkloadModel& model) {
  std::vector<int> rep(model.stages.size());
  std::map<std::tuple<int, bool, bool, bool>, int> first;
  for (int u = 0; u < static_cast<int>(model.stages.size()); ++u) {
    const auto& unit = model.stages[u];
    const bool embedding = unit.stage == 0 && unit.chunk == 0;
    const bool loss = unit.stage == model.num_stages - 1 && unit.chunk == model.num_chunks - 1;
    rep[u] = first.try_emplace({unit.layers, embedding, loss, unit.chunk == 0}, u).first->second;
  }
  return rep;
}

}  // namespace

// The phases of one method's run: its options measured (and composed), the plans solved on
// them, then evaluated.
MethodResult MethodRun::Run() {
  measure::Backend& backend = Prepare();
  BuildOptions(backend);
  Solve();
  const auto start = Clock::now();
  Evaluate();
  DropDominatedPoints();
  result_.phase_wall_s[Phase::kEvaluate] = Seconds(start);
  return std::move(result_);
}

// What the phases start from: the problem without options, the backend the method measures
// through, whether it nanobatches (a note where it cannot) and the clocks it plans with.
measure::Backend& MethodRun::Prepare() {
  result_.method = method_;
  result_.problem = EmptyProblem(method_, model_);
  measure::Backend& backend = MeasuringBackend();
  const bool wants_overlap = method_.execution != Execution::kSequential;
  nanobatched_ = wants_overlap && model_.nanobatching;
  if (wants_overlap && !model_.nanobatching) {
    result_.note = model_.workload.CanNanobatch()
                       ? "no collective to overlap (tp = cp = 1): planned with sequential execution"
                       : "microbatch_size < 2 cannot be split into nanobatches: planned with "
                         "sequential execution";
  }
  clocks_ = method_.clock == ClockControl::kDefault
                ? std::vector<int>{model_.workload.gpu.clock.default_mhz}
                : PlanningClocks(model_, options_);
  return backend;
}

// The profile and compose phases: the partition frontiers, every instruction's options
// (composed, or swept), then the gradient sync's.
void MethodRun::BuildOptions(measure::Backend& backend) {
  auto start = Clock::now();
  std::vector<TypeSamples> samples = MeasurePartitions(backend);
  result_.phase_wall_s[Phase::kProfile] = Seconds(start);
  reps_ = Representatives(model_);
  if (UsesComposition()) {
    start = Clock::now();
    ComposedOptions(backend, samples);
    result_.phase_wall_s[Phase::kCompose] = Seconds(start);
  } else {
    start = Clock::now();
    SweptOptions(backend);
    result_.phase_wall_s[Phase::kProfile] += Seconds(start);
  }
  if (model_.gradient_sync.enabled) {
    start = Clock::now();
    GradientSyncOptions(backend);
    result_.phase_wall_s[Phase::kProfile] += Seconds(start);
  }
}

// The solve phase: the solver's frontier on the options. No plan is an error; refused options
// are an input error naming the workload's fields that set their times.
void MethodRun::Solve() {
  const auto start = Clock::now();
  result_.solved = plan::SolvePlans(result_.problem, {.unit_time_s = options_.unit_time_s,
                                                      .p_static_w = backend_.StaticPowerW()});
  result_.phase_wall_s[Phase::kSolve] = Seconds(start);
  const pipeline::Result& solved = result_.solved.solve;
  if (!solved.points.empty()) return;
  if (solved.summary.status == pipeline::Status::kInvalidInput) {
    // The options' times follow from the workload: name the fields that set them.
    const workload::Workload& w = model_.workload;
    throw InputError(
        w.name + ": " + method_.name + ": the solver refused the instruction options (" +
        solved.summary.message + "); their times follow from the workload's sequence_length (" +
        std::to_string(w.sequence_length) + "), microbatch_size (" +
        std::to_string(w.microbatch_size) + "), model.layers (" + std::to_string(w.model.layers) +
        ") and parallelism (tp " + std::to_string(w.parallelism.tp) + ", cp " +
        std::to_string(w.parallelism.cp) + ", pp " + std::to_string(w.parallelism.pp) +
        "): make the instructions shorter or raise --unit-time");
  }
  throw Error(method_.name + ": the solver returned no plan (" +
              pipeline::ToString(solved.summary.status) + ": " + solved.summary.message + ")");
}

// The clocks a method may pick per instruction: the GPU's profiling grid (published
// sub-grid), or every supported clock with the profiler's full_grid.
std::vector<int> MethodRun::PlanningClocks(const workload::WorkloadModel& model,
                                           const RunOptions& options) {
  const auto& clock = model.workload.gpu.clock;
  return options.profile.full_grid ? clock.Supported() : clock.ProfileGrid();
}

// The oracle measures through the noise-free twin; everything else through the backend.
measure::Backend& MethodRun::MeasuringBackend() {
  if (!method_.noise_free) return backend_;
  twin_ = backend_.NoiseFreeTwin();
  if (!twin_) {
    ThrowInput("--methods", method_.name,
               "needs a backend with noise-free values (the emulator); " + backend_.Description() +
                   " has none");
  }
  return *twin_;
}

void MethodRun::Charge(CostKind kind, double gpu_seconds, int64_t measurements) {
  result_.profiling_gpu_seconds += gpu_seconds;
  result_.measurements += measurements;
  MethodResult::Cost& cost = result_.profiling_by_kind[kind];
  cost.gpu_seconds += gpu_seconds;
  cost.measurements += measurements;
}

std::vector<int> PlanningClocks(const workload::WorkloadModel& model, const RunOptions& options) {
  return MethodRun::PlanningClocks(model, options);
}

}  // namespace internal

RunResult RunWorkload(const workload::Workload& workload, const RunOptions& options,
                      const measure::BackendFactory& make_backend, const Context& context) {
  ThrowIfInvalid(options.Validate());
  KAREUS_CHECK(make_backend) << "RunWorkload needs a backend factory";
  RunResult run;
  run.model = workload::BuildWorkloadModel(workload);
  run.options = options;
  run.seed = context.seed;
  const std::unique_ptr<measure::Backend> backend = make_backend(run.model, context.seed);
  KAREUS_CHECK(backend != nullptr) << "the backend factory made no backend";
  // The clocks a plan may use are those the backend measures: a real GPU without clock control
  // offers only the clock as found (the emulator: the preset's grid, unchanged).
  run.model.workload.gpu.clock = backend->Gpu().clock;
  const std::unique_ptr<Evaluator> evaluator = MakeEvaluator(*backend, options.evaluation);
  for (const MethodSpec& m : options.methods) {
    if (m.noise_free && !backend->NoiseFreeTwin()) {
      ThrowInput("--methods", m.name,
                 "needs a backend with noise-free values (the emulator); " +
                     backend->Description() + " has none");
    }
  }
  run.backend = backend->Description();
  run.evaluator = evaluator->Description();
  run.evaluated = evaluator->Evaluates();
  run.static_power_w = backend->StaticPowerW();
  run.idle_power_w = backend->IdlePowerW();
  for (const MethodSpec& method : options.methods) {
    internal::Progress(options, "planning " + method.label);
    run.methods.push_back(
        internal::MethodRun(method, run.model, options, *backend, *evaluator, context).Run());
  }
  // ru_maxrss is in KiB on Linux.
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) == 0)
    run.peak_rss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
  run.summary = internal::BuildSummary(run);
  return run;
}

}  // namespace kareus::methods
