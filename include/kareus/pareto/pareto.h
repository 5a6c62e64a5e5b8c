// SPDX-License-Identifier: Apache-2.0
// Time-energy points and the 2-D Pareto algebra every later stage builds on: filtering,
// hypervolume (the MOBO acquisition, DESIGN.md §6), min-plus (Minkowski) sums (instruction
// composition, §7) and the lower convex hull (the solver's convex cost model, §7). Both
// objectives are minimized. "energy" may be total or effective (E - P_static * t) energy: the
// algebra does not care, the caller decides which one it filters on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "kareus/common/error.h"

namespace kareus::pareto {

struct Point {
  double time_s = 0.0;
  double energy_j = 0.0;
  int64_t payload = -1;  // caller's index (a configuration, an option); carried, never read
};

// a dominates b: no worse in both objectives and strictly better in one.
bool Dominates(const Point& a, const Point& b);

// The non-dominated subset, sorted by time ascending (so energy strictly descending). Among
// exact duplicates the first one in input order is kept. O(n log n).
std::vector<Point> Filter(std::vector<Point> points);

// True when `points` is already a filtered front (sorted by time, energy strictly descending).
bool IsFront(const std::vector<Point>& points);

// Exact 2-D dominated hypervolume of `points` against `reference` (the area of the region that
// some point dominates and that dominates the reference). Points not better than the reference
// in both objectives add nothing.
double Hypervolume(const std::vector<Point>& points, const Point& reference);

// HV(points + candidate) - HV(points), exact; >= 0.
double HypervolumeImprovement(const std::vector<Point>& points, const Point& candidate,
                              const Point& reference);

// Multiplicative epsilon-thinning of a front: keeps the fastest and the lowest-energy point and
// drops a point whose energy is within a factor (1 + epsilon) of the last kept one, so every
// dropped point is (1 + epsilon)-dominated by a kept one. epsilon <= 0 keeps everything.
// Expects a filtered front; energies must be positive for the bound to mean anything.
std::vector<Point> Thin(const std::vector<Point>& front, double epsilon);

struct SumOptions {
  double epsilon = 0.0;  // epsilon-thinning of the result (see Thin); 0 = exact

  // The first invalid field, its value and the rule; nullopt when valid.
  std::optional<OptionError> Validate() const;
};

// The Pareto-filtered min-plus (Minkowski) sum {a_i + b_j}. sources[k] = (i, j): the indices
// into `a` and `b` whose sum is points[k]; points[k].payload = k.
struct SumResult {
  std::vector<Point> points;
  std::vector<std::pair<int, int>> sources;
};
SumResult MinPlusSum(const std::vector<Point>& a, const std::vector<Point>& b,
                     const SumOptions& options = {});

// The front of the k-fold sum a + a + ... + a (count copies, each chosen independently), by
// repeated doubling with a filter after each sum: exact because the filter commutes with the
// min-plus sum (a dominated partial sum never completes to a non-dominated total). count >= 1.
// Payloads of the result are -1.
std::vector<Point> KFoldSum(const std::vector<Point>& a, int count, const SumOptions& options = {});

// Filter(a ∪ b).
std::vector<Point> Union(const std::vector<Point>& a, const std::vector<Point>& b);

// Indices (into `front`, a filtered front sorted by time) of the vertices of its lower convex
// hull, fastest first: the convex, decreasing piecewise-linear lower envelope of the points.
std::vector<std::size_t> LowerConvexHull(const std::vector<Point>& front);

}  // namespace kareus::pareto
