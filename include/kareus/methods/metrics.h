// SPDX-License-Identifier: Apache-2.0
// The comparison metrics of the published evaluation (reference/kareus-official.md §6.2,
// tests/artifact/compare_method.py), plus the interpolated comparison along a whole frontier.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kareus::methods {

// One iteration of a plan: time = max over ranks, energy = sum over all GPUs.
struct TimeEnergy {
  double time_s = 0.0;
  double energy_j = 0.0;
};

// 100 (ref - x) / ref: positive means x is smaller (faster, or less energy).
double ReductionPercent(double reference, double value);

// P_t: the reference point with the minimum time (ties: lower energy).
TimeEnergy FastestPoint(const std::vector<TimeEnergy>& points);
// P_e: the reference point with the minimum energy (ties: lower time).
TimeEnergy LowestEnergyPoint(const std::vector<TimeEnergy>& points);

// Iso-time energy reduction: 100 (E(P_t) - min{E(x) : x in method, T(x) <= T(P_t) + 1e-9})
// / E(P_t), with P_t the reference's fastest point. No interpolation; nullopt ("--") when no
// point of the method is feasible.
std::optional<double> IsoTimeEnergyReduction(const std::vector<TimeEnergy>& reference,
                                             const std::vector<TimeEnergy>& method);
// Iso-energy time reduction: 100 (T(P_e) - min{T(x) : E(x) <= E(P_e) + 1e-9}) / T(P_e).
std::optional<double> IsoEnergyTimeReduction(const std::vector<TimeEnergy>& reference,
                                             const std::vector<TimeEnergy>& method);

// Energy saving of `method` over `reference` at equal time. Each frontier is the staircase
// "least energy of a plan no slower than t" (what a user gets by picking the best plan that
// meets a deadline t), defined from the frontier's fastest time on; both are sampled on a fine
// grid over the deadlines where both are defined and at least one has a plan of its own:
// [max(fastest times), max(slowest times)] — the deadlines compared. That is not the overlap of
// the two frontiers' time ranges, [max(fastest), min(slowest)]: past a frontier's slowest plan
// its staircase stays at its least energy. `ranges_overlap` says whether that overlap is
// non-empty (false: one method is entirely faster than the other; the comparison then rests on
// the faster one's cheapest plan).
struct InterpolatedSaving {
  bool overlap = false;         // the comparison is defined (false when a frontier is empty)
  bool ranges_overlap = false;  // the two frontiers' time ranges intersect
  double range_begin_s = 0.0;   // the deadlines compared

  double range_end_s = 0.0;
  double mean_percent = 0.0;  // mean of 100 (E_ref(t) - E_m(t)) / E_ref(t)
  double max_percent = 0.0;   // largest saving
  double min_percent = 0.0;   // smallest saving (negative: the method is worse somewhere)
};
InterpolatedSaving CompareAtEqualTime(const std::vector<TimeEnergy>& reference,
                                      const std::vector<TimeEnergy>& method, int samples = 1000);

}  // namespace kareus::methods
