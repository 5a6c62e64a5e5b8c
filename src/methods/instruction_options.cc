// SPDX-License-Identifier: Apache-2.0
// The per-instruction options of a method run (methods/flow_internal.h): the partition
// frontiers, the clock sweeps of the methods without comm knobs, and the composed options with
// their fallbacks.
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "kareus/plan/compose.h"
#include "methods/compose.h"
#include "methods/flow_internal.h"

namespace kareus::methods::internal {

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

  // `repeat`: InstructionRequest::repeat (a further reading of a configuration read before).
  void Add(const workload::StageModel& unit, Direction d, int freq_mhz, ExecutionMode mode,
           int repeat = 0) {
    requests.push_back({.stage = unit.stage,
                        .direction = d,
                        .knobs = {.freq_mhz = freq_mhz, .mode = mode, .partitions = {}},
                        .chunk = unit.chunk,
                        .repeat = repeat});
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

// Partition frontiers: profiled (mobo/) or exhaustive. Cost: every measurement the
// frontiers rest on, store reuse included, so a resumed run reports the same GPU-hours.
std::vector<TypeSamples> MethodRun::MeasurePartitions(measure::Backend& backend) {
  if (!nanobatched_ || !UsesComposition()) return {};
  if (method_.comm == CommSource::kProfiled) {
    mobo::ProfileOptions profile = options_.profile;
    profile.oracle = false;
    result_.profile = options_.profiler ? options_.profiler(model_, profile, backend, context_)
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
void MethodRun::SweptOptions(measure::Backend& backend) {
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
    ConfirmReadings(u, backend);
  }
  CopyToIdenticalUnits();
  meter.ChargeTo(*this, CostKind::kInstructions);
}

// Options of a method with tuned comm knobs: per clock, the composition of the partition
// types' fronts plus the fixed work (plan/compose.h), the sequential execution, and the
// library-default nanobatched execution as fallbacks the solver may pick where tuned overlap
// does not pay; a method that may also run sequentially keeps every option not dominated on
// effective energy.
void MethodRun::ComposedOptions(measure::Backend& backend,
                                const std::vector<TypeSamples>& samples) {
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
        all =
            plan::ComposeInstruction(ClockInputs(model_, u, d, samples, fixed, clocks_, sequential),
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
    ConfirmReadings(u, backend);
  }
  CopyToIdenticalUnits();
  meter.ChargeTo(*this, CostKind::kInstructions);
}

// RunOptions::confirm_readings: the whole-instruction options of unit `u` that the filter
// keeps (both directions; composed options rest on the profiler's denoised partition fronts
// and are left as they are) read that many more times in one batch, each repeat a reading of
// its own; an option's time and energy become the mean of the fresh readings, and the options
// are filtered again. The first reading only selects: it was kept for being low (the winner's
// curse), the fresh ones were not (sample splitting).
void MethodRun::ConfirmReadings(int u, measure::Backend& backend) {
  const int repeats = options_.confirm_readings;
  if (repeats == 0) return;
  const double p_static = backend_.StaticPowerW();
  InstructionSweep fresh;
  for (Direction d : {Direction::kForward, Direction::kBackward}) {
    std::vector<plan::InstructionOption>& options = OptionsOf(result_.problem, u, d);
    options = FilterOptions(options, p_static);
    for (const plan::InstructionOption& o : options) {
      if (!o.partitions.empty()) continue;
      for (int r = 1; r <= repeats; ++r) fresh.Add(model_.stages[u], d, o.freq_mhz, o.mode, r);
    }
  }
  if (fresh.requests.empty()) return;
  fresh.Measure(model_, backend);
  const std::vector<measure::Sample>& samples = fresh.samples;
  std::size_t next = 0;
  for (Direction d : {Direction::kForward, Direction::kBackward}) {
    std::vector<plan::InstructionOption>& options = OptionsOf(result_.problem, u, d);
    for (plan::InstructionOption& o : options) {
      if (!o.partitions.empty()) continue;
      double time_s = 0.0, energy_j = 0.0;
      for (int r = 1; r <= repeats; ++r, ++next) {
        time_s += samples[next].time_s;
        energy_j += samples[next].energy_j;
      }
      o.time_s = time_s / repeats;
      o.energy_j = energy_j / repeats;
    }
    options = FilterOptions(options, p_static);
  }
}

// The sweep screen of this method: Kareus's (profiled comm knobs) with the run's stride;
// every clock in full for the others.
SweepScreen MethodRun::Screen() const {
  return {.clocks = clocks_,
          .stride = method_.comm == CommSource::kProfiled ? options_.sweep_anchor_stride : 1};
}

// The whole-instruction fallbacks to measure between anchors, after the anchors' `measured`:
// at a clock where the partitions compose, each (direction, mode) that lay near the front of
// the composed options of every clock at one of the two anchors around it; at a clock where
// they do not compose, every fallback.
std::vector<std::tuple<int, Direction, ExecutionMode>> MethodRun::FallbacksBetweenAnchors(
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
        for (const auto& o : plan::ComposeInstruction(inputs, {.p_static_w = p_static,
                                                              .epsilon = options_.compose_epsilon})
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

void MethodRun::CopyToIdenticalUnits() {
  for (std::size_t u = 0; u < reps_.size(); ++u) {
    if (reps_[u] == static_cast<int>(u)) continue;
    const int gpus = result_.problem.stages[u].gpus;
    result_.problem.stages[u] = result_.problem.stages[reps_[u]];
    result_.problem.stages[u].gpus = gpus;
  }
}

}  // namespace kareus::methods::internal
