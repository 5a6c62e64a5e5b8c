// SPDX-License-Identifier: Apache-2.0
// The pieces of the method flow (src/methods/flow*.cc) that stand alone: the cost kinds and
// phases with the names the outputs use.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "kareus/methods/run.h"

namespace kareus::methods {
namespace {

TEST(CostKind, NamesAreTheOutputKeys) {
  EXPECT_STREQ(ToString(CostKind::kPartitionsProfiled), "partitions_profiled");
  EXPECT_STREQ(ToString(CostKind::kPartitionsExhaustive), "partitions_exhaustive");
  EXPECT_STREQ(ToString(CostKind::kFixedWork), "fixed_work");
  EXPECT_STREQ(ToString(CostKind::kInstructions), "instructions");
  EXPECT_STREQ(ToString(CostKind::kGradientSync), "gradient_sync");
  std::set<std::string> names;
  for (CostKind kind : kCostKinds) names.insert(ToString(kind));
  EXPECT_EQ(names.size(), kCostKinds.size());
}

TEST(Phase, NamesAreTheOutputKeys) {
  EXPECT_STREQ(ToString(Phase::kProfile), "profile");
  EXPECT_STREQ(ToString(Phase::kCompose), "compose");
  EXPECT_STREQ(ToString(Phase::kSolve), "solve");
  EXPECT_STREQ(ToString(Phase::kEvaluate), "evaluate");
  std::set<std::string> names;
  for (Phase phase : kPhases) names.insert(ToString(phase));
  EXPECT_EQ(names.size(), kPhases.size());
}

}  // namespace
}  // namespace kareus::methods
