// SPDX-License-Identifier: Apache-2.0
// The knobs a planner sets and what one measurement reads: backend-neutral, below the emulator
// and every measurement backend (the emulator, a real GPU, a test double), which all speak
// them; nothing here depends on how a value was obtained. measure/ re-exports them
// (kareus/measure/types.h) under its own namespace.
#pragma once

#include <map>
#include <string>

#include "kareus/schedule/schedule.h"

namespace kareus::knobs {

// Knobs of one partition execution: the locked clock, the comm kernel's SMs (thread blocks)
// and its launch slot (the collective starts with this compute op, e.g. "norm_0").
struct PartitionKnobs {
  int freq_mhz = 0;
  int sms = 0;
  std::string slot;
  bool operator==(const PartitionKnobs&) const = default;
};

// The comm knobs of one partition type inside an instruction (every layer and both nanobatches
// of that instruction share them, as in the published runtime).
struct CommKnobs {
  int sms = 0;
  std::string slot;
  bool operator==(const CommKnobs&) const = default;
};

// Knobs of a whole instruction: one clock, the execution mode, and (nanobatched) the comm knobs
// of every tunable partition type by name. Non-tunable (trailing) partitions use their fixed
// knobs; a type missing from `partitions` runs with the library default (the GPU's
// interconnect.library_default_sms, launched at the partition's first slot).
struct InstructionKnobs {
  int freq_mhz = 0;
  schedule::ExecutionMode mode = schedule::ExecutionMode::kNanobatched;
  std::map<std::string, CommKnobs> partitions;
  bool operator==(const InstructionKnobs&) const = default;
};

// One measured execution, per GPU (published: energy is the per-GPU mean over the ranks of the
// group, time the max; reference/kareus-official.md §3.1).
struct Sample {
  double time_s = 0.0;
  double energy_j = 0.0;           // total
  double static_energy_j = 0.0;    // P_static x time_s
  double dynamic_energy_j = 0.0;   // energy_j - static_energy_j ("effective" energy)
  double realized_freq_mhz = 0.0;  // time-weighted clock actually sustained
  double seconds = 0.0;            // wall time the measurement occupied its GPUs (clock
                                   // settle + window + cool-down), per GPU
  int gpus = 1;                    // GPUs the measurement occupied (its collective's group)
  bool noise_free = false;         // exact (oracle) value rather than a noisy reading

  // The cost of taking it: seconds of measurement x GPUs of the group.
  double GpuSeconds() const { return seconds * gpus; }
};

}  // namespace kareus::knobs
