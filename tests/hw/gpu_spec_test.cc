// SPDX-License-Identifier: Apache-2.0
#include "kareus/hw/gpu_spec.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "kareus/common/error.h"
#include "kareus/common/io.h"

namespace kareus::hw {
namespace {

TEST(GpuPresets, AllFiveLoad) {
  const std::vector<std::string> expected = {"A100-SXM4-40GB", "A100-SXM4-80GB", "A40", "H100-SXM",
                                             "H200-SXM"};
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

// The H200 preset is calibrated on Kareus's measurements (data/validation/h200-device/) and the
// H100 one derives its die-level constants from it: both name their calibration (it enters the
// emulator backend's description, so stores of the earlier constants are refused) and hold the
// average power to the limit; the A100 and A40 presets keep the per-set hold and no tag.
TEST(GpuPresets, CalibrationTagAndCapMode) {
  EXPECT_EQ(GpuPreset("H200-SXM").calibration, "h200-device-2026-11-29");
  EXPECT_EQ(GpuPreset("H200-SXM").power.cap_mode, PowerSpec::CapMode::kAverage);
  EXPECT_EQ(GpuPreset("H100-SXM").power.cap_mode, PowerSpec::CapMode::kAverage);
  EXPECT_FALSE(GpuPreset("H100-SXM").calibration.empty());
  for (const char* name : {"A100-SXM4-40GB", "A100-SXM4-80GB", "A40"}) {
    EXPECT_TRUE(GpuPreset(name).calibration.empty()) << name;
    EXPECT_EQ(GpuPreset(name).power.cap_mode, PowerSpec::CapMode::kEachSet) << name;
  }
  // A V curve that only rises (the measured part and the floor below it).
  const GpuSpec h200 = GpuPreset("H200-SXM");
  for (int f = 225; f <= 1980; f += 15) EXPECT_GE(h200.VoltageAt(f), h200.VoltageAt(f - 15));
}

TEST(GpuPresets, UnknownCapModeNamesTheFieldAndTheChoices) {
  std::string text = ReadTextFile(DataDir() / "gpus" / "H200-SXM.yaml");
  const size_t at = text.find("cap_mode: average");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 17, "cap_mode: sometimes");
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / "kareus_gpu_spec_cap_mode.yaml";
  WriteFileAtomic(path, text);
  try {
    LoadGpuSpecFile(path.string());
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cap_mode"), std::string::npos) << what;
    EXPECT_NE(what.find("sometimes"), std::string::npos) << what;
    EXPECT_NE(what.find("each_set, average"), std::string::npos) << what;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kareus::hw
