// SPDX-License-Identifier: Apache-2.0
// The emulator against real GPU measurements (data/validation/, `kareus validate`): the
// tolerances of issue 12 where the emulator meets them, and the known gaps pinned where it does
// not, so that a change that widens them fails. Which dataset calibrated which constant:
// data/validation/README.md.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "emulator/test_util.h"
#include "kareus/emulator/validate.h"

namespace kareus::emulator {
namespace {

const ValidationReport& Report() {
  static const ValidationReport report =
      Validate({.data_dir = testing::SourceDir() / "data" / "validation"});
  return report;
}

const DatasetResult& Dataset(const std::string& name) {
  for (const DatasetResult& d : Report().datasets) {
    if (d.name == name) return d;
  }
  ADD_FAILURE() << "no dataset " << name;
  static const DatasetResult none;
  return none;
}

// Every stage and both directions: the same workload shape was profiled per stage (stages 0-6
// are one profile, stage 7 adds the output layer).
TEST(Validation, A100Gpt3StageProfilesMeetTheTolerances) {
  const DatasetResult& d = Dataset("gpt3-175b-a100");
  ASSERT_EQ(d.curves.size(), 16u);
  for (const StageCurve& c : d.curves) {
    SCOPED_TRACE("stage " + std::to_string(c.stage) + " " + schedule::ToString(c.direction));
    EXPECT_LE(c.time_rms_points, 3.0);
    EXPECT_LE(std::abs(c.emulated_optimal_mhz - c.measured_optimal_mhz), 45);
    EXPECT_LE(std::abs(c.emulated_saving_pct - c.measured_saving_pct), 3.0);
    EXPECT_LE(std::abs(c.top_power_error_pct), 10.0);
    EXPECT_LE(c.energy_rms_points, 3.0);
  }
}

// The A40 stage profiles: the power model meets the tolerances (power at the top clock, the
// forward optimum), the time shape does not (README.md: the measured A40 stages have about a
// third of their time clock-insensitive at low power, which the equal-FLOPs stand-in lacks; the
// backward's time falls 6 % from 990 to 960 MHz). The gaps are pinned so they cannot widen.
TEST(Validation, A40Gpt3StageProfilesKnownGapsDoNotWiden) {
  const DatasetResult& d = Dataset("gpt3-175b-a40");
  ASSERT_EQ(d.curves.size(), 16u);
  for (const StageCurve& c : d.curves) {
    SCOPED_TRACE("stage " + std::to_string(c.stage) + " " + schedule::ToString(c.direction));
    EXPECT_LE(std::abs(c.top_power_error_pct), 10.0);
    if (c.direction == schedule::Direction::kForward) {
      EXPECT_LE(std::abs(c.emulated_optimal_mhz - c.measured_optimal_mhz), 45);
      EXPECT_LE(c.time_rms_points, 5.5);                                          // target 3
      EXPECT_LE(std::abs(c.emulated_saving_pct - c.measured_saving_pct), 5.5);    // target 3
    } else {
      EXPECT_LE(c.time_rms_points, 15.5);                                         // target 3
      EXPECT_LE(std::abs(c.emulated_optimal_mhz - c.measured_optimal_mhz), 150);  // target 45
      EXPECT_LE(std::abs(c.emulated_saving_pct - c.measured_saving_pct), 15.5);   // target 3
    }
  }
}

// Zeus's BERT-base power-limit sweep on one A40 (validation only: it calibrated nothing): the
// time against the 300 W run within 10 % at 200, 150, 125 and 100 W.
TEST(Validation, A40BertPowerLimitSweepWithinTenPercent) {
  const DatasetResult& d = Dataset("bert-base-a40-power-limit");
  ASSERT_EQ(d.limits.size(), 9u);
  int checked = 0;
  for (const PowerLimitPoint& p : d.limits) {
    SCOPED_TRACE(std::to_string(p.limit_w) + " W");
    // The limit holds (at 100 W a dense GEMM barely fits even at the lowest clock, where the
    // emulator stops lowering it: the average may exceed the limit by a hair).
    EXPECT_LE(p.emulated_power_w, p.limit_w + 0.05);
    if (p.limit_w == 200 || p.limit_w == 150 || p.limit_w == 125 || p.limit_w == 100) {
      EXPECT_LE(std::abs(p.time_ratio_error_pct), 10.0);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4);
}

// The report's JSON carries every number the tables show.
TEST(Validation, JsonHasEveryDataset) {
  const Json j = ToJson(Report());
  EXPECT_EQ(j["format"], "kareus.validation/1");
  ASSERT_EQ(j["datasets"].size(), 3u);
  EXPECT_EQ(j["datasets"][0]["curves"][0]["freqs_mhz"].size(),
            j["datasets"][0]["curves"][0]["emulated_time_s"].size());
  EXPECT_FALSE(RenderValidation(Report()).empty());
}

}  // namespace
}  // namespace kareus::emulator
