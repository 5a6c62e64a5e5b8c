// SPDX-License-Identifier: Apache-2.0
// From partition measurements to instruction options (DESIGN.md §7): per clock, every
// partition type's front on (time, effective energy), its count in the instruction, the work
// that runs without a collective, and the non-partition work, composed by min-plus sums.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kareus/emulator/emulator.h"
#include "kareus/mobo/profiler.h"
#include "kareus/plan/plan_file.h"
#include "kareus/workload/ops.h"

namespace kareus::methods::internal {

// Measured (or exhaustively simulated) configurations of one partition type.
struct TypeSamples {
  std::string type;
  struct Sample {
    emulator::PartitionKnobs knobs;
    double time_s = 0.0;
    double energy_j = 0.0;  // total, per GPU
  };
  std::vector<Sample> samples;
};

std::vector<TypeSamples> SamplesFromProfile(const workload::WorkloadModel& model,
                                            const mobo::ProfileSummary& profile);
// Every configuration of every type at every clock, noise-free (the kareus-oracle diagnostic).
std::vector<TypeSamples> ExhaustiveSamples(const workload::WorkloadModel& model,
                                           const std::vector<int>& clocks);

// Per clock: the work composition adds besides the tunable partitions, measured like the
// published non-partition profiles (reference/kareus-official.md §1.8).
struct ComposeInputs {
  struct PerClock {
    // (time_s, energy_j) of each stage's fixed work, forward and backward: the non-partition
    // kernels and the partitions that run without a collective (the first and last of a block),
    // measured together once per clock.
    std::vector<std::pair<double, double>> fixed_forward, fixed_backward;
    // Per type, the front on (time, effective energy) of the configurations at this clock.
    std::map<std::string, std::vector<TypeSamples::Sample>> fronts;
  };
  std::map<int, PerClock> clocks;
  double gpu_seconds = 0.0;  // cost of the extra measurements, all GPUs
  int64_t measurements = 0;
};

ComposeInputs MeasureComposeInputs(const workload::WorkloadModel& model,
                                   const std::vector<TypeSamples>& samples,
                                   const std::vector<int>& clocks,
                                   const emulator::MeasurementOptions& measurement, uint64_t seed);

struct ComposedOption {
  double time_s = 0.0;
  double energy_j = 0.0;  // per GPU
  plan::PlannedInstruction knobs;
};

// The instruction's nanobatched options: per clock the min-plus sum of its partition types'
// fronts (each type's point times its count: all occurrences share the type's knobs), plus the
// fixed work, filtered on effective energy; the union over clocks, filtered again. At most
// `max_options` (epsilon-thinned beyond). Clocks missing a tunable type's front are skipped.
std::vector<ComposedOption> ComposeInstruction(const workload::WorkloadModel& model, int stage,
                                               workload::Direction direction,
                                               const ComposeInputs& inputs,
                                               const std::vector<int>& clocks, int max_options);

// Options not dominated on (time, effective energy = E - P_static t), fastest first.
template <typename Option>
std::vector<Option> FilterOptions(std::vector<Option> options, double p_static_w);

}  // namespace kareus::methods::internal

#include "methods/compose_inl.h"
