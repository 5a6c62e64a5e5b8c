// SPDX-License-Identifier: Apache-2.0
// GPU overlays (kareus calibrate's output): parse, apply, round-trip and the rules they keep.
#include "kareus/hw/gpu_overlay.h"

#include <gtest/gtest.h>

#include <string>

#include "kareus/common/error.h"
#include "kareus/common/yaml.h"
#include "kareus/hw/gpu_spec.h"

namespace kareus::hw {
namespace {

GpuOverlay Parse(const std::string& text) {
  return ParseGpuOverlay(YamlMap::Parse(text, "o.yaml"));
}

std::string ErrorOf(const std::string& text) {
  try {
    Parse(text);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

constexpr const char* kA40 =
    "format: kareus.gpu_overlay/1\npreset: A40\nfitted_on: \"test\"\nconstants:\n"
    "  dynamic_max_w: 600\n  idle_w: 75\n  static_w: 75\n  gemm_efficiency: 0.9\n"
    "  activity_memory_stall: 0.4\n"
    "  voltage_curve:\n    - {freq_mhz: 210, volts: 0.7}\n    - {freq_mhz: 1740, volts: 1.1}\n";

TEST(GpuOverlay, AppliesItsConstantsAndTagsTheCalibration) {
  const GpuOverlay o = Parse(kA40);
  EXPECT_EQ(o.preset, "A40");
  EXPECT_EQ(o.fitted_on, "test");
  GpuSpec gpu = GpuPreset("A40");
  const GpuSpec preset = gpu;
  ApplyGpuOverlay(gpu, o);
  EXPECT_DOUBLE_EQ(gpu.power.dynamic_max_w, 600.0);
  EXPECT_DOUBLE_EQ(gpu.power.idle_w, 75.0);
  EXPECT_DOUBLE_EQ(gpu.gemm_efficiency, 0.9);
  EXPECT_DOUBLE_EQ(gpu.activity.memory_stall, 0.4);
  ASSERT_EQ(gpu.voltage_curve.size(), 2u);
  EXPECT_DOUBLE_EQ(gpu.voltage_curve[1].volts, 1.1);
  // What it leaves out stays the preset's.
  EXPECT_DOUBLE_EQ(gpu.hbm_efficiency, preset.hbm_efficiency);
  EXPECT_DOUBLE_EQ(gpu.power.memory_w, preset.power.memory_w);
  // The calibration names the overlay, so the backend's description (and a store's check)
  // tells the two GPUs apart.
  EXPECT_NE(gpu.calibration, preset.calibration);
  EXPECT_NE(gpu.calibration.find(o.Tag()), std::string::npos);
  EXPECT_EQ(o.Tag().rfind("overlay-", 0), 0u);
}

TEST(GpuOverlay, RoundTripsThroughYamlAndJson) {
  const GpuOverlay o = Parse(kA40);
  const GpuSpec preset = GpuPreset("A40");
  const std::string yaml = GpuOverlayToYaml(o, &preset);
  EXPECT_NE(yaml.find("# preset"), std::string::npos) << yaml;
  EXPECT_EQ(Parse(yaml).Tag(), o.Tag());
  // The JSON an output records reads back as an overlay too (its tag is recomputed).
  const Json j = ToJson(o);
  EXPECT_EQ(j["tag"], o.Tag());
  const GpuOverlay back = ParseGpuOverlay(YamlMap::Parse(j.dump(), "record.json"));
  EXPECT_EQ(back.Tag(), o.Tag());
  EXPECT_EQ(back.fitted_on, "test");
}

TEST(GpuOverlay, TagFollowsTheConstantsNotTheProvenance) {
  GpuOverlay a = Parse(kA40);
  GpuOverlay b = a;
  b.fitted_on = "another fit";
  EXPECT_EQ(a.Tag(), b.Tag());
  b.dynamic_max_w = 601.0;
  EXPECT_NE(a.Tag(), b.Tag());
}

TEST(GpuOverlay, BadFilesNameTheFieldAndTheRule) {
  EXPECT_NE(ErrorOf("preset: A40\nconstants: {gemm_efficiency: 1.5}\n").find("gemm_efficiency"),
            std::string::npos);
  EXPECT_NE(ErrorOf("preset: A40\nconstants: {dynamic_max_w: -1}\n").find("must be positive"),
            std::string::npos);
  EXPECT_NE(ErrorOf("preset: A40\nconstants: {}\n").find("sets no constant"), std::string::npos);
  EXPECT_NE(ErrorOf("preset: A40\nconstants: {dinamic_max_w: 600}\n").find("dinamic_max_w"),
            std::string::npos);
  EXPECT_NE(ErrorOf("format: kareus.gpu_overlay/9\npreset: A40\nconstants: {idle_w: 70}\n")
                .find("format"),
            std::string::npos);
  EXPECT_NE(ErrorOf("preset: A40\nconstants:\n  voltage_curve:\n    - {freq_mhz: 900, volts: 0.8}\n"
                    "    - {freq_mhz: 800, volts: 0.9}\n")
                .find("ascending"),
            std::string::npos);
  EXPECT_NE(ErrorOf("preset: A40\n").find("constants"), std::string::npos);
}

TEST(GpuOverlay, ApplyKeepsThePresetRules) {
  GpuSpec gpu = GpuPreset("H200-SXM");
  // For another GPU.
  EXPECT_THROW(ApplyGpuOverlay(gpu, Parse(kA40)), InputError);
  // Idle power at or above the lowest settable limit; static power at the cap.
  GpuSpec a40 = GpuPreset("A40");
  try {
    ApplyGpuOverlay(a40, Parse("preset: A40\nconstants: {idle_w: 5000}\n"), "my.yaml");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("my.yaml"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("idle_w"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ApplyGpuOverlay(a40, Parse("preset: A40\nconstants: {static_w: 300}\n")),
               InputError);
  // Nothing was changed by the refused overlays.
  EXPECT_DOUBLE_EQ(a40.power.idle_w, GpuPreset("A40").power.idle_w);
  EXPECT_EQ(a40.calibration, GpuPreset("A40").calibration);
}

}  // namespace
}  // namespace kareus::hw
