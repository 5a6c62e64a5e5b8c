// SPDX-License-Identifier: Apache-2.0
#include "kareus/emulator/emulator.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "emulator/engine.h"
#include "kareus/common/error.h"

namespace kareus::emulator {
namespace {

using internal::Accumulator;
using internal::CompiledKernel;
using internal::CompiledPartition;
using internal::GpuPhysics;

template <typename T>
std::string JoinList(const std::vector<T>& values) {
  std::ostringstream out;
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  return out.str();
}

void ValidateClock(const hw::GpuSpec& gpu, int freq_mhz) {
  if (!gpu.clock.Contains(freq_mhz)) {
    ThrowInput("freq_mhz", std::to_string(freq_mhz),
               "not a supported clock of " + gpu.name + "; valid: " +
                   std::to_string(gpu.clock.max_mhz) + " down to " +
                   std::to_string(gpu.clock.min_mhz) + " MHz in steps of " +
                   std::to_string(gpu.clock.step_mhz) + " (profile grid: " +
                   JoinList(gpu.clock.ProfileGrid()) + ")");
  }
}

void ValidateCommSms(const hw::GpuSpec& gpu, int sms, const std::string& field) {
  if (sms < 1 || sms >= gpu.sm_count) {
    ThrowInput(field, std::to_string(sms),
               "must leave compute at least one SM: valid 1.." + std::to_string(gpu.sm_count - 1) +
                   " on " + gpu.name);
  }
}

double Hz(int freq_mhz) { return freq_mhz * 1e6; }

// Simulates one compiled partition; `with_collective` false runs the compute ops alone (the
// occurrences that have no collective to hide).
void RunCompiled(const GpuPhysics& physics, const CompiledPartition& compiled,
                 bool with_collective, int sms, int launch_index, int freq_mhz,
                 Accumulator& acc) {
  const CompiledKernel* collective =
      with_collective && compiled.has_collective ? &compiled.collective : nullptr;
  internal::RunPartition(physics, compiled.compute, collective, sms, launch_index, Hz(freq_mhz),
                         acc);
}

// Sums parts of an instruction; `clock_range` tracks the parts' realized clocks so that a
// constant clock is reported exactly rather than as a rounded integral.
void AddInto(SimResult& total, const SimResult& part, double times,
             std::pair<double, double>& clock_range) {
  if (part.time_s > 0.0) {
    clock_range.first = std::min(clock_range.first, part.effective_freq_mhz);
    clock_range.second = std::max(clock_range.second, part.effective_freq_mhz);
  }
  total.time_s += part.time_s * times;
  total.energy_j += part.energy_j * times;
  total.static_energy_j += part.static_energy_j * times;
  total.dynamic_energy_j += part.dynamic_energy_j * times;
  total.effective_freq_mhz += part.effective_freq_mhz * part.time_s * times;  // integral for now
  total.compute_busy_s += part.compute_busy_s * times;
  total.comm_busy_s += part.comm_busy_s * times;
  total.overlap_s += part.overlap_s * times;
}

void FinishSum(SimResult& total, const std::pair<double, double>& clock_range) {
  total.energy_j = total.static_energy_j + total.dynamic_energy_j;
  total.avg_power_w = total.time_s > 0.0 ? total.energy_j / total.time_s : 0.0;
  total.effective_freq_mhz = total.time_s <= 0.0 ? 0.0
                             : clock_range.first == clock_range.second
                                 ? clock_range.first
                                 : total.effective_freq_mhz / total.time_s;
}

}  // namespace

Json ToJson(const SimResult& r) {
  Json j;
  j["time_s"] = r.time_s;
  j["energy_j"] = r.energy_j;
  j["static_energy_j"] = r.static_energy_j;
  j["dynamic_energy_j"] = r.dynamic_energy_j;
  j["avg_power_w"] = r.avg_power_w;
  j["effective_freq_mhz"] = r.effective_freq_mhz;
  j["compute_busy_s"] = r.compute_busy_s;
  j["comm_busy_s"] = r.comm_busy_s;
  j["overlap_s"] = r.overlap_s;
  return j;
}

void ValidatePartitionKnobs(const hw::GpuSpec& gpu, const workload::PartitionType& partition,
                            const PartitionKnobs& knobs) {
  ValidateClock(gpu, knobs.freq_mhz);
  const bool listed = std::find(partition.sm_choices.begin(), partition.sm_choices.end(),
                                knobs.sms) != partition.sm_choices.end();
  const bool fixed = !partition.tunable && knobs.sms == partition.fixed_sms;
  if (!listed && !fixed) {
    ThrowInput("sms", std::to_string(knobs.sms),
               "not an SM choice of partition " + partition.name + "; valid: " +
                   JoinList(partition.sm_choices));
  }
  ValidateCommSms(gpu, knobs.sms, "sms");
  if (partition.SlotIndex(knobs.slot) < 0) {
    std::vector<std::string> names;
    for (const workload::Slot& slot : partition.slots) names.push_back(slot.name);
    ThrowInput("slot", knobs.slot.empty() ? "\"\"" : knobs.slot,
               "not a slot of partition " + partition.name + "; valid: " + JoinList(names) +
                   " (searched: " + JoinList(partition.launch_slots) + ")");
  }
}

SimResult SimulatePartition(const hw::GpuSpec& gpu, const workload::PartitionType& partition,
                            const PartitionKnobs& knobs) {
  ValidatePartitionKnobs(gpu, partition, knobs);
  const GpuPhysics physics = internal::MakePhysics(gpu);
  const CompiledPartition compiled = internal::CompilePartition(physics, partition);
  Accumulator acc;
  RunCompiled(physics, compiled, true, knobs.sms, partition.SlotIndex(knobs.slot),
              knobs.freq_mhz, acc);
  return acc.Finish(physics.static_w);
}

SimResult SimulateSequential(const hw::GpuSpec& gpu, const std::vector<workload::Op>& ops,
                             int freq_mhz, int collective_sms) {
  ValidateClock(gpu, freq_mhz);
  ValidateCommSms(gpu, collective_sms, "collective_sms");
  const GpuPhysics physics = internal::MakePhysics(gpu);
  std::vector<CompiledKernel> kernels;
  kernels.reserve(ops.size());
  for (const workload::Op& op : ops) kernels.push_back(internal::CompileKernel(physics, op));
  Accumulator acc;
  internal::RunSequential(physics, kernels, collective_sms, Hz(freq_mhz), acc);
  return acc.Finish(physics.static_w);
}

SimResult SimulateKernel(const hw::GpuSpec& gpu, const workload::Op& op, int sms, int freq_mhz) {
  ValidateClock(gpu, freq_mhz);
  const GpuPhysics physics = internal::MakePhysics(gpu);
  const CompiledKernel kernel = internal::CompileKernel(physics, op);
  Accumulator acc;
  if (kernel.empty) return acc.Finish(physics.static_w);
  if (kernel.collective) {
    ValidateCommSms(gpu, sms, "sms");
  } else if (sms < 1 || sms > gpu.sm_count) {
    ThrowInput("sms", std::to_string(sms),
               "valid 1.." + std::to_string(gpu.sm_count) + " on " + gpu.name);
  }
  internal::SetState st;
  const double f = kernel.collective
                       ? internal::RealizedClockHz(physics, nullptr, 0, &kernel, sms,
                                                   Hz(freq_mhz), &st)
                       : internal::RealizedClockHz(physics, &kernel, sms, nullptr, 0,
                                                   Hz(freq_mhz), &st);
  const double dt = 1.0 / (kernel.collective ? st.comm_rate : st.compute_rate);
  acc.time_s = dt;
  acc.dynamic_energy_j = (st.power_w - physics.static_w) * dt;
  acc.freq_time_mhz_s = f / 1e6 * dt;
  acc.min_freq_mhz = acc.max_freq_mhz = f / 1e6;
  (kernel.collective ? acc.comm_busy_s : acc.compute_busy_s) = dt;
  return acc.Finish(physics.static_w);
}

const workload::PartitionType& FindPartitionType(const workload::WorkloadModel& model,
                                                 const std::string& name) {
  for (const workload::PartitionType& type : model.partition_types) {
    if (type.name == name) return type;
  }
  std::vector<std::string> names;
  for (const workload::PartitionType& type : model.partition_types) names.push_back(type.name);
  ThrowInput("partition", name.empty() ? "\"\"" : name,
             names.empty() ? "workload " + model.workload.name +
                                 " has no partitions (no nanobatching: microbatch < 2)"
                           : "not a partition type of workload " + model.workload.name +
                                 "; valid: " + JoinList(names));
}

InstructionKnobs DefaultInstructionKnobs(const workload::WorkloadModel& model, int freq_mhz,
                                         ExecutionMode mode) {
  InstructionKnobs knobs{.freq_mhz = freq_mhz, .mode = mode, .partitions = {}};
  if (mode == ExecutionMode::kSequential) return knobs;
  for (const workload::PartitionType& type : model.partition_types) {
    if (!type.tunable) continue;
    knobs.partitions[type.name] = measure::CommKnobs{
        .sms = model.workload.gpu.interconnect.library_default_sms,
        .slot = type.launch_slots.empty() ? std::string() : type.launch_slots.front()};
  }
  return knobs;
}

SimResult SimulateInstruction(const workload::WorkloadModel& model, int stage,
                              schedule::Direction direction, const InstructionKnobs& knobs) {
  const hw::GpuSpec& gpu = model.workload.gpu;
  if (stage < 0 || stage >= static_cast<int>(model.stages.size())) {
    ThrowInput("stage", std::to_string(stage),
               "valid 0.." + std::to_string(static_cast<int>(model.stages.size()) - 1));
  }
  ValidateClock(gpu, knobs.freq_mhz);
  const GpuPhysics physics = internal::MakePhysics(gpu);
  const workload::StageModel& stage_model = model.stages[static_cast<size_t>(stage)];
  const workload::InstructionModel& instr = direction == schedule::Direction::kForward
                                                ? stage_model.forward
                                                : stage_model.backward;
  const int library_sms = std::clamp(physics.library_default_sms, 1, physics.sm_count - 1);
  SimResult total;
  std::pair<double, double> clock_range{1e300, 0.0};
  const bool nanobatched = knobs.mode == ExecutionMode::kNanobatched && model.nanobatching &&
                           !instr.sequence.empty();
  if (knobs.mode == ExecutionMode::kNanobatched && !model.nanobatching) {
    ThrowInput("mode", "nanobatched",
               "workload " + model.workload.name +
                   " cannot be nanobatched (microbatch_size < 2); use sequential");
  }
  for (const auto& [name, comm] : knobs.partitions) {
    const workload::PartitionType& type = FindPartitionType(model, name);
    // The library default (e.g. 32 NCCL channels on H100) is legal even where the searched
    // choices stop below it: it is what the baselines run.
    const bool library_default = comm.sms == library_sms;
    ValidatePartitionKnobs(gpu, type, {.freq_mhz = knobs.freq_mhz,
                                       .sms = library_default && !type.sm_choices.empty()
                                                  ? type.sm_choices.front()
                                                  : comm.sms,
                                       .slot = comm.slot});
  }
  if (nanobatched) {
    // Each (type, has_collective) pair runs identically every time it occurs (same shapes, same
    // knobs, same clock), so simulate it once and multiply by its count.
    const size_t types = model.partition_types.size();
    std::vector<int> counts(2 * types, 0);
    for (const workload::InstructionModel::Step& step : instr.sequence) {
      KAREUS_CHECK(step.type >= 0 && static_cast<size_t>(step.type) < types);
      ++counts[2 * static_cast<size_t>(step.type) + (step.has_collective ? 1 : 0)];
    }
    for (size_t t = 0; t < types; ++t) {
      const workload::PartitionType& type = model.partition_types[t];
      if (counts[2 * t] == 0 && counts[2 * t + 1] == 0) continue;
      int sms = library_sms;
      std::string slot = type.launch_slots.empty() ? std::string() : type.launch_slots.front();
      if (!type.tunable) {
        sms = type.fixed_sms;
        slot = type.fixed_slot;
      } else if (auto it = knobs.partitions.find(type.name); it != knobs.partitions.end()) {
        sms = it->second.sms;
        slot = it->second.slot;
      }
      sms = std::clamp(sms, 1, physics.sm_count - 1);
      const int launch = slot.empty() ? 0 : std::max(0, type.SlotIndex(slot));
      const CompiledPartition compiled = internal::CompilePartition(physics, type);
      for (int with = 0; with < 2; ++with) {
        const int count = counts[2 * t + static_cast<size_t>(with)];
        if (count == 0) continue;
        Accumulator acc;
        RunCompiled(physics, compiled, with == 1, sms, launch, knobs.freq_mhz, acc);
        AddInto(total, acc.Finish(physics.static_w), count, clock_range);
      }
    }
  } else {
    Accumulator acc;
    std::vector<CompiledKernel> kernels;
    kernels.reserve(instr.sequential_ops.size());
    for (const workload::Op& op : instr.sequential_ops) {
      kernels.push_back(internal::CompileKernel(physics, op));
    }
    internal::RunSequential(physics, kernels, library_sms, Hz(knobs.freq_mhz), acc);
    AddInto(total, acc.Finish(physics.static_w), 1.0, clock_range);
  }
  {
    Accumulator acc;
    std::vector<CompiledKernel> kernels;
    kernels.reserve(instr.non_partition_ops.size());
    for (const workload::Op& op : instr.non_partition_ops) {
      kernels.push_back(internal::CompileKernel(physics, op));
    }
    internal::RunSequential(physics, kernels, library_sms, Hz(knobs.freq_mhz), acc);
    AddInto(total, acc.Finish(physics.static_w), 1.0, clock_range);
  }
  FinishSum(total, clock_range);
  return total;
}

std::vector<SweepPoint> SweepPartition(const hw::GpuSpec& gpu,
                                       const workload::PartitionType& partition,
                                       const SweepOptions& options) {
  const std::vector<int> freqs =
      options.freqs_mhz.empty() ? gpu.clock.ProfileGrid() : options.freqs_mhz;
  const std::vector<int>& sms_list = options.sms.empty() ? partition.sm_choices : options.sms;
  const std::vector<std::string>& slots =
      options.slots.empty() ? partition.launch_slots : options.slots;
  // Validate the whole grid up front: an error names the first bad value with the choices.
  for (int f : freqs) {
    for (int s : sms_list) {
      for (const std::string& slot : slots) {
        ValidatePartitionKnobs(gpu, partition, {.freq_mhz = f, .sms = s, .slot = slot});
      }
    }
  }
  const GpuPhysics physics = internal::MakePhysics(gpu);
  const CompiledPartition compiled = internal::CompilePartition(physics, partition);
  std::vector<int> launch;
  launch.reserve(slots.size());
  for (const std::string& slot : slots) launch.push_back(partition.SlotIndex(slot));
  std::vector<SweepPoint> points;
  points.reserve(freqs.size() * sms_list.size() * slots.size());
  for (int f : freqs) {
    for (int s : sms_list) {
      for (size_t j = 0; j < slots.size(); ++j) {
        Accumulator acc;
        RunCompiled(physics, compiled, true, s, launch[j], f, acc);
        points.push_back(SweepPoint{.knobs = {.freq_mhz = f, .sms = s, .slot = slots[j]},
                                    .result = acc.Finish(physics.static_w)});
      }
    }
  }
  return points;
}

}  // namespace kareus::emulator
