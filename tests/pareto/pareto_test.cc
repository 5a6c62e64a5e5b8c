// SPDX-License-Identifier: Apache-2.0
#include "kareus/pareto/pareto.h"

#include <algorithm>
#include <random>

#include <gtest/gtest.h>

namespace kareus::pareto {
namespace {

std::vector<Point> RandomPoints(std::mt19937_64& rng, int n, int grid) {
  std::uniform_int_distribution<int> coord(0, grid);
  std::vector<Point> points;
  for (int i = 0; i < n; ++i) {
    points.push_back({.time_s = static_cast<double>(coord(rng)),
                      .energy_j = static_cast<double>(coord(rng)),
                      .payload = i});
  }
  return points;
}

// O(n^2) reference filter.
std::vector<Point> BruteFilter(const std::vector<Point>& points) {
  std::vector<Point> kept;
  for (std::size_t i = 0; i < points.size(); ++i) {
    bool dominated = false;
    for (std::size_t j = 0; j < points.size() && !dominated; ++j) {
      dominated =
          Dominates(points[j], points[i]) || (j < i && points[j].time_s == points[i].time_s &&
                                              points[j].energy_j == points[i].energy_j);
    }
    if (!dominated) kept.push_back(points[i]);
  }
  std::sort(kept.begin(), kept.end(),
            [](const Point& a, const Point& b) { return a.time_s < b.time_s; });
  return kept;
}

void ExpectSameFront(const std::vector<Point>& a, const std::vector<Point>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_DOUBLE_EQ(a[i].time_s, b[i].time_s);
    EXPECT_DOUBLE_EQ(a[i].energy_j, b[i].energy_j);
  }
}

TEST(Pareto, FilterMatchesBruteForceAndIsIdempotent) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    const auto points = RandomPoints(rng, 1 + trial % 40, 15);
    const auto front = Filter(points);
    ExpectSameFront(front, BruteFilter(points));
    EXPECT_TRUE(IsFront(front));
    ExpectSameFront(Filter(front), front);
    for (const Point& p : points) {
      for (const Point& q : front) EXPECT_FALSE(Dominates(p, q));
    }
  }
}

TEST(Pareto, HypervolumeMatchesGridCount) {
  // Integer coordinates: the dominated region is a union of unit cells, counted exactly.
  std::mt19937_64 rng(2);
  const int grid = 20;
  const Point reference{.time_s = grid + 1.0, .energy_j = grid + 1.0};
  for (int trial = 0; trial < 100; ++trial) {
    const auto points = RandomPoints(rng, 1 + trial % 12, grid);
    int cells = 0;
    for (int x = 0; x <= grid; ++x) {
      for (int y = 0; y <= grid; ++y) {
        cells += std::any_of(points.begin(), points.end(),
                             [&](const Point& p) { return p.time_s <= x && p.energy_j <= y; });
      }
    }
    EXPECT_DOUBLE_EQ(Hypervolume(points, reference), cells);
  }
}

TEST(Pareto, HypervolumeMonotoneAndImprovementConsistent) {
  std::mt19937_64 rng(3);
  const Point reference{.time_s = 30.0, .energy_j = 30.0};
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<Point> set;
    double previous = 0.0;
    for (const Point& p : RandomPoints(rng, 15, 25)) {
      const double improvement = HypervolumeImprovement(set, p, reference);
      set.push_back(p);
      const double now = Hypervolume(set, reference);
      EXPECT_GE(now, previous);
      EXPECT_NEAR(now - previous, improvement, 1e-9);
      previous = now;
    }
  }
}

TEST(Pareto, MinPlusSumEqualsEnumerationThenFilter) {
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 200; ++trial) {
    const auto a = Filter(RandomPoints(rng, 1 + trial % 9, 30));
    const auto b = Filter(RandomPoints(rng, 1 + trial % 7, 30));
    std::vector<Point> all;
    for (const Point& p : a) {
      for (const Point& q : b) all.push_back({p.time_s + q.time_s, p.energy_j + q.energy_j});
    }
    const SumResult sum = MinPlusSum(a, b);
    ExpectSameFront(sum.points, BruteFilter(all));
    for (std::size_t k = 0; k < sum.points.size(); ++k) {
      const auto [i, j] = sum.sources[k];
      EXPECT_DOUBLE_EQ(sum.points[k].time_s, a[i].time_s + b[j].time_s);
      EXPECT_DOUBLE_EQ(sum.points[k].energy_j, a[i].energy_j + b[j].energy_j);
    }
  }
}

TEST(Pareto, KFoldSumEqualsEnumeration) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    const auto a = RandomPoints(rng, 1 + trial % 5, 20);
    const int count = 1 + trial % 4;
    // Enumerate every choice of `count` points (with repetition).
    std::vector<Point> all{{0.0, 0.0}};
    for (int c = 0; c < count; ++c) {
      std::vector<Point> next;
      for (const Point& p : all) {
        for (const Point& q : a) next.push_back({p.time_s + q.time_s, p.energy_j + q.energy_j});
      }
      all = std::move(next);
    }
    ExpectSameFront(KFoldSum(a, count), BruteFilter(all));
  }
}

TEST(Pareto, ThinningBoundsTheLoss) {
  std::mt19937_64 rng(6);
  for (int trial = 0; trial < 50; ++trial) {
    auto points = RandomPoints(rng, 60, 1000);
    for (Point& p : points) p.energy_j += 1.0;  // positive energies
    const auto front = Filter(points);
    const double epsilon = 0.05;
    const auto thin = Thin(front, epsilon);
    EXPECT_LE(thin.size(), front.size());
    EXPECT_DOUBLE_EQ(thin.front().time_s, front.front().time_s);
    EXPECT_DOUBLE_EQ(thin.back().energy_j, front.back().energy_j);
    for (const Point& p : front) {
      EXPECT_TRUE(std::any_of(thin.begin(), thin.end(), [&](const Point& q) {
        return q.time_s <= p.time_s && q.energy_j <= p.energy_j * (1 + epsilon) + 1e-12;
      }));
    }
  }
}

TEST(Pareto, UnionIsCommutativeAndContainsBoth) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 100; ++trial) {
    const auto a = RandomPoints(rng, 10, 20);
    const auto b = RandomPoints(rng, 10, 20);
    const auto ab = Union(a, b);
    ExpectSameFront(ab, Union(b, a));
    for (const Point& p : a) {
      EXPECT_TRUE(std::any_of(ab.begin(), ab.end(), [&](const Point& q) {
        return q.time_s <= p.time_s && q.energy_j <= p.energy_j;
      }));
    }
  }
}

TEST(Pareto, LowerConvexHullIsConvexAndBelowEveryPoint) {
  std::mt19937_64 rng(8);
  for (int trial = 0; trial < 100; ++trial) {
    const auto front = Filter(RandomPoints(rng, 25, 100));
    const auto hull = LowerConvexHull(front);
    ASSERT_FALSE(hull.empty());
    EXPECT_EQ(hull.front(), 0u);
    EXPECT_EQ(hull.back(), front.size() - 1);
    for (std::size_t k = 2; k < hull.size(); ++k) {
      const Point& o = front[hull[k - 2]];
      const Point& m = front[hull[k - 1]];
      const Point& p = front[hull[k]];
      const double slope1 = (m.energy_j - o.energy_j) / (m.time_s - o.time_s);
      const double slope2 = (p.energy_j - m.energy_j) / (p.time_s - m.time_s);
      EXPECT_LT(slope1, slope2);  // strictly convex
    }
    for (const Point& p : front) {  // every point on or above the envelope
      for (std::size_t k = 1; k < hull.size(); ++k) {
        const Point& l = front[hull[k - 1]];
        const Point& r = front[hull[k]];
        if (p.time_s < l.time_s || p.time_s > r.time_s) continue;
        const double envelope =
            l.energy_j + (r.energy_j - l.energy_j) * (p.time_s - l.time_s) / (r.time_s - l.time_s);
        EXPECT_GE(p.energy_j, envelope - 1e-9);
      }
    }
  }
}

}  // namespace
}  // namespace kareus::pareto
