// SPDX-License-Identifier: Apache-2.0
// The options of the data-parallel gradient sync of a method run (methods/flow_internal.h).
#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "methods/compose.h"
#include "methods/flow_internal.h"

namespace kareus::methods::internal {
namespace {

// What the gradient sync's sweep of every stage shares.
struct SyncSweep {
  double p_static;
  std::vector<int> sm_choices;
  int top_clock;
  SweepScreen screen;  // its clocks: the method's
  bool overlapped;
  int per_stage;
};

// One stage's gradient sync readings: the requests and their samples, in the same order.
struct SyncReadings {
  std::vector<measure::GradientSyncRequest> batch;
  std::vector<measure::Sample> samples;
};

// One stage's options: its last backward's and, per chunk, its sync nodes'.
struct StageSyncOptions {
  std::vector<plan::InstructionOption> last;
  std::vector<std::vector<plan::InstructionOption>> nodes;
};

// (work, anchor clock, sms) of the anchor readings near their front.
using NearSet = std::set<std::tuple<measure::GradientSyncWork, int, int>>;

plan::InstructionOption SyncOption(const measure::Sample& sample, int freq_mhz, int sms,
                                   bool overlap) {
  return plan::InstructionOption{
      .time_s = sample.time_s,
      .energy_j = sample.energy_j,
      .freq_mhz = freq_mhz,
      .mode = ExecutionMode::kSequential,
      .partitions = {},
      .gradient_sync = plan::InstructionGradientSync{.sms = sms, .overlapped = overlap}};
}

// The works measured at chunk 0 of a stage: with a last backward that launches buckets, that
// instruction overlapped and its buckets after it; always the sync node.
std::vector<measure::GradientSyncWork> StageWorks(bool launches) {
  std::vector<measure::GradientSyncWork> works;
  if (launches)
    works = {measure::GradientSyncWork::kOverlapped, measure::GradientSyncWork::kLastBuckets};
  works.push_back(measure::GradientSyncWork::kSyncNode);
  return works;
}

// Every work at every anchor clock and SM count (chunk 0), then the later chunks' sync nodes
// at the top clock.
std::vector<measure::GradientSyncRequest> AnchorRequests(
    int s, const std::vector<measure::GradientSyncWork>& works, const SyncSweep& sweep) {
  std::vector<measure::GradientSyncRequest> batch;
  for (int f : sweep.screen.clocks) {
    if (!sweep.screen.IsAnchor(f)) continue;
    for (int sms : sweep.sm_choices) {
      for (measure::GradientSyncWork work : works) {
        batch.push_back({.stage = s, .chunk = 0, .work = work, .freq_mhz = f, .sms = sms});
      }
    }
  }
  for (int c = 1; c < sweep.per_stage; ++c) {
    for (int sms : sweep.sm_choices) {
      batch.push_back({.stage = s,
                       .chunk = c,
                       .work = measure::GradientSyncWork::kSyncNode,
                       .freq_mhz = sweep.top_clock,
                       .sms = sms});
    }
  }
  return batch;
}

// The options (time, effective energy) one anchor reading makes: a last backward followed by
// its buckets is every backward option of that clock plus the buckets' reading.
std::vector<std::pair<double, double>> MadeOptions(
    const measure::GradientSyncRequest& r, const measure::Sample& sample,
    const std::vector<plan::InstructionOption>& backward, double p_static) {
  auto effective = [&](double time_s, double energy_j) {
    return std::pair<double, double>{time_s, energy_j - p_static * time_s};
  };
  std::vector<std::pair<double, double>> made;
  if (r.work != measure::GradientSyncWork::kLastBuckets) {
    made.push_back(effective(sample.time_s, sample.energy_j));
    return made;
  }
  for (const plan::InstructionOption& o : backward) {
    if (o.freq_mhz == r.freq_mhz) {
      made.push_back(effective(o.time_s + sample.time_s, o.energy_j + sample.energy_j));
    }
  }
  return made;
}

// Between anchors: the SM counts whose anchor readings lay near the front at one of the two
// anchors around. The solver chooses a stage's last backward among every clock's options,
// overlapped or followed by its buckets (a backward option of that clock plus the buckets'
// reading), and its sync nodes among every clock's: the fronts are those option sets over the
// anchors.
NearSet NearAnchors(const SyncReadings& anchors,
                    const std::vector<plan::InstructionOption>& backward, double p_static) {
  const std::vector<measure::GradientSyncRequest>& batch = anchors.batch;
  // Per anchor reading (chunk 0): the options it makes.
  std::vector<std::vector<std::pair<double, double>>> made(batch.size());
  std::vector<std::pair<double, double>> last_front, node_front;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& r = batch[i];
    if (r.chunk != 0) continue;
    made[i] = MadeOptions(r, anchors.samples[i], backward, p_static);
    auto& front = r.work == measure::GradientSyncWork::kSyncNode ? node_front : last_front;
    front.insert(front.end(), made[i].begin(), made[i].end());
  }
  NearSet near;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& r = batch[i];
    const auto& front = r.work == measure::GradientSyncWork::kSyncNode ? node_front : last_front;
    const bool any_near = std::any_of(made[i].begin(), made[i].end(), [&](const auto& option) {
      return NearFront(option.first, option.second, front, kScreenMargin);
    });
    if (any_near) near.insert({r.work, r.freq_mhz, r.sms});
  }
  return near;
}

// The readings to take between anchors (chunk 0): each work and SM count near the front at
// one of the two anchors around the clock.
std::vector<measure::GradientSyncRequest> BetweenAnchors(
    int s, const std::vector<measure::GradientSyncWork>& works, const NearSet& near,
    const SyncSweep& sweep) {
  std::vector<measure::GradientSyncRequest> rest;
  for (int f : sweep.screen.clocks) {
    if (sweep.screen.IsAnchor(f)) continue;
    const auto [before, after] = sweep.screen.Neighbours(f);
    for (int sms : sweep.sm_choices) {
      for (measure::GradientSyncWork work : works) {
        if (near.contains({work, before, sms}) || near.contains({work, after, sms})) {
          rest.push_back({.stage = s, .chunk = 0, .work = work, .freq_mhz = f, .sms = sms});
        }
      }
    }
  }
  return rest;
}

// A last backward followed by its buckets' reduction `r`: every backward option at its clock
// plus the reading.
void AppendFollowedByBuckets(const std::vector<plan::InstructionOption>& backward,
                             const measure::GradientSyncRequest& r, const measure::Sample& sample,
                             std::vector<plan::InstructionOption>& last) {
  for (const plan::InstructionOption& o : backward) {
    if (o.freq_mhz != r.freq_mhz) continue;
    plan::InstructionOption after = o;
    after.time_s += sample.time_s;
    after.energy_j += sample.energy_j;
    after.gradient_sync = plan::InstructionGradientSync{.sms = r.sms, .overlapped = false};
    last.push_back(std::move(after));
  }
}

// The options the readings make, in the readings' order (not yet filtered).
StageSyncOptions StageOptionsFrom(const SyncReadings& readings,
                                  const std::vector<plan::InstructionOption>& backward,
                                  int per_stage) {
  StageSyncOptions out{.last = {}, .nodes = {}};
  out.nodes.resize(static_cast<std::size_t>(per_stage));
  for (std::size_t i = 0; i < readings.batch.size(); ++i) {
    const auto& r = readings.batch[i];
    const measure::Sample& sample = readings.samples[i];
    switch (r.work) {
      case measure::GradientSyncWork::kOverlapped:
        out.last.push_back(SyncOption(sample, r.freq_mhz, r.sms, true));
        break;
      case measure::GradientSyncWork::kLastBuckets:
        AppendFollowedByBuckets(backward, r, sample, out.last);
        break;
      case measure::GradientSyncWork::kSyncNode:
        out.nodes[static_cast<std::size_t>(r.chunk)].push_back(
            SyncOption(sample, r.freq_mhz, r.sms, r.chunk > 0));
        break;
    }
  }
  return out;
}

// The options of stage `s`, the first of the stages with its units: anchors measured in one
// batch, then (screened sweeps) the readings between anchors in another.
void MeasureStage(const workload::WorkloadModel& model, measure::Backend& backend,
                  const SyncSweep& sweep, int s, plan::PlanProblem& problem) {
  const bool launches = sweep.overlapped && !workload::LastBackwardBuckets(model, s).empty();
  const std::vector<measure::GradientSyncWork> works = StageWorks(launches);
  SyncReadings readings{.batch = AnchorRequests(s, works, sweep), .samples = {}};
  readings.samples = backend.MeasureAll(model, readings.batch);
  const auto& backward = problem.stages[static_cast<std::size_t>(s * model.num_chunks)].backward;
  if (sweep.screen.stride > 1) {
    const std::vector<measure::GradientSyncRequest> rest =
        BetweenAnchors(s, works, NearAnchors(readings, backward, sweep.p_static), sweep);
    const std::vector<measure::Sample> more = backend.MeasureAll(model, rest);
    readings.batch.insert(readings.batch.end(), rest.begin(), rest.end());
    readings.samples.insert(readings.samples.end(), more.begin(), more.end());
  }
  const StageSyncOptions options = StageOptionsFrom(readings, backward, sweep.per_stage);
  // Nothing to reduce with the last backward: it runs as any backward.
  if (sweep.overlapped)
    problem.last_backward[s] = launches ? FilterOptions(options.last, sweep.p_static) : backward;
  for (int c = 0; c < sweep.per_stage; ++c) {
    problem.sync_nodes[s * sweep.per_stage + c] =
        FilterOptions(options.nodes[static_cast<std::size_t>(c)], sweep.p_static);
  }
}

// Stage `s` has the units of stage `from`, measured before it: the same options.
void CopyStage(const SyncSweep& sweep, int s, int from, plan::PlanProblem& problem) {
  if (sweep.overlapped) problem.last_backward[s] = problem.last_backward[from];
  for (int c = 0; c < sweep.per_stage; ++c) {
    problem.sync_nodes[s * sweep.per_stage + c] = problem.sync_nodes[from * sweep.per_stage + c];
  }
}

}  // namespace

// The data-parallel gradient sync (workload::GradientSyncModel, schedule::GradientSync): per
// stage, with overlap, the options of its last instruction, which reduces the buckets it
// completes either during it (sequential execution, the reduction kernel beside the compute)
// or right after it (any backward option of the unit at that clock, then those buckets
// alone); and the options of its sync nodes: the tail at every clock the method plans with,
// and a chunk's buckets beside later compute at the method's top clock (they run under the
// clocks of the instructions they overlap, so a clock of their own would be fictional).
// Methods that keep library defaults give the reduction NCCL's default SMs; the others
// choose among GradientSyncModel::sm_choices. Identical stages are measured once.
void MethodRun::GradientSyncOptions(measure::Backend& backend) {
  const double p_static = backend_.StaticPowerW();
  const Meter meter(backend);
  const SyncSweep sweep{
      .p_static = p_static,
      .sm_choices = method_.comm == CommSource::kLibraryDefault
                        ? std::vector<int>{model_.workload.gpu.interconnect.library_default_sms}
                        : model_.gradient_sync.sm_choices,
      .top_clock = *std::max_element(clocks_.begin(), clocks_.end()),
      .screen = Screen(),
      .overlapped = result_.problem.gradient_sync == schedule::GradientSync::kOverlapped,
      .per_stage = result_.problem.SyncNodesPerStage()};
  std::map<std::vector<int>, int> measured;  // distinct stages: their units' representatives
  for (int s = 0; s < model_.num_stages; ++s) {
    std::vector<int> key;
    for (int c = 0; c < model_.num_chunks; ++c) key.push_back(reps_[s * model_.num_chunks + c]);
    if (const auto it = measured.find(key); it != measured.end()) {
      CopyStage(sweep, s, it->second, result_.problem);
      continue;
    }
    measured[key] = s;
    MeasureStage(model_, backend, sweep, s, result_.problem);
  }
  meter.ChargeTo(*this, CostKind::kGradientSync);
}

}  // namespace kareus::methods::internal
