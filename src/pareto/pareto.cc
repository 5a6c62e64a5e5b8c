// SPDX-License-Identifier: Apache-2.0
#include "kareus/pareto/pareto.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kareus/common/error.h"

namespace kareus::pareto {

bool Dominates(const Point& a, const Point& b) {
  return a.time_s <= b.time_s && a.energy_j <= b.energy_j &&
         (a.time_s < b.time_s || a.energy_j < b.energy_j);
}

std::vector<Point> Filter(std::vector<Point> points) {
  // Stable sort by (time, energy): among equal points the first in input order comes first,
  // and a sweep that keeps strictly decreasing energies keeps exactly the non-dominated ones.
  std::stable_sort(points.begin(), points.end(), [](const Point& a, const Point& b) {
    if (a.time_s != b.time_s) return a.time_s < b.time_s;
    return a.energy_j < b.energy_j;
  });
  std::vector<Point> front;
  double best = std::numeric_limits<double>::infinity();
  for (const Point& p : points) {
    if (p.energy_j < best) {
      front.push_back(p);
      best = p.energy_j;
    }
  }
  return front;
}

bool IsFront(const std::vector<Point>& points) {
  for (std::size_t i = 1; i < points.size(); ++i) {
    if (!(points[i - 1].time_s < points[i].time_s && points[i - 1].energy_j > points[i].energy_j)) {
      return false;
    }
  }
  return true;
}

double Hypervolume(const std::vector<Point>& points, const Point& reference) {
  std::vector<Point> inside;
  for (const Point& p : points) {
    if (p.time_s < reference.time_s && p.energy_j < reference.energy_j) inside.push_back(p);
  }
  const std::vector<Point> front = Filter(std::move(inside));
  // Slabs between consecutive times: over [t_i, t_{i+1}) the lowest energy reached is e_i.
  double volume = 0.0;
  for (std::size_t i = 0; i < front.size(); ++i) {
    const double next_t = i + 1 < front.size() ? front[i + 1].time_s : reference.time_s;
    volume += (next_t - front[i].time_s) * (reference.energy_j - front[i].energy_j);
  }
  return volume;
}

double HypervolumeImprovement(const std::vector<Point>& points, const Point& candidate,
                              const Point& reference) {
  std::vector<Point> with = points;
  with.push_back(candidate);
  return std::max(0.0, Hypervolume(with, reference) - Hypervolume(points, reference));
}

std::vector<Point> Thin(const std::vector<Point>& front, double epsilon) {
  if (epsilon <= 0.0 || front.size() <= 2) return front;
  std::vector<Point> kept;
  kept.push_back(front.front());
  for (std::size_t i = 1; i + 1 < front.size(); ++i) {
    // Sorted by time, so the last kept point is faster; it (1+eps)-dominates front[i] when
    // its energy is within the factor.
    if (kept.back().energy_j > front[i].energy_j * (1.0 + epsilon)) kept.push_back(front[i]);
  }
  kept.push_back(front.back());
  return kept;
}

std::optional<OptionError> SumOptions::Validate() const {
  if (!(epsilon >= 0.0) || !std::isfinite(epsilon)) {
    return OptionError{"epsilon", Describe(epsilon), "must be a finite number >= 0"};
  }
  return std::nullopt;
}

SumResult MinPlusSum(const std::vector<Point>& a, const std::vector<Point>& b,
                     const SumOptions& options) {
  ThrowIfInvalid(options.Validate());
  std::vector<Point> all;
  all.reserve(a.size() * b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    for (std::size_t j = 0; j < b.size(); ++j) {
      all.push_back({.time_s = a[i].time_s + b[j].time_s,
                     .energy_j = a[i].energy_j + b[j].energy_j,
                     .payload = static_cast<int64_t>(i * b.size() + j)});
    }
  }
  std::vector<Point> front = Thin(Filter(std::move(all)), options.epsilon);
  SumResult result;
  result.points.reserve(front.size());
  result.sources.reserve(front.size());
  for (const Point& p : front) {
    const auto code = static_cast<std::size_t>(p.payload);
    result.sources.emplace_back(static_cast<int>(code / b.size()),
                                static_cast<int>(code % b.size()));
    result.points.push_back({.time_s = p.time_s,
                             .energy_j = p.energy_j,
                             .payload = static_cast<int64_t>(result.points.size())});
  }
  return result;
}

std::vector<Point> KFoldSum(const std::vector<Point>& a, int count, const SumOptions& options) {
  KAREUS_CHECK(count >= 1) << "KFoldSum needs count >= 1, got " << count;
  std::vector<Point> power = Filter(a);
  std::vector<Point> result;
  bool have_result = false;
  while (count > 0) {
    if (count & 1) {
      result = have_result ? MinPlusSum(result, power, options).points : power;
      have_result = true;
    }
    count >>= 1;
    if (count > 0) power = MinPlusSum(power, power, options).points;
  }
  for (Point& p : result) p.payload = -1;
  return result;
}

std::vector<Point> Union(const std::vector<Point>& a, const std::vector<Point>& b) {
  std::vector<Point> all = a;
  all.insert(all.end(), b.begin(), b.end());
  return Filter(std::move(all));
}

std::vector<std::size_t> LowerConvexHull(const std::vector<Point>& front) {
  // Andrew's monotone chain, lower half: keep only counter-clockwise turns.
  std::vector<std::size_t> hull;
  for (std::size_t i = 0; i < front.size(); ++i) {
    while (hull.size() >= 2) {
      const Point& o = front[hull[hull.size() - 2]];
      const Point& m = front[hull.back()];
      const Point& p = front[i];
      const double cross = (m.time_s - o.time_s) * (p.energy_j - o.energy_j) -
                           (m.energy_j - o.energy_j) * (p.time_s - o.time_s);
      if (cross > 0.0) break;
      hull.pop_back();
    }
    hull.push_back(i);
  }
  return hull;
}

}  // namespace kareus::pareto
