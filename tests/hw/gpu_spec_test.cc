// SPDX-License-Identifier: Apache-2.0
#include "kareus/hw/gpu_spec.h"

#include <gtest/gtest.h>

#include "kareus/common/error.h"

namespace kareus::hw {
namespace {

TEST(GpuPresets, AllFiveLoad) {
  const std::vector<std::string> expected = {"A100-SXM4-40GB", "A100-SXM4-80GB", "A40",
                                             "H100-SXM", "H200-SXM"};
  EXPECT_EQ(GpuPresetNames(), expected);
  for (const auto& name : expected) {
    const GpuSpec gpu = GpuPreset(name);
    EXPECT_EQ(gpu.name, name);
    EXPECT_GT(gpu.sm_count, 0);
    EXPECT_TRUE(gpu.clock.Contains(gpu.clock.default_mhz));
    EXPECT_LT(gpu.power.static_w, gpu.power.cap_w);
  }
}

TEST(GpuPresets, A100PeakAndPublishedProfileGrid) {
  const GpuSpec gpu = GpuPreset("A100-SXM4-40GB");
  // 108 SMs x 2048 FLOP/clk x 1.41 GHz = 312 TFLOP/s dense BF16 (NVIDIA's figure).
  EXPECT_NEAR(gpu.PeakTensorFlops(1410) / 1e12, 311.9, 0.1);
  const auto grid = gpu.clock.ProfileGrid();
  // The published sub-grid: 1410, 1380, ..., 900 (18 clocks; kareus-official.md §2.1).
  ASSERT_EQ(grid.size(), 18u);
  EXPECT_EQ(grid.front(), 1410);
  EXPECT_EQ(grid.back(), 900);
  EXPECT_EQ(gpu.clock.Supported().size(), 81u);
  EXPECT_TRUE(gpu.clock.Contains(1395));
  EXPECT_FALSE(gpu.clock.Contains(1400));
}

TEST(GpuPresets, VoltageInterpolatesAndClamps) {
  const GpuSpec gpu = GpuPreset("A100-SXM4-40GB");
  EXPECT_DOUBLE_EQ(gpu.VoltageAt(1080), 0.7125);
  EXPECT_DOUBLE_EQ(gpu.VoltageAt(100), gpu.voltage_curve.front().volts);
  EXPECT_DOUBLE_EQ(gpu.VoltageAt(5000), gpu.voltage_curve.back().volts);
  for (int f = 300; f <= 1410; f += 15) EXPECT_GE(gpu.VoltageAt(f), gpu.VoltageAt(f - 15));
}

TEST(GpuPresets, UnknownNameListsTheValidOnes) {
  try {
    GpuPreset("B200");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("A100-SXM4-40GB"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kareus::hw
