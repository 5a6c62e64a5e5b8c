// SPDX-License-Identifier: Apache-2.0
// The tolerances a replayed stage profile is held to (issue 12), shared by the tests of the
// presets (validation_test.cc) and of the shipped overlays (calibrate_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kareus/emulator/validate.h"

namespace kareus::emulator::testing {

// Every stage and both directions: normalized time and energy RMS within 3 points, the
// energy-optimal clock within 45 MHz, the saving there within 3 points, the power at the top
// clock within 10 %.
inline void ExpectStageProfileCriteria(const DatasetResult& d) {
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

}  // namespace kareus::emulator::testing
