// SPDX-License-Identifier: Apache-2.0
#include "methods/compose.h"

#include <algorithm>

#include "kareus/common/context.h"
#include "kareus/common/error.h"
#include "kareus/pareto/pareto.h"

namespace kareus::methods::internal {
namespace {

using workload::Direction;

// The front of one type's configurations at one clock on (time, effective energy).
std::vector<TypeSamples::Sample> Front(const std::vector<TypeSamples::Sample>& samples,
                                       double p_static_w) {
  return FilterOptions(samples, p_static_w);
}

}  // namespace

std::vector<TypeSamples> SamplesFromProfile(const workload::WorkloadModel& model,
                                            const mobo::ProfileSummary& profile) {
  (void)model;
  std::vector<TypeSamples> out;
  for (const auto& p : profile.partitions) {
    TypeSamples t{.type = p.type, .samples = {}};
    // The profiler's denoised estimate at each measured configuration (its final surrogate's
    // mean): selecting fronts on raw noisy readings keeps lucky draws (measured: median
    // hv_ratio 0.987 raw vs 0.998 denoised, docs/ARCHITECTURE.md §5).
    for (const auto& e : p.evaluations) {
      t.samples.push_back({.knobs = e.knobs, .time_s = e.estimate.time_s, .energy_j = e.estimate.energy_j});
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<TypeSamples> ExhaustiveSamples(const workload::WorkloadModel& model,
                                           const std::vector<int>& clocks) {
  std::vector<TypeSamples> out;
  for (const auto& type : model.partition_types) {
    emulator::SweepOptions sweep{.freqs_mhz = clocks};
    if (!type.tunable) {
      sweep.sms = {type.fixed_sms};
      sweep.slots = {type.fixed_slot};
    }
    TypeSamples t{.type = type.name, .samples = {}};
    for (const auto& p : emulator::SweepPartition(model.workload.gpu, type, sweep)) {
      t.samples.push_back({.knobs = p.knobs, .time_s = p.result.time_s, .energy_j = p.result.energy_j});
    }
    out.push_back(std::move(t));
  }
  return out;
}

ComposeInputs MeasureComposeInputs(const workload::WorkloadModel& model,
                                   const std::vector<TypeSamples>& samples,
                                   const std::vector<int>& clocks,
                                   const emulator::MeasurementOptions& measurement, uint64_t seed) {
  const auto& gpu = model.workload.gpu;
  const double p_static = gpu.power.static_w;
  const int default_sms = gpu.interconnect.library_default_sms;
  ComposeInputs inputs;
  auto measure = [&](const emulator::SimResult& truth, const std::string& key, int gpus) {
    const auto m = emulator::Measure(truth, measurement, seed, HashString(key.c_str()));
    inputs.gpu_seconds += m.gpu_seconds * gpus;
    ++inputs.measurements;
    return std::pair{m.value.time_s, m.value.energy_j};
  };
  const std::string signature = model.workload.Signature();
  for (int f : clocks) {
    ComposeInputs::PerClock& at = inputs.clocks[f];
    for (const auto& t : samples) {
      std::vector<TypeSamples::Sample> here;
      for (const auto& s : t.samples) {
        if (s.knobs.freq_mhz == f) here.push_back(s);
      }
      if (!here.empty()) at.fronts[t.type] = Front(here, p_static);
    }
    for (const auto& stage : model.stages) {
      for (const auto* ins : {&stage.forward, &stage.backward}) {
        std::vector<workload::Op> fixed = ins->non_partition_ops;
        for (const auto& use : ins->uses) {
          const auto& ops = model.partition_types[use.type].compute_ops;
          for (int i = 0; i < use.without_collective; ++i) fixed.insert(fixed.end(), ops.begin(), ops.end());
        }
        const std::string key = signature + "|fixed|" + std::to_string(stage.stage) + "|" +
                                workload::ToString(ins->direction) + "|" + std::to_string(f);
        const auto value = fixed.empty() ? std::pair{0.0, 0.0}
                                         : measure(emulator::SimulateSequential(gpu, fixed, f, default_sms),
                                                   key, stage.gpus);
        (ins->direction == Direction::kForward ? at.fixed_forward : at.fixed_backward).push_back(value);
      }
    }
  }
  return inputs;
}

std::vector<ComposedOption> ComposeInstruction(const workload::WorkloadModel& model, int stage,
                                               Direction direction, const ComposeInputs& inputs,
                                               const std::vector<int>& clocks, int max_options) {
  const double p_static = model.workload.gpu.power.static_w;
  const auto& ins = direction == Direction::kForward ? model.stages[stage].forward
                                                     : model.stages[stage].backward;
  std::vector<ComposedOption> all;
  if (!model.nanobatching) return all;
  for (int f : clocks) {
    const auto it = inputs.clocks.find(f);
    if (it == inputs.clocks.end()) continue;
    const auto& at = it->second;
    const auto& fixed = direction == Direction::kForward ? at.fixed_forward[stage]
                                                         : at.fixed_backward[stage];
    const double fixed_time = fixed.first, fixed_energy = fixed.second;
    // Min-plus sum over the types: the front of partial sums on (time, effective energy);
    // sources let every composed point recover each type's knobs.
    std::vector<pareto::Point> sum = {{.time_s = 0.0, .energy_j = 0.0, .payload = 0}};
    std::vector<std::vector<int>> picks = {{}};  // per sum point: chosen front index per type
    std::vector<std::string> types;
    bool complete = true;
    for (const auto& use : ins.uses) {
      const auto& type = model.partition_types[use.type];
      const int with = use.count - use.without_collective;
      if (with == 0) continue;
      const auto front = at.fronts.find(type.name);
      if (front == at.fronts.end() || front->second.empty()) {
        complete = false;
        break;
      }
      std::vector<pareto::Point> scaled;
      for (size_t i = 0; i < front->second.size(); ++i) {
        const auto& s = front->second[i];
        scaled.push_back({.time_s = with * s.time_s,
                          .energy_j = with * (s.energy_j - p_static * s.time_s),
                          .payload = static_cast<int64_t>(i)});
      }
      const auto result = pareto::MinPlusSum(sum, scaled);
      std::vector<std::vector<int>> next_picks;
      std::vector<pareto::Point> next;
      for (size_t k = 0; k < result.points.size(); ++k) {
        const auto [i, j] = result.sources[k];
        std::vector<int> pick = picks[sum[i].payload];
        pick.push_back(static_cast<int>(scaled[j].payload));
        next_picks.push_back(std::move(pick));
        next.push_back({.time_s = result.points[k].time_s, .energy_j = result.points[k].energy_j,
                        .payload = static_cast<int64_t>(k)});
      }
      sum = std::move(next);
      picks = std::move(next_picks);
      types.push_back(type.name);
    }
    if (!complete) continue;
    for (const auto& p : sum) {
      ComposedOption option;
      option.time_s = p.time_s + fixed_time;
      // Back from effective to total energy: E = E_eff + P_static t.
      option.energy_j = p.energy_j + p_static * p.time_s + fixed_energy;
      option.knobs.freq_mhz = f;
      option.knobs.mode = plan::ExecutionMode::kNanobatched;
      const auto& pick = picks[p.payload];
      for (size_t t = 0; t < types.size(); ++t) {
        const auto& chosen = at.fronts.at(types[t])[pick[t]];
        if (!model.Type(types[t]).tunable) continue;
        option.knobs.partitions.push_back({.type = types[t], .sms = chosen.knobs.sms, .slot = chosen.knobs.slot});
      }
      all.push_back(std::move(option));
    }
  }
  all = FilterOptions(std::move(all), p_static);
  if (static_cast<int>(all.size()) > max_options && max_options > 1) {
    // Keep an evenly spread subset along the front, fastest and cheapest included.
    std::vector<ComposedOption> kept;
    for (int i = 0; i < max_options; ++i) {
      kept.push_back(all[static_cast<size_t>(std::llround(double(i) * (all.size() - 1) / (max_options - 1)))]);
    }
    all = std::move(kept);
  }
  return all;
}

}  // namespace kareus::methods::internal
