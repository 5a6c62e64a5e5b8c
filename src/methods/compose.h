// SPDX-License-Identifier: Apache-2.0
// The inputs of instruction composition (plan/compose.h) from what Kareus measured: per clock,
// every partition type's configurations (profiled, or exhaustive for the oracle) with the count
// of its occurrences that carry a collective, and the instruction's fixed work (non-partition
// kernels and the partitions without a collective) measured once per clock.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kareus/measure/backend.h"
#include "kareus/mobo/profiler.h"
#include "kareus/pareto/pareto.h"
#include "kareus/plan/compose.h"
#include "kareus/workload/ops.h"

namespace kareus::methods::internal {

// Configurations of one partition type with their (denoised or exact) time and energy.
struct TypeSamples {
  std::string type;
  std::vector<plan::PartitionPoint> points;
  std::vector<int> freq_mhz;  // clock of each point
};

std::vector<TypeSamples> SamplesFromProfile(const mobo::ProfileResult& profile);
// Every configuration of every type at every clock, measured by `backend` (the
// kareus-oracle diagnostic measures through the noise-free twin), one batch per type, in the
// order clocks, then SMs, then slots.
std::vector<TypeSamples> ExhaustiveSamples(const workload::WorkloadModel& model,
                                           const std::vector<int>& clocks,
                                           measure::Backend& backend);

// (time_s, energy_j per GPU) of each (stage, chunk) unit's fixed work per clock and direction:
// the non-partition kernels plus the partitions that run without a collective (the first and
// last of a block), run back to back, measured like the published non-partition profiles
// (reference/kareus-official.md §1.8).
struct FixedWork {
  std::map<int, std::vector<std::pair<double, double>>> forward, backward;  // [clock][unit]
  int64_t measurements = 0;
};
// One backend batch per unit of `units` (indices into model.stages; every clock, both
// directions); an instruction without fixed work, or a unit not listed, reads (0, 0).
FixedWork MeasureFixedWork(const workload::WorkloadModel& model, const std::vector<int>& units,
                           const std::vector<int>& clocks, measure::Backend& backend);

// Composition inputs of one instruction, one per clock at which every tunable type it uses has
// at least one configuration (the others are skipped, as the published composition keeps only
// clocks every partition has). `sequential[f]` is the measured sequential execution.
// `unit` indexes model.stages (a (stage, chunk) unit).
std::vector<plan::ClockInput> ClockInputs(
    const workload::WorkloadModel& model, int unit, schedule::Direction direction,
    const std::vector<TypeSamples>& samples, const FixedWork& fixed, const std::vector<int>& clocks,
    const std::map<int, std::pair<double, double>>& sequential);

// Screened clock sweeps (RunOptions::sweep_anchor_stride): a sweep over the planning clocks
// measures every choice at the anchor clocks (every `stride`-th clock in the given order, and
// the last) and, at a clock between two anchors, only the choices that lay near their clock's
// front (NearFront) at one of the two anchors around it. Nothing is derived: a choice not
// measured at a clock is not offered there. stride 1: every clock is an anchor.
struct SweepScreen {
  std::vector<int> clocks;
  int stride = 1;

  bool IsAnchor(int freq_mhz) const;
  // The anchors before and after `freq_mhz` in `clocks` (both itself for an anchor).
  // KAREUS_CHECKs that the clock is one of `clocks`.
  std::pair<int, int> Neighbours(int freq_mhz) const;
};

// The relative margin of NearFront used by the screened sweeps: twice the emulator's energy
// noise of one reading (1 %; time 0.3 %). Chosen on the ten paper configurations
// (docs/ARCHITECTURE.md §7): 0.01 kept fewer readings but moved an iso-energy column by 0.3
// points, 0.02 and 0.03 by at most 0.06.
inline constexpr double kScreenMargin = 0.02;

// Whether (time_s, effective_energy_j) is near the front of `others` (time, effective energy):
// false when some other point is dominated-up-to-noise better: no worse than `margin`
// (relative) on both axes and better by more than `margin` on at least one.
bool NearFront(double time_s, double effective_energy_j,
               const std::vector<std::pair<double, double>>& others, double margin);

// Options not dominated on (time, effective energy = E - P_static t), fastest first.
template <typename Option>
std::vector<Option> FilterOptions(const std::vector<Option>& options, double p_static_w) {
  std::vector<pareto::Point> points;
  for (size_t i = 0; i < options.size(); ++i) {
    points.push_back({.time_s = options[i].time_s,
                      .energy_j = options[i].energy_j - p_static_w * options[i].time_s,
                      .payload = static_cast<int64_t>(i)});
  }
  std::vector<Option> out;
  for (const auto& p : pareto::Filter(std::move(points))) out.push_back(options[p.payload]);
  return out;
}

}  // namespace kareus::methods::internal
