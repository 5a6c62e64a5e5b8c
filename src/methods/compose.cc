// SPDX-License-Identifier: Apache-2.0
#include "methods/compose.h"

#include "kareus/common/context.h"

namespace kareus::methods::internal {

using workload::Direction;

std::vector<TypeSamples> SamplesFromProfile(const mobo::ProfileSummary& profile) {
  std::vector<TypeSamples> out;
  for (const auto& p : profile.partitions) {
    TypeSamples t{.type = p.type, .points = {}, .freq_mhz = {}};
    // The profiler's denoised estimate at each measured configuration (its final surrogate's
    // mean): selecting fronts on raw noisy readings keeps lucky draws (measured: median
    // hv_ratio 0.987 raw vs 0.998 denoised, docs/ARCHITECTURE.md §5).
    for (const auto& e : p.evaluations) {
      t.points.push_back({.time_s = e.estimate.time_s, .energy_j = e.estimate.energy_j,
                          .sms = e.knobs.sms, .slot = e.knobs.slot});
      t.freq_mhz.push_back(e.knobs.freq_mhz);
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
    TypeSamples t{.type = type.name, .points = {}, .freq_mhz = {}};
    for (const auto& p : emulator::SweepPartition(model.workload.gpu, type, sweep)) {
      t.points.push_back({.time_s = p.result.time_s, .energy_j = p.result.energy_j,
                          .sms = p.knobs.sms, .slot = p.knobs.slot});
      t.freq_mhz.push_back(p.knobs.freq_mhz);
    }
    out.push_back(std::move(t));
  }
  return out;
}

FixedWork MeasureFixedWork(const workload::WorkloadModel& model, const std::vector<int>& clocks,
                           const emulator::MeasurementOptions& measurement, uint64_t seed) {
  const auto& gpu = model.workload.gpu;
  const std::string signature = model.workload.Signature();
  FixedWork out;
  for (int f : clocks) {
    for (const auto& stage : model.stages) {
      for (const auto* ins : {&stage.forward, &stage.backward}) {
        std::vector<workload::Op> ops = ins->non_partition_ops;
        for (const auto& use : ins->uses) {
          const auto& compute = model.partition_types[use.type].compute_ops;
          for (int i = 0; i < use.without_collective; ++i) ops.insert(ops.end(), compute.begin(), compute.end());
        }
        std::pair<double, double> value{0.0, 0.0};
        if (!ops.empty()) {
          const std::string key = signature + "|fixed|" + std::to_string(stage.stage) + "|" +
                                  workload::ToString(ins->direction) + "|" + std::to_string(f);
          const auto m = emulator::Measure(
              emulator::SimulateSequential(gpu, ops, f, gpu.interconnect.library_default_sms),
              measurement, seed, HashString(key.c_str()));
          value = {m.value.time_s, m.value.energy_j};
          out.gpu_seconds += m.gpu_seconds * stage.gpus;
          ++out.measurements;
        }
        (ins->direction == Direction::kForward ? out.forward : out.backward)[f].push_back(value);
      }
    }
  }
  return out;
}

std::vector<plan::ClockInput> ClockInputs(const workload::WorkloadModel& model, int stage,
                                          Direction direction,
                                          const std::vector<TypeSamples>& samples,
                                          const FixedWork& fixed, const std::vector<int>& clocks,
                                          const std::map<int, std::pair<double, double>>& sequential) {
  const auto& ins = direction == Direction::kForward ? model.stages[stage].forward
                                                     : model.stages[stage].backward;
  std::vector<plan::ClockInput> out;
  for (int f : clocks) {
    plan::ClockInput clock{.freq_mhz = f};
    const auto& work = (direction == Direction::kForward ? fixed.forward : fixed.backward).at(f)[stage];
    clock.nonpartition_time_s = work.first;
    clock.nonpartition_energy_j = work.second;
    if (const auto it = sequential.find(f); it != sequential.end()) {
      clock.has_sequential = true;
      clock.sequential_time_s = it->second.first;
      clock.sequential_energy_j = it->second.second;
    }
    bool complete = model.nanobatching;
    for (const auto& use : ins.uses) {
      const int with = use.count - use.without_collective;
      if (with == 0 || !complete) continue;
      const std::string& name = model.partition_types[use.type].name;
      plan::PartitionTypeInput input{.type = name, .count = with, .frontier = {}};
      for (const auto& t : samples) {
        if (t.type != name) continue;
        for (size_t i = 0; i < t.points.size(); ++i) {
          if (t.freq_mhz[i] == f) input.frontier.push_back(t.points[i]);
        }
      }
      if (input.frontier.empty()) {
        complete = false;
      } else {
        clock.partitions.push_back(std::move(input));
      }
    }
    if (!complete) clock.partitions.clear();
    if (complete || clock.has_sequential) out.push_back(std::move(clock));
  }
  return out;
}

}  // namespace kareus::methods::internal
