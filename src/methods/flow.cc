// SPDX-License-Identifier: Apache-2.0
// The one flow every method runs (methods/run.h): measure through the backend, compose,
// solve, evaluate. What a method may choose comes only from its MethodSpec.
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
#include "kareus/pareto/pareto.h"
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
    return OptionError{"compose_epsilon", Describe(compose_epsilon),
                       "must be a finite number >= 0"};
  }
  if (sweep_anchor_stride < 1) {
    return OptionError{"sweep_anchor_stride", std::to_string(sweep_anchor_stride),
                       "must be an integer >= 1"};
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

std::vector<plan::InstructionOption>& OptionsOf(plan::PlanProblem& problem, int unit, Direction d) {
  return d == Direction::kForward ? problem.stages[unit].forward : problem.stages[unit].backward;
}

// Whole-instruction measurements of one unit in one backend batch: the clock sweep of a
// Perseus-style method (in situ, published §4), or Kareus's sequential and library-default
// fallbacks. A nanobatched request without per-type knobs runs the library default (NCCL with
// its default channels, launched at the start of every partition), as the published runtime
// does when no schedule is loaded (kareus-official.md §1.6).
struct InstructionSweep {
  std::vector<measure::InstructionRequest> requests;
  std::vector<measure::Sample> samples;

  void Add(const workload::StageModel& unit, Direction d, int freq_mhz, ExecutionMode mode) {
    requests.push_back({.stage = unit.stage,
                        .direction = d,
                        .knobs = {.freq_mhz = freq_mhz, .mode = mode, .partitions = {}},
                        .chunk = unit.chunk});
  }
  // Measures the requests added since the last call (all of them the first time).
  void Measure(const workload::WorkloadModel& model, measure::Backend& backend) {
    const std::vector<measure::InstructionRequest> added(
        requests.begin() + static_cast<std::ptrdiff_t>(samples.size()), requests.end());
    const std::vector<measure::Sample> measured = backend.MeasureAll(model, added);
    samples.insert(samples.end(), measured.begin(), measured.end());
  }
  plan::InstructionOption Option(std::size_t i) const {
    return {.time_s = samples[i].time_s,
            .energy_j = samples[i].energy_j,
            .freq_mhz = requests[i].knobs.freq_mhz,
            .mode = requests[i].knobs.mode,
            .partitions = {}};
  }
};

class MethodRun {
 public:
  MethodRun(const MethodSpec& method, const workload::WorkloadModel& model,
            const RunOptions& options, measure::Backend& backend, Evaluator& evaluator,
            const Context& context)
      : method_(method),
        model_(model),
        options_(options),
        backend_(backend),
        evaluator_(evaluator),
        context_(context) {}

  MethodResult Run() {
    result_.method = method_;
    result_.problem = EmptyProblem(method_, model_);
    measure::Backend& backend = MeasuringBackend();
    const bool wants_overlap = method_.execution != Execution::kSequential;
    nanobatched_ = wants_overlap && model_.nanobatching;
    if (wants_overlap && !model_.nanobatching) {
      result_.note =
          model_.workload.CanNanobatch()
              ? "no collective to overlap (tp = cp = 1): planned with sequential execution"
              : "microbatch_size < 2 cannot be split into nanobatches: planned with "
                "sequential execution";
    }
    clocks_ = method_.clock == ClockControl::kDefault
                  ? std::vector<int>{model_.workload.gpu.clock.default_mhz}
                  : PlanningClocks(model_, options_);

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

    start = Clock::now();
    result_.solved = plan::SolvePlans(result_.problem, {.unit_time_s = options_.unit_time_s,
                                                        .p_static_w = backend_.StaticPowerW()});
    result_.phase_wall_s[Phase::kSolve] = Seconds(start);
    const pipeline::Result& solved = result_.solved.solve;
    if (solved.points.empty()) {
      if (solved.summary.status == pipeline::Status::kInvalidInput) {
        // The options' times follow from the workload: name the fields that set them.
        const workload::Workload& w = model_.workload;
        throw InputError(
            w.name + ": " + method_.name + ": the solver refused the instruction options (" +
            solved.summary.message + "); their times follow from the workload's sequence_length (" +
            std::to_string(w.sequence_length) + "), microbatch_size (" +
            std::to_string(w.microbatch_size) + "), model.layers (" +
            std::to_string(w.model.layers) + ") and parallelism (tp " +
            std::to_string(w.parallelism.tp) + ", cp " + std::to_string(w.parallelism.cp) +
            ", pp " + std::to_string(w.parallelism.pp) +
            "): make the instructions shorter or raise --unit-time");
      }
      throw Error(method_.name + ": the solver returned no plan (" +
                  pipeline::ToString(solved.summary.status) + ": " + solved.summary.message + ")");
    }
    start = Clock::now();
    Evaluate();
    DropDominatedPoints();
    result_.phase_wall_s[Phase::kEvaluate] = Seconds(start);
    return std::move(result_);
  }

  // The clocks a method may pick per instruction: the GPU's profiling grid (published
  // sub-grid), or every supported clock with the profiler's full_grid.
  static std::vector<int> PlanningClocks(const workload::WorkloadModel& model,
                                         const RunOptions& options) {
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
                 "needs a backend with noise-free values (the emulator); " +
                     backend_.Description() + " has none");
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
      result_.profile = options_.profiler
                            ? options_.profiler(model_, profile, backend, context_)
                            : mobo::ProfileWorkload(model_, profile, backend, context_);
      for (const auto& p : result_.profile->partitions) {
        Charge(p.tunable ? CostKind::kPartitionsProfiled : CostKind::kPartitionsExhaustive,
               p.cost_gpu_seconds, static_cast<int64_t>(p.evaluations.size()));
      }
      return SamplesFromProfile(*result_.profile);
    }
    const Meter meter(backend);
    std::vector<TypeSamples> samples = ExhaustiveSamples(model_, clocks_, backend);
    meter.ChargeTo(*this, CostKind::kPartitionsExhaustive);
    return samples;
  }

  // Methods whose only knobs are the clock and the execution mode: per clock one measured
  // option per instruction.
  void SweptOptions(measure::Backend& backend) {
    const ExecutionMode mode =
        nanobatched_ ? ExecutionMode::kNanobatched : ExecutionMode::kSequential;
    const Meter meter(backend);
    for (int u = 0; u < static_cast<int>(model_.stages.size()); ++u) {
      if (reps_[u] != u) continue;
      InstructionSweep sweep;
      for (int f : clocks_) {
        sweep.Add(model_.stages[u], Direction::kForward, f, mode);
        sweep.Add(model_.stages[u], Direction::kBackward, f, mode);
      }
      sweep.Measure(model_, backend);
      for (std::size_t i = 0; i < sweep.requests.size(); ++i) {
        OptionsOf(result_.problem, u, sweep.requests[i].direction).push_back(sweep.Option(i));
      }
    }
    CopyToIdenticalUnits();
    meter.ChargeTo(*this, CostKind::kInstructions);
  }

  // Options of a method with tuned comm knobs: per clock, the composition of the partition
  // types' fronts plus the fixed work (plan/compose.h), the sequential execution, and the
  // library-default nanobatched execution as fallbacks the solver may pick where tuned overlap
  // does not pay; a method that may also run sequentially keeps every option not dominated on
  // effective energy.
  void ComposedOptions(measure::Backend& backend, const std::vector<TypeSamples>& samples) {
    const double p_static = backend_.StaticPowerW();
    std::vector<int> units;
    for (int u = 0; u < static_cast<int>(model_.stages.size()); ++u) {
      if (reps_[u] == u) units.push_back(u);
    }
    FixedWork fixed;
    if (nanobatched_) {
      const Meter meter(backend);
      fixed = MeasureFixedWork(model_, units, clocks_, backend);
      meter.ChargeTo(*this, CostKind::kFixedWork);
    }
    const Meter meter(backend);
    const bool sequential_allowed = method_.execution != Execution::kNanobatched || !nanobatched_;
    const SweepScreen screen = Screen();
    for (int u : units) {
      InstructionSweep sweep;
      auto add = [&](int f, Direction d, ExecutionMode mode) {
        if (mode == ExecutionMode::kSequential ? sequential_allowed : nanobatched_) {
          sweep.Add(model_.stages[u], d, f, mode);
        }
      };
      for (int f : clocks_) {
        if (!screen.IsAnchor(f)) continue;
        for (Direction d : {Direction::kForward, Direction::kBackward}) {
          add(f, d, ExecutionMode::kSequential);
          add(f, d, ExecutionMode::kNanobatched);
        }
      }
      sweep.Measure(model_, backend);
      if (screen.stride > 1) {
        for (const auto& [f, d, mode] : FallbacksBetweenAnchors(u, sweep, screen, samples, fixed))
          add(f, d, mode);
        sweep.Measure(model_, backend);
      }
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
          all = plan::ComposeInstruction(
                    ClockInputs(model_, u, d, samples, fixed, clocks_, sequential),
                    {.p_static_w = p_static, .epsilon = options_.compose_epsilon})
                    .options;
        } else {
          for (const auto& [f, seq] : sequential) {
            all.push_back({.time_s = seq.first,
                           .energy_j = seq.second,
                           .freq_mhz = f,
                           .mode = ExecutionMode::kSequential});
          }
        }
        all.insert(all.end(), fallbacks.begin(), fallbacks.end());
        OptionsOf(result_.problem, u, d) = FilterOptions(all, p_static);
      }
    }
    CopyToIdenticalUnits();
    meter.ChargeTo(*this, CostKind::kInstructions);
  }

  // The sweep screen of this method: Kareus's (profiled comm knobs) with the run's stride;
  // every clock in full for the others.
  SweepScreen Screen() const {
    return {.clocks = clocks_,
            .stride = method_.comm == CommSource::kProfiled ? options_.sweep_anchor_stride : 1};
  }

  // The whole-instruction fallbacks to measure between anchors, after the anchors' `measured`:
  // at a clock where the partitions compose, each (direction, mode) that lay near the front of
  // the composed options of every clock at one of the two anchors around it; at a clock where
  // they do not compose, every fallback.
  std::vector<std::tuple<int, Direction, ExecutionMode>> FallbacksBetweenAnchors(
      int u, const InstructionSweep& measured, const SweepScreen& screen,
      const std::vector<TypeSamples>& samples, const FixedWork& fixed) {
    const double p_static = backend_.StaticPowerW();
    std::vector<std::tuple<int, Direction, ExecutionMode>> out;
    for (Direction d : {Direction::kForward, Direction::kBackward}) {
      // The composed front over every clock, and the clocks whose partitions compose.
      std::vector<std::pair<double, double>> composed;
      std::set<int> composes;
      if (nanobatched_) {
        std::vector<plan::ClockInput> inputs;
        for (plan::ClockInput& input : ClockInputs(model_, u, d, samples, fixed, clocks_, {})) {
          if (input.partitions.empty()) continue;
          composes.insert(input.freq_mhz);
          inputs.push_back(std::move(input));
        }
        if (!inputs.empty()) {
          for (const auto& o :
               plan::ComposeInstruction(
                   inputs, {.p_static_w = p_static, .epsilon = options_.compose_epsilon})
                   .options) {
            composed.emplace_back(o.time_s, o.energy_j - p_static * o.time_s);
          }
        }
      }
      // (mode, anchor clock) -> near the composed front
      std::map<std::pair<ExecutionMode, int>, bool> near;
      for (std::size_t i = 0; i < measured.requests.size(); ++i) {
        const auto& r = measured.requests[i];
        if (r.direction != d) continue;
        const auto& sample = measured.samples[i];
        near[{r.knobs.mode, r.knobs.freq_mhz}] = NearFront(
            sample.time_s, sample.energy_j - p_static * sample.time_s, composed, kScreenMargin);
      }
      for (int f : clocks_) {
        if (screen.IsAnchor(f)) continue;
        const auto [before, after] = screen.Neighbours(f);
        for (ExecutionMode mode : {ExecutionMode::kSequential, ExecutionMode::kNanobatched}) {
          const auto a = near.find({mode, before});
          const auto b = near.find({mode, after});
          if (a == near.end() && b == near.end()) continue;  // a mode this method does not run
          const bool keep = !composes.contains(f) || (a != near.end() && a->second) ||
                            (b != near.end() && b->second);
          if (keep) out.emplace_back(f, d, mode);
        }
      }
    }
    return out;
  }

  // The data-parallel gradient sync (workload::GradientSyncModel, schedule::GradientSync): per
  // stage, with overlap, the options of its last instruction, which reduces the buckets it
  // completes either during it (sequential execution, the reduction kernel beside the compute)
  // or right after it (any backward option of the unit at that clock, then those buckets
  // alone); and the options of its sync nodes: the tail at every clock the method plans with,
  // and a chunk's buckets beside later compute at the method's top clock (they run under the
  // clocks of the instructions they overlap, so a clock of their own would be fictional).
  // Methods that keep library defaults give the reduction NCCL's default SMs; the others
  // choose among GradientSyncModel::sm_choices. Identical stages are measured once.
  void GradientSyncOptions(measure::Backend& backend) {
    const double p_static = backend_.StaticPowerW();
    const Meter meter(backend);
    const std::vector<int> sm_choices =
        method_.comm == CommSource::kLibraryDefault
            ? std::vector<int>{model_.workload.gpu.interconnect.library_default_sms}
            : model_.gradient_sync.sm_choices;
    const int top_clock = *std::max_element(clocks_.begin(), clocks_.end());
    const SweepScreen screen = Screen();
    const bool overlapped = result_.problem.gradient_sync == schedule::GradientSync::kOverlapped;
    const int per_stage = result_.problem.SyncNodesPerStage();
    auto sync_option = [](const measure::Sample& sample, int freq_mhz, int sms, bool overlap) {
      return plan::InstructionOption{
          .time_s = sample.time_s,
          .energy_j = sample.energy_j,
          .freq_mhz = freq_mhz,
          .mode = ExecutionMode::kSequential,
          .partitions = {},
          .gradient_sync = plan::InstructionGradientSync{.sms = sms, .overlapped = overlap}};
    };
    std::map<std::vector<int>, int> measured;  // distinct stages: their units' representatives
    for (int s = 0; s < model_.num_stages; ++s) {
      std::vector<int> key;
      for (int c = 0; c < model_.num_chunks; ++c) key.push_back(reps_[s * model_.num_chunks + c]);
      if (const auto it = measured.find(key); it != measured.end()) {
        if (overlapped)
          result_.problem.last_backward[s] = result_.problem.last_backward[it->second];
        for (int c = 0; c < per_stage; ++c) {
          result_.problem.sync_nodes[s * per_stage + c] =
              result_.problem.sync_nodes[it->second * per_stage + c];
        }
        continue;
      }
      measured[key] = s;
      std::vector<measure::GradientSyncRequest> batch;
      const bool launches = overlapped && !workload::LastBackwardBuckets(model_, s).empty();
      std::vector<measure::GradientSyncWork> works;
      if (launches)
        works = {measure::GradientSyncWork::kOverlapped, measure::GradientSyncWork::kLastBuckets};
      works.push_back(measure::GradientSyncWork::kSyncNode);
      for (int f : clocks_) {
        if (!screen.IsAnchor(f)) continue;
        for (int sms : sm_choices) {
          for (measure::GradientSyncWork work : works) {
            batch.push_back({.stage = s, .chunk = 0, .work = work, .freq_mhz = f, .sms = sms});
          }
        }
      }
      for (int c = 1; c < per_stage; ++c) {
        for (int sms : sm_choices) {
          batch.push_back({.stage = s,
                           .chunk = c,
                           .work = measure::GradientSyncWork::kSyncNode,
                           .freq_mhz = top_clock,
                           .sms = sms});
        }
      }
      std::vector<measure::Sample> samples = backend.MeasureAll(model_, batch);
      const auto& backward =
          result_.problem.stages[static_cast<std::size_t>(s * model_.num_chunks)].backward;
      if (screen.stride > 1) {
        // Between anchors: the SM counts whose anchor readings lay near the front at one of the
        // two anchors around. The solver chooses a stage's last backward among every clock's
        // options, overlapped or followed by its buckets (a backward option of that clock plus
        // the buckets' reading), and its sync nodes among every clock's: the fronts are those
        // option sets over the anchors.
        auto effective = [&](double time_s, double energy_j) {
          return std::pair<double, double>{time_s, energy_j - p_static * time_s};
        };
        // Per anchor reading (chunk 0): the options it makes.
        std::vector<std::vector<std::pair<double, double>>> made(batch.size());
        std::vector<std::pair<double, double>> last_front, node_front;
        for (std::size_t i = 0; i < batch.size(); ++i) {
          const auto& r = batch[i];
          if (r.chunk != 0) continue;
          if (r.work == measure::GradientSyncWork::kLastBuckets) {
            for (const plan::InstructionOption& o : backward) {
              if (o.freq_mhz == r.freq_mhz) {
                made[i].push_back(
                    effective(o.time_s + samples[i].time_s, o.energy_j + samples[i].energy_j));
              }
            }
          } else {
            made[i].push_back(effective(samples[i].time_s, samples[i].energy_j));
          }
          auto& front = r.work == measure::GradientSyncWork::kSyncNode ? node_front : last_front;
          front.insert(front.end(), made[i].begin(), made[i].end());
        }
        std::set<std::tuple<measure::GradientSyncWork, int, int>> near;  // (work, anchor, sms)
        for (std::size_t i = 0; i < batch.size(); ++i) {
          const auto& r = batch[i];
          const auto& front =
              r.work == measure::GradientSyncWork::kSyncNode ? node_front : last_front;
          for (const auto& [t, e] : made[i]) {
            if (NearFront(t, e, front, kScreenMargin)) {
              near.insert({r.work, r.freq_mhz, r.sms});
              break;
            }
          }
        }
        std::vector<measure::GradientSyncRequest> rest;
        for (int f : clocks_) {
          if (screen.IsAnchor(f)) continue;
          const auto [before, after] = screen.Neighbours(f);
          for (int sms : sm_choices) {
            for (measure::GradientSyncWork work : works) {
              if (near.contains({work, before, sms}) || near.contains({work, after, sms})) {
                rest.push_back({.stage = s, .chunk = 0, .work = work, .freq_mhz = f, .sms = sms});
              }
            }
          }
        }
        const std::vector<measure::Sample> more = backend.MeasureAll(model_, rest);
        batch.insert(batch.end(), rest.begin(), rest.end());
        samples.insert(samples.end(), more.begin(), more.end());
      }
      std::vector<plan::InstructionOption> last;
      std::vector<std::vector<plan::InstructionOption>> nodes(static_cast<std::size_t>(per_stage));
      for (std::size_t i = 0; i < batch.size(); ++i) {
        const auto& r = batch[i];
        switch (r.work) {
          case measure::GradientSyncWork::kOverlapped:
            last.push_back(sync_option(samples[i], r.freq_mhz, r.sms, true));
            break;
          case measure::GradientSyncWork::kLastBuckets:
            for (const plan::InstructionOption& o : backward) {
              if (o.freq_mhz != r.freq_mhz) continue;
              plan::InstructionOption after = o;
              after.time_s += samples[i].time_s;
              after.energy_j += samples[i].energy_j;
              after.gradient_sync =
                  plan::InstructionGradientSync{.sms = r.sms, .overlapped = false};
              last.push_back(std::move(after));
            }
            break;
          case measure::GradientSyncWork::kSyncNode:
            nodes[static_cast<std::size_t>(r.chunk)].push_back(
                sync_option(samples[i], r.freq_mhz, r.sms, r.chunk > 0));
            break;
        }
      }
      // Nothing to reduce with the last backward: it runs as any backward.
      if (overlapped)
        result_.problem.last_backward[s] = launches ? FilterOptions(last, p_static) : backward;
      for (int c = 0; c < per_stage; ++c) {
        result_.problem.sync_nodes[s * per_stage + c] =
            FilterOptions(nodes[static_cast<std::size_t>(c)], p_static);
      }
    }
    meter.ChargeTo(*this, CostKind::kGradientSync);
  }

  // What a backend charged between construction and ChargeTo.
  class Meter {
   public:
    explicit Meter(const measure::Backend& backend)
        : backend_(backend),
          gpu_seconds_(backend.GpuSeconds()),
          measurements_(backend.Measurements()) {}
    void ChargeTo(MethodRun& run, CostKind kind) const {
      run.Charge(kind, backend_.GpuSeconds() - gpu_seconds_,
                 backend_.Measurements() - measurements_);
    }

   private:
    const measure::Backend& backend_;
    double gpu_seconds_;
    int64_t measurements_;
  };

  void Charge(CostKind kind, double gpu_seconds, int64_t measurements) {
    result_.profiling_gpu_seconds += gpu_seconds;
    result_.measurements += measurements;
    MethodResult::Cost& cost = result_.profiling_by_kind[kind];
    cost.gpu_seconds += gpu_seconds;
    cost.measurements += measurements;
  }

  void CopyToIdenticalUnits() {
    for (std::size_t u = 0; u < reps_.size(); ++u) {
      if (reps_[u] == static_cast<int>(u)) continue;
      const int gpus = result_.problem.stages[u].gpus;
      result_.problem.stages[u] = result_.problem.stages[reps_[u]];
      result_.problem.stages[u].gpus = gpus;
    }
  }

  // Every option some frontier plan uses is evaluated once (per distinct unit or stage, one
  // batch per kind); the DAG then gives each plan's iteration time and energy. A last backward
  // that reduces its buckets after it is the backward's run plus the buckets' run. Not
  // evaluated: predictions.
  void Evaluate() {
    const pipeline::Result& solved = result_.solved.solve;
    const plan::PlanProblem& problem = result_.problem;
    const std::size_t units = model_.stages.size();
    const int stages = model_.num_stages;
    const int per_stage = problem.SyncNodesPerStage();
    result_.option_evaluations.assign(units, {});
    result_.last_backward_evaluations.assign(problem.last_backward.size(), {});
    result_.sync_evaluations.assign(problem.sync_nodes.size(), {});
    if (!evaluator_.Evaluates()) {
      for (const auto& point : solved.points) result_.evaluated.push_back(point.cost);
      return;
    }
    const schedule::Dag& dag = solved.dag;
    // Stages with the same units are evaluated once: stage_rep[s].
    std::vector<int> stage_rep(static_cast<std::size_t>(stages));
    {
      std::map<std::vector<int>, int> first;
      for (int s = 0; s < stages; ++s) {
        std::vector<int> key;
        for (int c = 0; c < model_.num_chunks; ++c) key.push_back(reps_[s * model_.num_chunks + c]);
        stage_rep[s] = first.try_emplace(key, s).first->second;
      }
    }
    std::vector<std::array<std::set<int>, 2>> used(units);
    std::vector<std::set<int>> used_last(problem.last_backward.size());
    std::vector<std::set<int>> used_sync(problem.sync_nodes.size());
    const schedule::NodeClasses classes = problem.Classes();
    for (const auto& point : solved.points) {
      for (std::size_t node = 0; node < point.choice.size(); ++node) {
        const schedule::NodeClass c = classes.Get(classes.Of(dag, static_cast<int>(node)));
        const int option = point.choice[node];
        switch (c.kind) {
          case schedule::NodeClassKind::kForward:
          case schedule::NodeClassKind::kBackward:
            used[reps_[c.index]][c.kind == schedule::NodeClassKind::kForward ? 0 : 1].insert(
                option);
            break;
          case schedule::NodeClassKind::kLastBackward:
            used_last[stage_rep[c.stage]].insert(option);
            break;
          case schedule::NodeClassKind::kGradientSync:
            used_sync[stage_rep[c.stage] * per_stage + c.chunk].insert(option);
            break;
        }
      }
    }
    const double before = evaluator_.GpuSeconds();
    for (std::size_t u = 0; u < units; ++u) {
      if (reps_[u] != static_cast<int>(u)) continue;
      const auto& unit = model_.stages[u];
      std::vector<measure::InstructionRequest> batch;
      for (int kind = 0; kind < 2; ++kind) {
        const auto& list = kind == 0 ? problem.stages[u].forward : problem.stages[u].backward;
        for (int option : used[u][kind]) {
          batch.push_back({.stage = unit.stage,
                           .direction = kind == 0 ? Direction::kForward : Direction::kBackward,
                           .knobs = ToKnobs(list[static_cast<std::size_t>(option)]),
                           .chunk = unit.chunk});
        }
      }
      const std::vector<measure::Sample> samples = evaluator_.EvaluateInstructions(model_, batch);
      std::size_t i = 0;
      for (int kind = 0; kind < 2; ++kind) {
        for (int option : used[u][kind]) result_.option_evaluations[u][kind][option] = samples[i++];
      }
    }
    for (std::size_t u = 0; u < units; ++u)
      result_.option_evaluations[u] = result_.option_evaluations[reps_[u]];
    for (int s = 0; s < stages; ++s) {
      if (stage_rep[s] != s) continue;
      std::vector<measure::InstructionRequest> instructions;
      std::vector<measure::GradientSyncRequest> syncs;
      // (last backward option, instruction index, sync index)
      std::vector<std::tuple<int, int, int>> lasts;
      for (int option : s < static_cast<int>(used_last.size()) ? used_last[s] : std::set<int>{}) {
        const plan::InstructionOption& o =
            problem.last_backward[s][static_cast<std::size_t>(option)];
        int instruction = -1, sync = -1;
        const bool overlap = o.gradient_sync && o.gradient_sync->overlapped;
        if (!overlap) {
          instruction = static_cast<int>(instructions.size());
          instructions.push_back(
              {.stage = s, .direction = Direction::kBackward, .knobs = ToKnobs(o), .chunk = 0});
        }
        if (o.gradient_sync) {
          sync = static_cast<int>(syncs.size());
          syncs.push_back({.stage = s,
                           .work = overlap ? measure::GradientSyncWork::kOverlapped
                                           : measure::GradientSyncWork::kLastBuckets,
                           .freq_mhz = o.freq_mhz,
                           .sms = o.gradient_sync->sms});
        }
        lasts.push_back({option, instruction, sync});
      }
      std::vector<std::pair<int, int>> nodes;  // (sync node list index, option)
      for (int c = 0; c < per_stage; ++c) {
        for (int option : used_sync[s * per_stage + c]) {
          const plan::InstructionOption& o =
              problem.sync_nodes[s * per_stage + c][static_cast<std::size_t>(option)];
          syncs.push_back({.stage = s,
                           .chunk = c,
                           .work = measure::GradientSyncWork::kSyncNode,
                           .freq_mhz = o.freq_mhz,
                           .sms = o.gradient_sync ? o.gradient_sync->sms : 1});
          nodes.push_back({s * per_stage + c, option});
        }
      }
      const std::vector<measure::Sample> ran =
          evaluator_.EvaluateInstructions(model_, instructions);
      const std::vector<measure::Sample> synced =
          syncs.empty() ? std::vector<measure::Sample>{}
                        : evaluator_.EvaluateGradientSync(model_, syncs);
      for (const auto& [option, instruction, sync] : lasts) {
        measure::Sample sample = instruction >= 0 ? ran[instruction] : synced[sync];
        if (instruction >= 0 && sync >= 0) {
          sample.time_s += synced[sync].time_s;
          sample.energy_j += synced[sync].energy_j;
          sample.static_energy_j += synced[sync].static_energy_j;
          sample.dynamic_energy_j += synced[sync].dynamic_energy_j;
        }
        result_.last_backward_evaluations[s][option] = sample;
      }
      const std::size_t first_node = syncs.size() - nodes.size();
      for (std::size_t k = 0; k < nodes.size(); ++k) {
        result_.sync_evaluations[nodes[k].first][nodes[k].second] = synced[first_node + k];
      }
    }
    for (int s = 0; s < stages; ++s) {
      if (!result_.last_backward_evaluations.empty()) {
        result_.last_backward_evaluations[s] = result_.last_backward_evaluations[stage_rep[s]];
      }
      for (int c = 0; c < per_stage; ++c) {
        result_.sync_evaluations[s * per_stage + c] =
            result_.sync_evaluations[stage_rep[s] * per_stage + c];
      }
    }
    // The solver's problem with every used option replaced by its evaluation.
    pipeline::Problem truth{.schedule = problem.schedule,
                            .num_stages = stages,
                            .num_microbatches = problem.num_microbatches,
                            .num_chunks = model_.num_chunks,
                            .gradient_sync = problem.gradient_sync,
                            .p2p_time_s = problem.p2p_time_s};
    auto fill = [](std::size_t size, const std::map<int, measure::Sample>& evaluated) {
      std::vector<pipeline::Option> list(size);
      for (const auto& [option, sample] : evaluated) {
        list[static_cast<std::size_t>(option)] = {.time_s = sample.time_s,
                                                  .energy_j = sample.energy_j};
      }
      return list;
    };
    for (int st = 0; st < stages; ++st) truth.gpus_per_stage.push_back(problem.StageGpus(st));
    for (std::size_t u = 0; u < units; ++u) {
      truth.forward_options.push_back(
          fill(problem.stages[u].forward.size(), result_.option_evaluations[u][0]));
      truth.backward_options.push_back(
          fill(problem.stages[u].backward.size(), result_.option_evaluations[u][1]));
    }
    for (std::size_t s = 0; s < problem.last_backward.size(); ++s) {
      truth.last_backward_options.push_back(
          fill(problem.last_backward[s].size(), result_.last_backward_evaluations[s]));
    }
    for (std::size_t i = 0; i < problem.sync_nodes.size(); ++i) {
      truth.gradient_sync_options.push_back(
          fill(problem.sync_nodes[i].size(), result_.sync_evaluations[i]));
    }
    for (const auto& point : solved.points) {
      // A GPU that waits (pipeline bubbles, P2P receives) draws the board's idle power.
      result_.evaluated.push_back(
          pipeline::Evaluate(truth, dag, point.choice, backend_.IdlePowerW()));
    }
    EvaluateComposition();
    result_.evaluation_gpu_seconds = evaluator_.GpuSeconds() - before;
  }

  // The solver's frontier is Pareto-optimal on its predictions; evaluated, a plan can turn out
  // slower and costlier than another (the prediction error differs between plans). Such plans
  // are dropped (recorded in result_.dropped) and the rest ordered slowest evaluated time
  // first; the published sample is then taken over what remains, so every sampled plan and
  // every plan file is on the evaluated frontier.
  void DropDominatedPoints() {
    std::vector<pipeline::IterationPoint>& points = result_.solved.solve.points;
    std::vector<pareto::Point> all;
    for (std::size_t i = 0; i < points.size(); ++i) {
      all.push_back({.time_s = result_.evaluated[i].time_s,
                     .energy_j = result_.evaluated[i].energy_j,
                     .payload = static_cast<int64_t>(i)});
    }
    const std::vector<pareto::Point> front = pareto::Filter(all);  // time ascending
    if (front.size() == points.size()) return;
    std::vector<bool> kept(points.size(), false);
    for (const auto& p : front) kept[static_cast<std::size_t>(p.payload)] = true;
    // Kept points slowest first: the new index of front[k] is front.size() - 1 - k.
    std::vector<pipeline::IterationPoint> kept_points;
    std::vector<pipeline::Evaluation> kept_evaluated;
    for (auto it = front.rbegin(); it != front.rend(); ++it) {
      kept_points.push_back(points[static_cast<std::size_t>(it->payload)]);
      kept_evaluated.push_back(result_.evaluated[static_cast<std::size_t>(it->payload)]);
    }
    for (std::size_t i = 0; i < points.size(); ++i) {
      if (kept[i]) continue;
      // The fastest-ordered front's last point no slower than this one has the least energy of
      // all such points, so it dominates it.
      const auto after =
          std::upper_bound(front.begin(), front.end(), result_.evaluated[i].time_s,
                           [](double t, const pareto::Point& p) { return t < p.time_s; });
      KAREUS_CHECK(after != front.begin()) << "a dropped point with no point no slower";
      const std::size_t k = static_cast<std::size_t>(after - front.begin()) - 1;
      result_.dropped.push_back({.solver_index = i,
                                 .dominated_by = front.size() - 1 - k,
                                 .predicted = points[i].cost,
                                 .evaluated = result_.evaluated[i]});
    }
    points = std::move(kept_points);
    result_.evaluated = std::move(kept_evaluated);
    result_.solved.sampled = plan::SamplePlanIndices(points.size());
    result_.solved.fastest = points.size() - 1;
  }

  // Composition error: every composed option the method planned on (nanobatched with tuned
  // knobs; the fallbacks are measured instructions) against the same instruction evaluated end
  // to end, one batch per distinct (stage, chunk) unit (units measured once share options).
  void EvaluateComposition() {
    for (int u = 0; u < static_cast<int>(model_.stages.size()); ++u) {
      if (reps_[u] != u) continue;
      const int s = model_.stages[u].stage;
      std::vector<measure::InstructionRequest> batch;
      std::vector<const plan::InstructionOption*> options;
      for (Direction d : {Direction::kForward, Direction::kBackward}) {
        for (const auto& option : OptionsOf(result_.problem, u, d)) {
          if (option.mode != ExecutionMode::kNanobatched || option.partitions.empty()) continue;
          batch.push_back({.stage = s,
                           .direction = d,
                           .knobs = ToKnobs(option),
                           .chunk = model_.stages[u].chunk});
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
  std::vector<int> reps_;  // per unit: the unit measured for it (Representatives)
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
