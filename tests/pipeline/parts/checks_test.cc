// SPDX-License-Identifier: Apache-2.0
// The checks part (src/pipeline/checks.cc): every rule of FindInputError, CheckOptions and
// Options::Validate names what it rejects.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pipeline/parts/engine_probe.h"

namespace kareus::pipeline::parts_test {
namespace {

using internal::CheckOptions;
using internal::FindInputError;

std::string ErrorOf(const Problem& problem) { return FindInputError(problem, Options{}); }

TEST(ChecksTest, AValidProblemHasNoError) { EXPECT_EQ(ErrorOf(LadderProblem(2, 3)), ""); }

TEST(ChecksTest, ShapeAndListCounts) {
  Problem p = LadderProblem(2, 3);
  p.num_stages = 0;
  EXPECT_EQ(ErrorOf(p), "num_stages must be >= 1");
  p = LadderProblem(2, 3);
  p.num_microbatches = 0;
  EXPECT_EQ(ErrorOf(p), "num_microbatches must be >= 1");
  p = LadderProblem(2, 3);
  p.backward_options.pop_back();
  EXPECT_EQ(ErrorOf(p), "forward_options and backward_options need one list per (stage, chunk)");
  p = LadderProblem(2, 3);
  p.gradient_sync = schedule::GradientSync::kOverlapped;
  EXPECT_EQ(ErrorOf(p), "an overlapped gradient sync needs last_backward_options per stage");
  p = LadderProblem(2, 3);
  p.last_backward_options = {Ladder(0.02, 2), Ladder(0.02, 2)};
  EXPECT_EQ(ErrorOf(p), "last_backward_options are for an overlapped gradient sync only");
  p = LadderProblem(2, 3);
  p.gradient_sync = schedule::GradientSync::kAtEnd;
  EXPECT_NE(ErrorOf(p).find("gradient_sync_options need 1 list(s) per stage"), std::string::npos)
      << ErrorOf(p);
}

TEST(ChecksTest, GpusAndTransfers) {
  Problem p = LadderProblem(2, 3);
  p.gpus_per_stage = {1};
  EXPECT_EQ(ErrorOf(p), "gpus_per_stage needs one entry per stage (or none)");
  p.gpus_per_stage = {1, 0};
  EXPECT_EQ(ErrorOf(p), "gpus_per_stage entries must be >= 1");
  p.gpus_per_stage = {};
  p.p2p_time_s = NAN;
  EXPECT_EQ(ErrorOf(p), "p2p_time_s must be >= 0");
}

TEST(ChecksTest, OptionListsNameTheirUnit) {
  Problem p = LadderProblem(2, 3);
  p.backward_options[1].clear();
  EXPECT_EQ(ErrorOf(p), "stage 1 has no backward options");
  p = LadderProblem(2, 3);
  p.forward_options[0][1].time_s = 0.0;
  EXPECT_NE(ErrorOf(p).find("stage 0 forward option with time_s = 0.000000"), std::string::npos)
      << ErrorOf(p);
  EXPECT_EQ(CheckOptions({{.time_s = 1.0, .energy_j = -1.0}}, "stage 3", "gradient sync", Options{})
                .find("stage 3 gradient sync option"),
            0u);
  Options fine;
  fine.unit_time_s = 1e-12;
  EXPECT_EQ(CheckOptions({{.time_s = 1.0, .energy_j = 1.0}, {.time_s = 2.0, .energy_j = 1.0}},
                         "stage 0", "forward", fine),
            "unit_time_s is too small for the options' time range (over 5e7 quanta)");
}

TEST(ChecksTest, OptionsValidateNamesTheField) {
  Options options;
  EXPECT_FALSE(options.Validate().has_value());
  options.unit_time_s = 0.0;
  ASSERT_TRUE(options.Validate().has_value());
  EXPECT_EQ(options.Validate()->field, "unit_time_s");
  options = Options{};
  options.max_steps = -1;
  EXPECT_EQ(options.Validate()->field, "max_steps");
  options = Options{};
  options.deadline_s = INFINITY;
  EXPECT_EQ(options.Validate()->field, "deadline_s");
  // An invalid Options is the problem's first error.
  EXPECT_EQ(FindInputError(LadderProblem(1, 1), options), options.Validate()->Message());
}

}  // namespace
}  // namespace kareus::pipeline::parts_test
