// SPDX-License-Identifier: Apache-2.0
// The GPU emulator: a fluid discrete-event simulation of the time and power of a partition (one
// nanobatch's compute overlapped with the other nanobatch's collective) or of a whole pipeline
// instruction, at a locked SM clock. Physics and calibration: DESIGN.md §5,
// reference/gpu-power-model.md. It is the embedded default backend and the test oracle.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kareus/hw/gpu_spec.h"
#include "kareus/workload/ops.h"

namespace kareus::emulator {

// Knobs of one partition: the locked clock, the comm kernel's SMs and its launch slot.
struct PartitionKnobs {
  int freq_mhz = 0;
  int sms = 0;
  std::string slot;  // a slot name of the partition ("norm_0", ...)
};

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

enum class ExecutionMode { kNanobatched, kSequential };

// Knobs of a whole instruction: one clock, the execution mode, and (nanobatched) the comm
// knobs of every tunable partition type by name. Non-tunable (trailing) partitions use their
// fixed knobs; types missing from `partitions` use the library default (GPU's
// interconnect.library_default_sms, launched at the first slot).
struct InstructionKnobs {
  int freq_mhz = 0;
  ExecutionMode mode = ExecutionMode::kNanobatched;
  struct Comm {
    int sms = 0;
    std::string slot;
  };
  std::map<std::string, Comm> partitions;
};

// Simulates stage `stage`'s forward or backward instruction end to end (its partitions in
// order, or its sequential kernels, plus the non-partition work), the ground truth that
// composition is checked against.
SimResult SimulateInstruction(const workload::WorkloadModel& model, int stage,
                              workload::Direction direction, const InstructionKnobs& knobs);

// Measurement emulation: what a profiler would read on a real GPU under the published protocol
// (clock settle + measurement window + cool-down), with seeded multiplicative noise.
struct MeasurementOptions {
  double time_noise = 0.003;    // relative standard deviation of measured time
  double energy_noise = 0.01;   // relative standard deviation of measured energy
  double counter_period_s = 0.1;  // NVML energy counter update period
  double settle_s = 2.0;        // after locking the clock
  double window_s = 5.0;        // measurement window
  double cooldown_s = 5.0;      // thermal cool-down after the window
  bool noise_free = false;      // oracle path: return the simulation exactly
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

}  // namespace kareus::emulator
