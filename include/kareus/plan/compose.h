// SPDX-License-Identifier: Apache-2.0
// Instruction options from partition frontiers (DESIGN.md §7; reference/kareus-official.md
// §4.3, without its 1.15 fudge factor): for one (stage, forward|backward) instruction, per
// clock, the min-plus sum of every partition type's frontier scaled by its count (all copies
// of a type share one knob setting, so a type contributes count x one point), plus the
// non-partition work; the union over clocks; plus the sequential execution at every clock.
//
// Filtering is on EFFECTIVE energy E - P_static * t, not on total energy: the pipeline solver
// charges static power for the whole iteration anyway (a blocked GPU draws it too), so an
// option that is slower and costs more total energy can still be the cheaper way to fill a
// non-critical slot; dropping it by total energy would lose frontier points. Conversely an
// option dominated in (t, E - P t) is never useful. Min-plus sums commute with this affine
// transform, so filtering partial sums on effective energy is exact.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/plan/plan_file.h"

namespace kareus::plan {

// One measured (or emulated) configuration of a partition at a fixed clock.
struct PartitionPoint {
  double time_s = 0.0;
  double energy_j = 0.0;  // per GPU
  int sms = 0;            // comm-kernel SMs
  std::string slot;       // launch slot, e.g. "norm_0"
};

// A partition type inside the instruction at one clock.
struct PartitionTypeInput {
  std::string type;                           // e.g. "fwd_attn"
  int count = 1;                              // occurrences per instruction (layers x nanobatches)
  std::vector<PartitionPoint> frontier = {};  // its configurations at this clock (any order)
};

// Everything known about the instruction at one clock.
struct ClockInput {
  int freq_mhz = 0;
  std::vector<PartitionTypeInput> partitions = {};  // nanobatched execution
  double nonpartition_time_s = 0.0;    // embedding / output layer / loss / P2P at this clock
  double nonpartition_energy_j = 0.0;  // per GPU
  bool has_sequential = false;         // the non-nanobatched execution was measured
  double sequential_time_s = 0.0;      // whole instruction, sequential (includes non-partition)
  double sequential_energy_j = 0.0;    // per GPU
};

struct ComposeOptions {
  double p_static_w = 0.0;  // static power per GPU, W (filters on E - P_static * t)
  double epsilon = 0.0;     // epsilon-thinning of partial sums (0 = exact)

  // The first invalid field, its value and the rule; nullopt when valid.
  std::optional<OptionError> Validate() const;
};

// One option of the instruction with the knobs that realize it.
struct InstructionOption {
  double time_s = 0.0;
  double energy_j = 0.0;  // per GPU, total (not effective)
  int freq_mhz = 0;
  ExecutionMode mode = ExecutionMode::kSequential;
  std::vector<PartitionKnobs> partitions = {};  // per type, in input order; empty if sequential
  // The data-parallel gradient reduction this option runs: a chunk's last backward (its
  // buckets during or after it) or a stage's sync tail (sms; `overlapped` unused).
  std::optional<InstructionGradientSync> gradient_sync = std::nullopt;
};

struct ComposeSummary {
  int clocks = 0;
  int candidates = 0;  // options before the final filter (per-clock fronts + sequential)
  int options = 0;     // options kept
};

struct ComposeResult {
  ComposeSummary summary;
  std::vector<InstructionOption> options;  // time ascending, effective energy descending
};

// Throws InputError on malformed input (no clocks, count < 1, empty frontier, negative or
// non-finite values), naming the clock and the partition type.
ComposeResult ComposeInstruction(const std::vector<ClockInput>& clocks,
                                 const ComposeOptions& options);

}  // namespace kareus::plan
