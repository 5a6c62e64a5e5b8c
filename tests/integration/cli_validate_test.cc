// SPDX-License-Identifier: Apache-2.0
// End-to-end: `kareus validate` replays data/validation/ (the tolerances themselves are held by
// tests/emulator/validation_test.cc), and `kareus simulate --power-limit` (power-limit mode).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "integration/cli_util.h"
#include "kareus/common/json.h"

namespace kareus {
namespace {

using testing::RunKareus;
using testing::SourceDir;

TEST(CliValidate, JsonListsEveryDatasetWithItsShapeErrors) {
  const auto r = RunKareus("validate --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["format"], "kareus.validation/1");
  ASSERT_EQ(j["datasets"].size(), 9u);
  for (const Json& d : j["datasets"]) {
    EXPECT_FALSE(d["source"].get<std::string>().empty());
    if (d["kind"] == "device_check" || d["kind"] == "power_probe") {
      // Kareus's H200 measurements: rows with measured, emulated and errors, and medians.
      ASSERT_FALSE(d["rows"].empty());
      for (const char* field : {"measured", "emulated", "error_pct", "comparable"}) {
        EXPECT_TRUE(d["rows"][0].contains(field)) << field;
      }
      EXPECT_TRUE(
          d["median_abs_error"].contains(d["kind"] == "device_check" ? "partitions" : "loads"));
    } else if (d["kind"] == "stage_profile") {
      EXPECT_EQ(d["curves"].size(), 16u);
      for (const char* field :
           {"time_rms_points", "energy_rms_points", "measured_optimal_mhz", "emulated_optimal_mhz",
            "measured_saving_pct", "emulated_saving_pct", "measured_top_power_w",
            "emulated_top_power_w"}) {
        EXPECT_TRUE(d["curves"][0].contains(field)) << field;
      }
    } else {
      EXPECT_EQ(d["kind"], "power_limit_sweep");
      EXPECT_EQ(d["limits"].size(), 9u);
      EXPECT_EQ(d["limits"][0]["limit_w"], 300.0);
    }
  }
}

TEST(CliValidate, TableNamesTheCalibrationOfEachDataset) {
  const auto r = RunKareus("validate");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("gpt3-175b-a100"), std::string::npos);
  EXPECT_NE(r.out.find("calibrated: nothing (validation only)"), std::string::npos);
  EXPECT_NE(r.out.find("time_rms_pt"), std::string::npos);
  EXPECT_NE(r.out.find("emu_time_ratio"), std::string::npos);
  EXPECT_NE(r.out.find("h200-llama3.3-70b-card-b"), std::string::npos);
  EXPECT_NE(r.out.find("median |error|, partitions:"), std::string::npos);
}

TEST(CliValidate, MissingManifestExitsTwo) {
  const auto r = RunKareus("validate --data /nonexistent/validation");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("datasets.yaml"), std::string::npos) << r.err;
}

std::string Tp8() {
  return (SourceDir() / "examples/paper/01-llama3.2-3b-tp8-mbs8-seq4096.yaml").string();
}

TEST(CliSimulatePowerLimit, UnlockedUnderALimitTheClockFallsWithTheLimit) {
  double previous = 1e9;
  for (const char* limit : {"400", "250", "150"}) {
    const auto r = RunKareus("simulate " + Tp8() +
                             " --stage 0 --instruction forward --power-limit " + limit + " --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const Json j = Json::parse(r.out);
    EXPECT_EQ(j["freq_mhz"], 1410);  // unlocked: the maximum clock, lowered by the limit
    EXPECT_EQ(j["power_limit_w"], std::stod(limit));
    EXPECT_LE(j["avg_power_w"].get<double>(), std::stod(limit) + 1e-6);
    EXPECT_LT(j["effective_freq_mhz"].get<double>(), previous);
    previous = j["effective_freq_mhz"].get<double>();
  }
}

TEST(CliSimulatePowerLimit, OutsideTheBoardRangeExitsTwoWithTheRange) {
  const auto r =
      RunKareus("simulate " + Tp8() + " --stage 0 --instruction forward --power-limit 500");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--power-limit"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("100 to 400 W"), std::string::npos) << r.err;
}

// `kareus calibrate` writes an overlay that validate, simulate and run take; bad input exits 2
// naming the field, and an overlay for another GPU is refused.
TEST(CliCalibrate, WritesAnOverlayTheOtherCommandsTake) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kareus_cli_calibrate";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string overlay = (dir / "h200.yaml").string();
  const auto fit = RunKareus("calibrate --gpu H200-SXM --dataset h200-llama3.2-3b-card-a --out " +
                             overlay + " --json");
  ASSERT_EQ(fit.exit_code, 0) << fit.err;
  const Json j = Json::parse(fit.out);
  EXPECT_EQ(j["format"], "kareus.calibration/1");
  ASSERT_TRUE(std::filesystem::exists(overlay));

  const auto compared = RunKareus("validate --gpu-overlay " + overlay);
  ASSERT_EQ(compared.exit_code, 0) << compared.err;
  EXPECT_NE(compared.out.find("the preset against the overlay"), std::string::npos);

  const std::string workload =
      (SourceDir() / "data/validation/workloads/device-llama3.2-3b-tp8-h200.yaml").string();
  const auto sim = RunKareus("simulate " + workload +
                             " --partition fwd_trail --sms 20 --slot norm_0 --freq 1500 --json "
                             "--gpu-overlay " +
                             overlay);
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_TRUE(Json::parse(sim.out).contains("gpu_overlay"));

  const auto wrong_gpu = RunKareus(
      "simulate " + (SourceDir() / "examples/llama3.1-8b-h100.yaml").string() +
      " --partition fwd_trail --sms 20 --slot norm_0 --freq 1500 --gpu-overlay " + overlay);
  EXPECT_EQ(wrong_gpu.exit_code, 2);
  EXPECT_NE(wrong_gpu.err.find("--gpu-overlay"), std::string::npos) << wrong_gpu.err;

  const auto no_gpu = RunKareus("calibrate --gpu NOPE --out " + (dir / "x.yaml").string());
  EXPECT_EQ(no_gpu.exit_code, 2);
  EXPECT_FALSE(std::filesystem::exists(dir / "x.yaml"));
  const auto bad_width =
      RunKareus("calibrate --gpu A40 --prior-width -1 --out " + (dir / "x.yaml").string());
  EXPECT_EQ(bad_width.exit_code, 2);
  EXPECT_NE(bad_width.err.find("prior"), std::string::npos) << bad_width.err;
  const auto no_folder =
      RunKareus("calibrate --gpu A40 --out " + (dir / "missing" / "x.yaml").string());
  EXPECT_EQ(no_folder.exit_code, 2);
  EXPECT_NE(no_folder.err.find("does not exist"), std::string::npos) << no_folder.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kareus
