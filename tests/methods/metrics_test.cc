// SPDX-License-Identifier: Apache-2.0
#include "kareus/methods/metrics.h"

#include <gtest/gtest.h>

namespace kareus::methods {
namespace {

TEST(IsoMetrics, PublishedDefinitionWithoutInterpolation) {
  const std::vector<TimeEnergy> perseus = {{5.0, 2800}, {5.5, 2600}, {6.5, 2400}};
  const std::vector<TimeEnergy> method = {{4.5, 2750}, {4.9, 2500}, {6.0, 2300}};
  // Best method energy at T <= 5.0 is 2500: (2800 - 2500) / 2800.
  EXPECT_NEAR(*IsoTimeEnergyReduction(perseus, method), 100.0 * 300 / 2800, 1e-12);
  // Fastest method point with E <= 2400 is 6.0 s: (6.5 - 6.0) / 6.5.
  EXPECT_NEAR(*IsoEnergyTimeReduction(perseus, method), 100.0 * 0.5 / 6.5, 1e-12);
  // No feasible point: "--".
  EXPECT_FALSE(IsoTimeEnergyReduction(perseus, {{5.1, 100}}).has_value());
  EXPECT_FALSE(IsoEnergyTimeReduction(perseus, {{1.0, 2401}}).has_value());
  // Against itself: zero.
  EXPECT_NEAR(*IsoTimeEnergyReduction(perseus, perseus), 0.0, 1e-12);
  EXPECT_NEAR(*IsoEnergyTimeReduction(perseus, perseus), 0.0, 1e-12);
}

TEST(CompareAtEqualTime, StaircaseOverTheCommonRange) {
  const std::vector<TimeEnergy> ref = {{1.0, 100}, {2.0, 80}};
  const std::vector<TimeEnergy> better = {{1.0, 90}, {2.0, 72}};
  const auto s = CompareAtEqualTime(ref, better);
  ASSERT_TRUE(s.overlap);
  EXPECT_DOUBLE_EQ(s.range_begin_s, 1.0);
  EXPECT_DOUBLE_EQ(s.range_end_s, 2.0);
  EXPECT_NEAR(s.min_percent, 10.0, 1e-9);
  EXPECT_NEAR(s.max_percent, 10.0, 1e-9);
  EXPECT_NEAR(s.mean_percent, 10.0, 1e-9);
  const auto self = CompareAtEqualTime(ref, ref);
  EXPECT_NEAR(self.max_percent, 0.0, 1e-12);
  // A method that is entirely slower is compared from its fastest time on.
  const auto slower = CompareAtEqualTime(ref, {{3.0, 40}});
  ASSERT_TRUE(slower.overlap);
  EXPECT_DOUBLE_EQ(slower.range_begin_s, 3.0);
  EXPECT_NEAR(slower.mean_percent, 50.0, 1e-9);
  // A method that ends faster than the reference starts keeps its least energy.
  const auto faster = CompareAtEqualTime(ref, {{0.5, 95}, {0.8, 90}});
  EXPECT_DOUBLE_EQ(faster.range_begin_s, 1.0);
  EXPECT_DOUBLE_EQ(faster.range_end_s, 2.0);
  EXPECT_NEAR(faster.max_percent, 10.0, 1e-9);
  EXPECT_NEAR(faster.min_percent, -12.5, 1e-9);
}

}  // namespace
}  // namespace kareus::methods
