// SPDX-License-Identifier: Apache-2.0
// The one flow every method runs (methods/run.h): measure through the backend, compose,
// solve, evaluate. What a method may choose comes only from its MethodSpec.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>

#include "kareus/common/error.h"
#include "kareus/common/progress.h"
#include "kareus/methods/run.h"
#include "kareus/plan/compose.h"
#include "methods/compose.h"
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
    return OptionError{"compose_epsilon", Describe(compose_epsilon), "must be a finite number >= 0"};
  }
  return std::nullopt;
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

namespace internal {
namespace {

using Clock = std::chrono::steady_clock;
using schedule::Direction;
using schedule::ExecutionMode;

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

measure::InstructionKnobs ToKnobs(const plan::InstructionOption& option) {
  measure::InstructionKnobs out{.freq_mhz = option.freq_mhz, .mode = option.mode, .partitions = {}};
  for (const auto& p : option.partitions) out.partitions[p.type] = {.sms = p.sms, .slot = p.slot};
  return out;
}

plan::PlanProblem EmptyProblem(const MethodSpec& method, const workload::WorkloadModel& model) {
  plan::PlanProblem problem;
  problem.method = method.name;
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

std::vector<plan::InstructionOption>& OptionsOf(plan::PlanProblem& problem, int stage, Direction d) {
  return d == Direction::kForward ? problem.stages[stage].forward : problem.stages[stage].backward;
}

// Whole-instruction measurements of one stage in one backend batch: the clock sweep of a
// Perseus-style method (in situ, published §4), or Kareus's sequential and library-default
// fallbacks. A nanobatched request without per-type knobs runs the library default (NCCL with
// its default channels, launched at the start of every partition), as the published runtime
// does when no schedule is loaded (kareus-official.md §1.6).
struct InstructionSweep {
  std::vector<measure::InstructionRequest> requests;
  std::vector<measure::Sample> samples;

  void Add(int stage, Direction d, int freq_mhz, ExecutionMode mode) {
    requests.push_back({.stage = stage, .direction = d, .knobs = {.freq_mhz = freq_mhz, .mode = mode, .partitions = {}}});
  }
  void Measure(const workload::WorkloadModel& model, measure::Backend& backend) {
    samples = backend.MeasureAll(model, requests);
  }
  plan::InstructionOption Option(std::size_t i) const {
    return {.time_s = samples[i].time_s, .energy_j = samples[i].energy_j,
            .freq_mhz = requests[i].knobs.freq_mhz, .mode = requests[i].knobs.mode, .partitions = {}};
  }
};

class MethodRun {
 public:
  MethodRun(const MethodSpec& method, const workload::WorkloadModel& model, const RunOptions& options,
            measure::Backend& backend, Evaluator& evaluator, const Context& context)
      : method_(method), model_(model), options_(options), backend_(backend),
        evaluator_(evaluator), context_(context) {}

  MethodResult Run() {
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

    auto start = Clock::now();
    std::vector<TypeSamples> samples = MeasurePartitions(backend);
    result_.phase_wall_s["profile"] = Seconds(start);
    if (UsesComposition()) {
      start = Clock::now();
      ComposedOptions(backend, samples);
      result_.phase_wall_s["compose"] = Seconds(start);
    } else {
      start = Clock::now();
      SweptOptions(backend);
      result_.phase_wall_s["profile"] += Seconds(start);
    }

    start = Clock::now();
    result_.solved = plan::SolvePlans(
        result_.problem, {.unit_time_s = options_.unit_time_s, .p_static_w = backend_.StaticPowerW()});
    result_.phase_wall_s["solve"] = Seconds(start);
    const pipeline::Result& solved = result_.solved.solve;
    if (solved.points.empty()) {
      throw Error(method_.name + ": the solver returned no plan (" +
                  pipeline::ToString(solved.summary.status) + ": " + solved.summary.message + ")");
    }
    start = Clock::now();
    Evaluate();
    result_.phase_wall_s["evaluate"] = Seconds(start);
    return std::move(result_);
  }

  // The clocks a method may pick per instruction: the GPU's profiling grid (published
  // sub-grid), or every supported clock with the profiler's full_grid.
  static std::vector<int> PlanningClocks(const workload::WorkloadModel& model, const RunOptions& options) {
    const auto& clock = model.workload.gpu.clock;
    return options.profile.full_grid ? clock.Supported() : clock.ProfileGrid();
  }

 private:
  // The oracle measures through the noise-free twin; everything else through the backend.
  measure::Backend& MeasuringBackend() {
    if (!method_.noise_free) return backend_;
    twin_ = backend_.NoiseFreeTwin();
    if (!twin_) {
      ThrowInput("--methods", method_.name,
                 "needs a backend with noise-free values (the emulator); " + backend_.Description() +
                     " has none");
    }
    return *twin_;
  }

  bool UsesComposition() const { return method_.comm != CommSource::kLibraryDefault; }

  // Partition frontiers: profiled (mobo/) or exhaustive. Cost: every measurement the
  // frontiers rest on, store reuse included, so a resumed run reports the same GPU-hours.
  std::vector<TypeSamples> MeasurePartitions(measure::Backend& backend) {
    if (!nanobatched_ || !UsesComposition()) return {};
    if (method_.comm == CommSource::kProfiled) {
      mobo::ProfileOptions profile = options_.profile;
      profile.oracle = false;
      result_.profile = mobo::ProfileWorkload(model_, profile, backend, context_);
      result_.profiling_gpu_seconds += result_.profile->cost_gpu_seconds;
      for (const auto& p : result_.profile->partitions) {
        result_.measurements += static_cast<int64_t>(p.evaluations.size());
      }
      return SamplesFromProfile(*result_.profile);
    }
    const double before = backend.GpuSeconds();
    const int64_t count = backend.Measurements();
    std::vector<TypeSamples> samples = ExhaustiveSamples(model_, clocks_, backend);
    result_.profiling_gpu_seconds += backend.GpuSeconds() - before;
    result_.measurements += backend.Measurements() - count;
    return samples;
  }

  // Methods whose only knobs are the clock and the execution mode: per clock one measured
  // option per instruction.
  void SweptOptions(measure::Backend& backend) {
    const ExecutionMode mode = nanobatched_ ? ExecutionMode::kNanobatched : ExecutionMode::kSequential;
    const double before = backend.GpuSeconds();
    const int64_t count = backend.Measurements();
    for (int s = 0; s < static_cast<int>(model_.stages.size()); ++s) {
      InstructionSweep sweep;
      for (int f : clocks_) {
        sweep.Add(s, Direction::kForward, f, mode);
        sweep.Add(s, Direction::kBackward, f, mode);
      }
      sweep.Measure(model_, backend);
      for (std::size_t i = 0; i < sweep.requests.size(); ++i) {
        OptionsOf(result_.problem, s, sweep.requests[i].direction).push_back(sweep.Option(i));
      }
    }
    result_.profiling_gpu_seconds += backend.GpuSeconds() - before;
    result_.measurements += backend.Measurements() - count;
  }

  // Options of a method with tuned comm knobs: per clock, the composition of the partition
  // types' fronts plus the fixed work (plan/compose.h), the sequential execution, and the
  // library-default nanobatched execution as fallbacks the solver may pick where tuned overlap
  // does not pay; a method that may also run sequentially keeps every option not dominated on
  // effective energy.
  void ComposedOptions(measure::Backend& backend, const std::vector<TypeSamples>& samples) {
    const double p_static = backend_.StaticPowerW();
    const double before = backend.GpuSeconds();
    const int64_t count = backend.Measurements();
    FixedWork fixed;
    if (nanobatched_) fixed = MeasureFixedWork(model_, clocks_, backend);
    const bool sequential_allowed = method_.execution != Execution::kNanobatched || !nanobatched_;
    for (int s = 0; s < static_cast<int>(model_.stages.size()); ++s) {
      InstructionSweep sweep;
      for (int f : clocks_) {
        for (Direction d : {Direction::kForward, Direction::kBackward}) {
          if (sequential_allowed) sweep.Add(s, d, f, ExecutionMode::kSequential);
          if (nanobatched_) sweep.Add(s, d, f, ExecutionMode::kNanobatched);
        }
      }
      sweep.Measure(model_, backend);
      for (Direction d : {Direction::kForward, Direction::kBackward}) {
        std::map<int, std::pair<double, double>> sequential;
        std::vector<plan::InstructionOption> fallbacks;
        for (std::size_t i = 0; i < sweep.requests.size(); ++i) {
          const auto& r = sweep.requests[i];
          if (r.direction != d) continue;
          if (r.knobs.mode == ExecutionMode::kSequential) {
            sequential[r.knobs.freq_mhz] = {sweep.samples[i].time_s, sweep.samples[i].energy_j};
          } else {
            fallbacks.push_back(sweep.Option(i));
          }
        }
        std::vector<plan::InstructionOption> all;
        if (nanobatched_) {
          all = plan::ComposeInstruction(ClockInputs(model_, s, d, samples, fixed, clocks_, sequential),
                                         {.p_static_w = p_static, .epsilon = options_.compose_epsilon})
                    .options;
        } else {
          for (const auto& [f, seq] : sequential) {
            all.push_back({.time_s = seq.first, .energy_j = seq.second, .freq_mhz = f,
                           .mode = ExecutionMode::kSequential});
          }
        }
        all.insert(all.end(), fallbacks.begin(), fallbacks.end());
        OptionsOf(result_.problem, s, d) = FilterOptions(all, p_static);
      }
    }
    result_.profiling_gpu_seconds += backend.GpuSeconds() - before;
    result_.measurements += backend.Measurements() - count;
  }

  // Every instruction option some frontier plan uses is evaluated once (one batch per stage);
  // the DAG then gives each plan's iteration time and energy. Not evaluated: predictions.
  void Evaluate() {
    const pipeline::Result& solved = result_.solved.solve;
    result_.option_evaluations.assign(model_.stages.size(), {});
    if (!evaluator_.Evaluates()) {
      for (const auto& point : solved.points) result_.evaluated.push_back(point.cost);
      return;
    }
    std::vector<std::set<std::pair<int, int>>> used(model_.stages.size());  // (direction, option)
    for (const auto& point : solved.points) {
      for (std::size_t node = 0; node < point.choice.size(); ++node) {
        const auto& ins = solved.dag.nodes[node];
        used[ins.stage].insert({ins.kind == Direction::kForward ? 0 : 1, point.choice[node]});
      }
    }
    const double before = evaluator_.GpuSeconds();
    pipeline::Problem truth;
    truth.schedule = result_.problem.schedule;
    truth.num_stages = static_cast<int>(model_.stages.size());
    truth.num_microbatches = result_.problem.num_microbatches;
    truth.p2p_time_s = result_.problem.p2p_time_s;
    for (int s = 0; s < truth.num_stages; ++s) {
      const auto& stage = result_.problem.stages[s];
      truth.gpus_per_stage.push_back(stage.gpus);
      truth.forward_options.emplace_back(stage.forward.size());
      truth.backward_options.emplace_back(stage.backward.size());
      std::vector<measure::InstructionRequest> batch;
      for (const auto& [direction, option] : used[s]) {
        const auto& options = direction == 0 ? stage.forward : stage.backward;
        batch.push_back({.stage = s, .direction = direction == 0 ? Direction::kForward : Direction::kBackward,
                         .knobs = ToKnobs(options[option])});
      }
      const std::vector<measure::Sample> samples = evaluator_.EvaluateInstructions(model_, batch);
      std::size_t i = 0;
      for (const auto& [direction, option] : used[s]) {
        const measure::Sample& sample = samples[i++];
        result_.option_evaluations[s][direction][option] = sample;
        (direction == 0 ? truth.forward_options : truth.backward_options)[s][option] =
            {.time_s = sample.time_s, .energy_j = sample.energy_j};
      }
    }
    // A GPU that waits (pipeline bubbles, P2P receives) draws the board's idle power.
    for (const auto& point : solved.points) {
      result_.evaluated.push_back(pipeline::Evaluate(truth, solved.dag, point.choice, backend_.IdlePowerW()));
    }
    EvaluateComposition();
    result_.evaluation_gpu_seconds = evaluator_.GpuSeconds() - before;
  }

  // Composition error: every composed option the method planned on (nanobatched with tuned
  // knobs; the fallbacks are measured instructions) against the same instruction evaluated end
  // to end, one batch per stage.
  void EvaluateComposition() {
    for (int s = 0; s < static_cast<int>(model_.stages.size()); ++s) {
      std::vector<measure::InstructionRequest> batch;
      std::vector<const plan::InstructionOption*> options;
      for (Direction d : {Direction::kForward, Direction::kBackward}) {
        for (const auto& option : OptionsOf(result_.problem, s, d)) {
          if (option.mode != ExecutionMode::kNanobatched || option.partitions.empty()) continue;
          batch.push_back({.stage = s, .direction = d, .knobs = ToKnobs(option)});
          options.push_back(&option);
        }
      }
      if (batch.empty()) continue;
      const std::vector<measure::Sample> samples = evaluator_.EvaluateInstructions(model_, batch);
      for (std::size_t i = 0; i < batch.size(); ++i) {
        result_.composition.push_back({.stage = s,
                                       .forward = batch[i].direction == Direction::kForward,
                                       .freq_mhz = options[i]->freq_mhz,
                                       .composed_time_s = options[i]->time_s,
                                       .composed_energy_j = options[i]->energy_j,
                                       .evaluated_time_s = samples[i].time_s,
                                       .evaluated_energy_j = samples[i].energy_j});
      }
    }
  }

  const MethodSpec& method_;
  const workload::WorkloadModel& model_;
  const RunOptions& options_;
  measure::Backend& backend_;
  Evaluator& evaluator_;
  const Context& context_;
  std::unique_ptr<measure::Backend> twin_;
  bool nanobatched_ = false;
  std::vector<int> clocks_;
  MethodResult result_;
};

}  // namespace

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
  const std::unique_ptr<Evaluator> evaluator = MakeEvaluator(*backend, options.evaluation);
  for (const MethodSpec& m : options.methods) {
    if (m.noise_free && !backend->NoiseFreeTwin()) {
      ThrowInput("--methods", m.name,
                 "needs a backend with noise-free values (the emulator); " + backend->Description() +
                     " has none");
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
  run.summary = internal::BuildSummary(run);
  return run;
}

}  // namespace kareus::methods
