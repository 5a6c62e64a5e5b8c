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
      if (overlapped) result_.problem.last_backward[s] = result_.problem.last_backward[it->second];
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
            after.gradient_sync = plan::InstructionGradientSync{.sms = r.sms, .overlapped = false};
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

}  // namespace kareus::methods::internal
