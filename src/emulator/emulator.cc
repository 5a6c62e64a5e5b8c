// SPDX-License-Identifier: Apache-2.0
#include "kareus/emulator/emulator.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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
               "not a supported clock of " + gpu.name +
                   "; valid: " + std::to_string(gpu.clock.max_mhz) + " down to " +
                   std::to_string(gpu.clock.min_mhz) + " MHz in steps of " +
                   std::to_string(gpu.clock.step_mhz) +
                   " (profile grid: " + JoinList(gpu.clock.ProfileGrid()) + ")");
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

// Simulates one compiled partition as the profiler measures it (run back to back in a loop);
// `with_collective` false runs the compute ops alone (the occurrences that have no collective).
void RunCompiled(const GpuPhysics& physics, const CompiledPartition& compiled, bool with_collective,
                 int sms, int launch_index, int freq_mhz, internal::Program& program,
                 Accumulator& acc) {
  program.Clear();
  internal::AppendPartition(program, compiled, with_collective, sms, launch_index);
  internal::RunProgram(physics, program, Hz(freq_mhz), internal::HostStart::kSteadyState, acc);
}

std::vector<CompiledKernel> CompileOps(const GpuPhysics& physics,
                                       const std::vector<workload::Op>& ops) {
  std::vector<CompiledKernel> kernels;
  kernels.reserve(ops.size());
  for (const workload::Op& op : ops) kernels.push_back(internal::CompileKernel(physics, op));
  return kernels;
}

// The work outside the transformer block, in launch order around it: the first stage's
// embedding runs before the block in the forward pass and after it in the backward pass; the
// last stage's final norm, output layer and loss after the block forward, before it backward
// (Megatron's pre- and post-process; kareus-official.md §1.7).
void SplitNonPartition(const std::vector<CompiledKernel>& kernels,
                       const std::vector<workload::Op>& ops, schedule::Direction direction,
                       std::vector<CompiledKernel>& before, std::vector<CompiledKernel>& after) {
  for (size_t i = 0; i < ops.size(); ++i) {
    (workload::RunsBeforeBlock(ops[i], direction) ? before : after).push_back(kernels[i]);
  }
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
               "not an SM choice of partition " + partition.name +
                   "; valid: " + JoinList(partition.sm_choices));
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
  internal::Program program;
  Accumulator acc;
  RunCompiled(physics, compiled, true, knobs.sms, partition.SlotIndex(knobs.slot), knobs.freq_mhz,
              program, acc);
  return acc.Finish(physics.static_w);
}

SimResult SimulateSequential(const hw::GpuSpec& gpu, const std::vector<workload::Op>& ops,
                             int freq_mhz, int collective_sms) {
  ValidateClock(gpu, freq_mhz);
  ValidateCommSms(gpu, collective_sms, "collective_sms");
  const GpuPhysics physics = internal::MakePhysics(gpu);
  const std::vector<CompiledKernel> kernels = CompileOps(physics, ops);
  internal::Program program;
  internal::AppendSequential(program, kernels, collective_sms);
  Accumulator acc;
  internal::RunProgram(physics, program, Hz(freq_mhz), internal::HostStart::kSteadyState, acc);
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
  const double f =
      kernel.collective
          ? internal::RealizedClockHz(physics, nullptr, 0, &kernel, sms, Hz(freq_mhz), &st)
          : internal::RealizedClockHz(physics, &kernel, sms, nullptr, 0, Hz(freq_mhz), &st);
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
    knobs.partitions[type.name] = knobs::CommKnobs{
        .sms = model.workload.gpu.interconnect.library_default_sms,
        .slot = type.launch_slots.empty() ? std::string() : type.launch_slots.front()};
  }
  return knobs;
}

SimResult SimulateInstruction(const workload::WorkloadModel& model, int stage,
                              schedule::Direction direction, const InstructionKnobs& knobs) {
  return SimulateInstruction(model, stage, 0, direction, knobs);
}

SimResult SimulateInstruction(const workload::WorkloadModel& model, int stage, int chunk,
                              schedule::Direction direction, const InstructionKnobs& knobs) {
  const hw::GpuSpec& gpu = model.workload.gpu;
  if (stage < 0 || stage >= model.num_stages) {
    ThrowInput("stage", std::to_string(stage), "valid 0.." + std::to_string(model.num_stages - 1));
  }
  if (chunk < 0 || chunk >= model.num_chunks) {
    ThrowInput("chunk", std::to_string(chunk), "valid 0.." + std::to_string(model.num_chunks - 1));
  }
  ValidateClock(gpu, knobs.freq_mhz);
  const GpuPhysics physics = internal::MakePhysics(gpu);
  const workload::StageModel& stage_model = model.Unit(stage, chunk);
  const workload::InstructionModel& instr =
      direction == schedule::Direction::kForward ? stage_model.forward : stage_model.backward;
  const int library_sms = std::clamp(physics.library_default_sms, 1, physics.sm_count - 1);
  const bool nanobatched =
      knobs.mode == ExecutionMode::kNanobatched && model.nanobatching && !instr.sequence.empty();
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
    ValidatePartitionKnobs(
        gpu, type,
        {.freq_mhz = knobs.freq_mhz,
         .sms = library_default && !type.sm_choices.empty() ? type.sm_choices.front() : comm.sms,
         .slot = comm.slot});
  }
  // One continuous simulation of the whole instruction (DESIGN.md §5): the work before the
  // block, then every partition occurrence in execution order (NB0 and NB1 of each segment,
  // each with its collective and its join) or the block's kernels one after another, then the
  // work after it, all on the same two streams with the host launching ahead from the device
  // synchronisation that starts an instruction.
  std::vector<CompiledKernel> before, after;
  const std::vector<CompiledKernel> non_partition = CompileOps(physics, instr.non_partition_ops);
  SplitNonPartition(non_partition, instr.non_partition_ops, direction, before, after);
  internal::Program program;
  internal::AppendSequential(program, before, library_sms);
  std::vector<CompiledKernel> sequential;
  std::vector<CompiledPartition> compiled;
  if (nanobatched) {
    compiled.reserve(model.partition_types.size());
    std::vector<int> sms(model.partition_types.size(), library_sms);
    std::vector<int> launch(model.partition_types.size(), 0);
    for (size_t t = 0; t < model.partition_types.size(); ++t) {
      const workload::PartitionType& type = model.partition_types[t];
      compiled.push_back(internal::CompilePartition(physics, type));
      std::string slot = type.launch_slots.empty() ? std::string() : type.launch_slots.front();
      if (!type.tunable) {
        sms[t] = type.fixed_sms;
        slot = type.fixed_slot;
      } else if (auto it = knobs.partitions.find(type.name); it != knobs.partitions.end()) {
        sms[t] = it->second.sms;
        slot = it->second.slot;
      }
      sms[t] = std::clamp(sms[t], 1, physics.sm_count - 1);
      launch[t] = slot.empty() ? 0 : std::max(0, type.SlotIndex(slot));
    }
    for (const workload::InstructionModel::Step& step : instr.sequence) {
      KAREUS_CHECK(step.type >= 0 && static_cast<size_t>(step.type) < compiled.size());
      const size_t t = static_cast<size_t>(step.type);
      internal::AppendPartition(program, compiled[t], step.has_collective, sms[t], launch[t]);
    }
  } else {
    sequential = CompileOps(physics, instr.sequential_ops);
    internal::AppendSequential(program, sequential, library_sms);
  }
  internal::AppendSequential(program, after, library_sms);
  Accumulator acc;
  internal::RunProgram(physics, program, Hz(knobs.freq_mhz), internal::HostStart::kAfterSync, acc);
  return acc.Finish(physics.static_w);
}

namespace {

// The first entry of `values` that breaks `valid` or repeats an earlier one.
template <typename T, typename Valid>
std::optional<OptionError> CheckList(const std::string& field, const std::vector<T>& values,
                                     Valid valid, const std::string& rule) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::string name = field + "[" + std::to_string(i) + "]";
    if (!valid(values[i])) return OptionError{name, Describe(values[i]), rule};
    if (std::find(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(i), values[i]) !=
        values.begin() + static_cast<std::ptrdiff_t>(i)) {
      return OptionError{name, Describe(values[i]), "is listed twice"};
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<OptionError> SweepOptions::Validate() const {
  if (auto error = CheckList(
          "freqs_mhz", freqs_mhz, [](int f) { return f > 0; }, "must be a clock > 0 MHz")) {
    return error;
  }
  if (auto error = CheckList(
          "sms", sms, [](int s) { return s >= 0; }, "must be an SM count >= 0")) {
    return error;
  }
  return CheckList(
      "slots", slots, [](const std::string& s) { return !s.empty(); },
      "must name a launch slot (not empty)");
}

std::vector<SweepPoint> SweepPartition(const hw::GpuSpec& gpu,
                                       const workload::PartitionType& partition,
                                       const SweepOptions& options) {
  ThrowIfInvalid(options.Validate());
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
  internal::Program program;
  for (int f : freqs) {
    for (int s : sms_list) {
      for (size_t j = 0; j < slots.size(); ++j) {
        Accumulator acc;
        RunCompiled(physics, compiled, true, s, launch[j], f, program, acc);
        points.push_back(SweepPoint{.knobs = {.freq_mhz = f, .sms = s, .slot = slots[j]},
                                    .result = acc.Finish(physics.static_w)});
      }
    }
  }
  return points;
}

}  // namespace kareus::emulator
