// SPDX-License-Identifier: Apache-2.0
#include "kareus/methods/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kareus/common/error.h"

namespace kareus::methods {

double ReductionPercent(double reference, double value) {
  KAREUS_CHECK(reference != 0.0) << "reduction against a zero reference";
  return 100.0 * (reference - value) / reference;
}

TimeEnergy FastestPoint(const std::vector<TimeEnergy>& points) {
  KAREUS_CHECK(!points.empty());
  return *std::min_element(points.begin(), points.end(), [](const auto& a, const auto& b) {
    return a.time_s != b.time_s ? a.time_s < b.time_s : a.energy_j < b.energy_j;
  });
}

TimeEnergy LowestEnergyPoint(const std::vector<TimeEnergy>& points) {
  KAREUS_CHECK(!points.empty());
  return *std::min_element(points.begin(), points.end(), [](const auto& a, const auto& b) {
    return a.energy_j != b.energy_j ? a.energy_j < b.energy_j : a.time_s < b.time_s;
  });
}

// The 1e-9 slack is the published one (compare_method.py).
constexpr double kFeasibilitySlack = 1e-9;

std::optional<double> IsoTimeEnergyReduction(const std::vector<TimeEnergy>& reference,
                                             const std::vector<TimeEnergy>& method) {
  if (reference.empty() || method.empty()) return std::nullopt;
  const TimeEnergy p_t = FastestPoint(reference);
  double best = std::numeric_limits<double>::infinity();
  for (const auto& x : method) {
    if (x.time_s <= p_t.time_s + kFeasibilitySlack) best = std::min(best, x.energy_j);
  }
  if (!std::isfinite(best)) return std::nullopt;
  return ReductionPercent(p_t.energy_j, best);
}

std::optional<double> IsoEnergyTimeReduction(const std::vector<TimeEnergy>& reference,
                                             const std::vector<TimeEnergy>& method) {
  if (reference.empty() || method.empty()) return std::nullopt;
  const TimeEnergy p_e = LowestEnergyPoint(reference);
  double best = std::numeric_limits<double>::infinity();
  for (const auto& x : method) {
    if (x.energy_j <= p_e.energy_j + kFeasibilitySlack) best = std::min(best, x.time_s);
  }
  if (!std::isfinite(best)) return std::nullopt;
  return ReductionPercent(p_e.time_s, best);
}

namespace {

// Least energy of a point whose time is <= t (infinity when none).
double StaircaseEnergy(const std::vector<TimeEnergy>& points, double t) {
  double best = std::numeric_limits<double>::infinity();
  for (const auto& p : points) {
    if (p.time_s <= t + kFeasibilitySlack) best = std::min(best, p.energy_j);
  }
  return best;
}

std::pair<double, double> TimeRange(const std::vector<TimeEnergy>& points) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& p : points) {
    lo = std::min(lo, p.time_s);
    hi = std::max(hi, p.time_s);
  }
  return {lo, hi};
}

}  // namespace

InterpolatedSaving CompareAtEqualTime(const std::vector<TimeEnergy>& reference,
                                      const std::vector<TimeEnergy>& method, int samples) {
  InterpolatedSaving out;
  if (reference.empty() || method.empty()) return out;
  const auto [ref_lo, ref_hi] = TimeRange(reference);
  const auto [m_lo, m_hi] = TimeRange(method);
  out.range_begin_s = std::max(ref_lo, m_lo);
  out.range_end_s = std::max(ref_hi, m_hi);
  out.ranges_overlap = out.range_begin_s <= std::min(ref_hi, m_hi);
  if (out.range_begin_s > out.range_end_s) return out;
  out.overlap = true;
  out.max_percent = -std::numeric_limits<double>::infinity();
  out.min_percent = std::numeric_limits<double>::infinity();
  const int n = std::max(samples, 2);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) {
    const double t =
        out.range_begin_s + (out.range_end_s - out.range_begin_s) * double(i) / double(n - 1);
    const double saving =
        ReductionPercent(StaircaseEnergy(reference, t), StaircaseEnergy(method, t));
    sum += saving;
    out.max_percent = std::max(out.max_percent, saving);
    out.min_percent = std::min(out.min_percent, saving);
  }
  out.mean_percent = sum / n;
  return out;
}

}  // namespace kareus::methods
