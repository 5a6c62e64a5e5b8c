// SPDX-License-Identifier: Apache-2.0
// The GPU emulator: a fluid discrete-event simulation of the time and power of a partition (one
// nanobatch's compute overlapped with the other nanobatch's collective) or of a whole pipeline
// instruction, at a locked SM clock. Physics and calibration: DESIGN.md §5,
// reference/gpu-power-model.md. It is the embedded default backend and the test oracle.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/common/json.h"
#include "kareus/hw/gpu_spec.h"
#include "kareus/knobs/knobs.h"
#include "kareus/schedule/schedule.h"
#include "kareus/workload/ops.h"
#include "kareus/workload/workload.h"

namespace kareus::emulator {

// The version of the emulator's physics: part of the emulator backend's description, so a
// measurement store written under other physics (another calibration) is refused rather than
// mixed with new readings. Bump it whenever a change moves what a configuration reads.
//   1: the first calibration (published figures); 2: calibrated on real GPU measurements
//   (data/validation), launch gaps, one continuous simulation per instruction.
inline constexpr int kPhysicsVersion = 2;

// The emulator speaks the backend-neutral knob types (kareus/knobs/knobs.h).
using knobs::InstructionKnobs;
using knobs::PartitionKnobs;
using schedule::ExecutionMode;

// Noise-free result of one simulated execution, per GPU.
struct SimResult {
  double time_s = 0.0;
  double energy_j = 0.0;
  double static_energy_j = 0.0;   // P_static x time_s
  double dynamic_energy_j = 0.0;  // energy_j - static_energy_j
  double avg_power_w = 0.0;
  double effective_freq_mhz = 0.0;  // time-weighted realized clock (power cap may lower it)
  double compute_busy_s = 0.0;      // time the compute stream had a kernel running
  double comm_busy_s = 0.0;         // time the comm stream had a kernel running
  double overlap_s = 0.0;           // time both ran at once
};

// Simulates one partition type with its knobs. Validates the knobs against the partition and
// the GPU (InputError listing the valid choices for an unknown slot, SMs outside the choices,
// a clock off the grid).
SimResult SimulatePartition(const hw::GpuSpec& gpu, const workload::PartitionType& partition,
                            const PartitionKnobs& knobs);

// Simulates kernels one after another on the whole GPU (collectives with `collective_sms`),
// no overlap: the sequential (Megatron-style) execution and the non-partition work.
SimResult SimulateSequential(const hw::GpuSpec& gpu, const std::vector<workload::Op>& ops,
                             int freq_mhz, int collective_sms);

// Simulates stage `stage`'s forward or backward instruction end to end (its partitions in
// order, or its sequential kernels, plus the non-partition work), the ground truth that
// composition is checked against.
SimResult SimulateInstruction(const workload::WorkloadModel& model, int stage,
                              schedule::Direction direction, const InstructionKnobs& knobs);
// The same for model chunk `chunk` of the stage (interleaved 1F1B); the overload above is chunk 0.
SimResult SimulateInstruction(const workload::WorkloadModel& model, int stage, int chunk,
                              schedule::Direction direction, const InstructionKnobs& knobs);

// Measurement emulation: what a profiler would read on a real GPU under the published protocol
// (clock settle + measurement window + cool-down), with seeded multiplicative noise.
struct MeasurementOptions {
  double time_noise = 0.003;      // relative standard deviation of measured time
  double energy_noise = 0.01;     // relative standard deviation of measured energy
  double counter_period_s = 0.1;  // NVML energy counter update period
  double settle_s = 2.0;          // after locking the clock
  double window_s = 5.0;          // measurement window
  double cooldown_s = 5.0;        // thermal cool-down after the window
  bool noise_free = false;        // oracle path: return the simulation exactly

  // The first invalid field, its value and the rule; nullopt when every field is usable.
  std::optional<OptionError> Validate() const;
};

struct Measurement {
  SimResult value;           // measured (noisy unless noise_free)
  double gpu_seconds = 0.0;  // cost of taking it on one GPU: settle + window + cool-down
  bool noise_free = false;
};

// Deterministic given (seed, key): the same configuration measured with the same seed reads
// the same value, whatever else was measured before (resumable profiling depends on it).
Measurement Measure(const SimResult& truth, const MeasurementOptions& options, uint64_t seed,
                    uint64_t key);

// One kernel alone on `sms` SMs at a locked clock (a collective: with `sms` comm SMs, nothing
// else running). The building block the physics tests and calibration check.
SimResult SimulateKernel(const hw::GpuSpec& gpu, const workload::Op& op, int sms, int freq_mhz);

// Throws InputError (field, value, and the valid choices) unless the knobs are legal for the
// partition on this GPU: the clock on the GPU's supported grid, the SMs one of the partition's
// sm_choices (a non-tunable partition also accepts its fixed_sms), the slot one of its slots.
void ValidatePartitionKnobs(const hw::GpuSpec& gpu, const workload::PartitionType& partition,
                            const PartitionKnobs& knobs);

// The partition type called `name`; InputError listing the names when there is none.
const workload::PartitionType& FindPartitionType(const workload::WorkloadModel& model,
                                                 const std::string& name);

// The knobs the published runtime uses when no schedule is loaded (the Nanobatching baseline):
// library-default comm SMs, launched at the partition's first launch slot, for every tunable
// type; or sequential execution.
InstructionKnobs DefaultInstructionKnobs(const workload::WorkloadModel& model, int freq_mhz,
                                         ExecutionMode mode);

// {time_s, energy_j, static_energy_j, dynamic_energy_j, avg_power_w, effective_freq_mhz,
// compute_busy_s, comm_busy_s, overlap_s}: the `kareus simulate --json` fields.
Json ToJson(const SimResult& result);

// One point of an exhaustive sweep.
struct SweepPoint {
  PartitionKnobs knobs;
  SimResult result;
};

struct SweepOptions {
  std::vector<int> freqs_mhz = {};      // clocks to sweep; empty: the GPU's profile grid
  std::vector<int> sms = {};            // comm SM counts; empty: the partition's sm_choices
  std::vector<std::string> slots = {};  // launch slots; empty: the partition's launch_slots

  // The first invalid entry (a clock <= 0, an SM count < 0, an empty slot name, or a value
  // listed twice), its value and the rule; nullopt when valid. Whether the values exist on the
  // GPU and the partition is checked by SweepPartition.
  std::optional<OptionError> Validate() const;
};

// Every (clock, SMs, slot) of the grid, noise-free, clocks outer, then SMs, then slots (the
// order of the published encoding). Per-op constants are compiled once for the whole sweep.
std::vector<SweepPoint> SweepPartition(const hw::GpuSpec& gpu,
                                       const workload::PartitionType& partition,
                                       const SweepOptions& options = {});

}  // namespace kareus::emulator
