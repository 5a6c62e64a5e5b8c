// SPDX-License-Identifier: Apache-2.0
// The emulator against real GPU measurements (data/validation/, `kareus validate`): the
// tolerances of issue 12 where the emulator meets them, and the known gaps pinned where it does
// not, so that a change that widens them fails. Which dataset calibrated which constant:
// data/validation/README.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "emulator/test_util.h"
#include "emulator/validation_criteria.h"
#include "kareus/emulator/validate.h"

namespace kareus::emulator {
namespace {

const ValidationReport& Report() {
  static const ValidationReport report =
      ReplayDatasets({.data_dir = testing::SourceDir() / "data" / "validation",
                      .datasets = {},
                      .gpu = "",
                      .overlays = {}});
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
  testing::ExpectStageProfileCriteria(Dataset("gpt3-175b-a100"));
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
      EXPECT_LE(c.time_rms_points, 5.5);                                        // target 3
      EXPECT_LE(std::abs(c.emulated_saving_pct - c.measured_saving_pct), 5.5);  // target 3
    } else {
      EXPECT_LE(c.time_rms_points, 15.5);                                         // target 3
      EXPECT_LE(std::abs(c.emulated_optimal_mhz - c.measured_optimal_mhz), 150);  // target 45
      EXPECT_LE(std::abs(c.emulated_saving_pct - c.measured_saving_pct), 15.5);   // target 3
    }
  }
}

// The time split t(f) = a + b/f below the power limit (StageCurve::measured_fixed_s ...). On
// A100 the stand-in's memory-bound roofline lands on the measured clock-insensitive time within
// a few milliseconds and its tensor work on the measured clock-scaled time.
TEST(Validation, A100TimeSplitMatchesTheMeasuredOne) {
  const DatasetResult& d = Dataset("gpt3-175b-a100");
  for (const StageCurve& c : d.curves) {
    SCOPED_TRACE("stage " + std::to_string(c.stage) + " " + schedule::ToString(c.direction));
    ASSERT_GT(c.fit_top_mhz, 1200);
    EXPECT_NEAR(c.emulated_fixed_s, c.measured_fixed_s, 5e-3);
    EXPECT_NEAR(c.emulated_scaled_s / c.measured_scaled_s, 1.0, 0.2);
  }
}

// Why the A40 stage's shape is out of reach of this stand-in (README.md "Where the emulator
// misses"): the measured A40 profile holds about two thirds of the A100 profile's clock-scaled
// work (forward 0.65; backward 0.35, its fit bent by the 975 -> 960 MHz step) and 12-21x its
// clock-insensitive time, where the bandwidth ratio allows 2.9x. Per unit of
// tensor peak at the fitted clock (A40 84 SMs x 1024 FLOP/clk, A100 108 x 2048; data/gpus/),
// the A40's clock-scaled time is below 75 % of the A100's, and its clock-insensitive time is
// over 8x the A100's where GDDR6 vs HBM2e alone gives 2039 / 696 = 2.9x. The emulator, running
// the same stand-in on both, keeps both ratios physical. A stand-in for the A40 written from
// the real A40 configuration would change these numbers; until then they are pinned here.
TEST(Validation, A40ProfileHoldsDifferentWorkThanTheA100One) {
  const DatasetResult& a100 = Dataset("gpt3-175b-a100");
  const DatasetResult& a40 = Dataset("gpt3-175b-a40");
  ASSERT_EQ(a100.curves.size(), a40.curves.size());
  for (size_t i = 0; i < a40.curves.size(); ++i) {
    const StageCurve& c = a40.curves[i];
    const StageCurve& r = a100.curves[i];
    SCOPED_TRACE("stage " + std::to_string(c.stage) + " " + schedule::ToString(c.direction));
    ASSERT_EQ(c.stage, r.stage);
    ASSERT_EQ(c.direction, r.direction);
    // Tensor work in units of the A100's peak at its fitted clock.
    const double peak_ratio = (84.0 * 1024.0 * c.fit_top_mhz) / (108.0 * 2048.0 * r.fit_top_mhz);
    const double measured_work = c.measured_scaled_s * peak_ratio / r.measured_scaled_s;
    const double emulated_work = c.emulated_scaled_s * peak_ratio / r.emulated_scaled_s;
    EXPECT_LT(measured_work, 0.75);
    // Same stand-in on both: the same work, over the A40's lower GEMM and attention efficiency
    // (0.80 / 0.55 vs 0.869 / 0.62 in data/gpus/): 1.10-1.13.
    EXPECT_NEAR(emulated_work, 1.1, 0.1);
    EXPECT_GT(c.measured_fixed_s / r.measured_fixed_s, 8.0);
    EXPECT_LT(c.emulated_fixed_s / r.emulated_fixed_s, 4.0);
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

// ---- Kareus's own H200 measurements (data/validation/h200-device/) -------------------------
// FIT: card B's power probe and Llama 3.2 3B device check. HELD OUT: card A's 3B check (another
// card) and card B's 8B, Qwen3 1.7B and 70B checks (other shapes). The limits below hold for
// the calibrated H200-SXM preset; the preset before it (dynamic_max_w 800, memory_w 80, idle
// 120, memory_stall 0.3, a steeper voltage curve, each running set held to the limit) fails
// them: pooled held-out partition energy 26.1 % and power 13.8 %, per-dataset power 4.3-19.7 %,
// the fit set's energy 28.6 %, the probe's power 2.9 %, time 10.1 % and clock 6.9 %
// (data/validation/README.md has both runs).

const std::vector<std::string> kH200HeldOut = {"h200-llama3.2-3b-card-a", "h200-llama3.1-8b-card-b",
                                               "h200-qwen3-1.7b-card-b",
                                               "h200-llama3.3-70b-card-b"};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

TEST(Validation, H200HeldOutDeviceChecksWithinTheLimits) {
  std::vector<double> time, energy, power, clock;
  for (const std::string& name : kH200HeldOut) {
    SCOPED_TRACE(name);
    const DatasetResult& d = Dataset(name);
    ASSERT_EQ(d.kind, DatasetKind::kDeviceCheck);
    EXPECT_TRUE(d.calibrates.empty()) << "a held-out dataset calibrates nothing";
    // compute_only rows: fwd_mlp, bwd_mlp, bwd_trail comparable; fwd_attn, bwd_attn (unfused
    // attention) and fwd_trail (the backend's hashed dropout) apart.
    ASSERT_EQ(d.partitions.rows, 3);
    ASSERT_EQ(d.partitions_not_comparable.rows, 3);
    EXPECT_LE(d.partitions.time_pct, 15.0);    // after 1.9-13.9, before 6.4-10.2
    EXPECT_LE(d.partitions.energy_pct, 20.0);  // after 8.7-19.3, before 4.5-32.3
    EXPECT_LE(d.partitions.power_pct, 3.0);    // after 0.2-1.6, before 4.3-19.7
    EXPECT_LE(d.partitions.freq_pct, 13.0);    // after 0.1-11.9, before 0.2-11.9
    for (const DeviceRow& r : d.rows) {
      if (r.section != RowSection::kPartition || !r.comparable) continue;
      time.push_back(std::abs(r.time_error_pct));
      energy.push_back(std::abs(r.energy_error_pct));
      power.push_back(std::abs(r.power_error_pct));
      clock.push_back(std::abs(r.freq_error_pct));
    }
  }
  ASSERT_EQ(time.size(), 12u);
  EXPECT_LE(Median(time), 10.0);    // after 7.5, before 7.3
  EXPECT_LE(Median(energy), 20.0);  // after 18.4, before 26.1
  EXPECT_LE(Median(power), 2.0);    // after 0.6, before 13.8
  EXPECT_LE(Median(clock), 5.0);    // after 2.4, before 4.4
}

// The fit set itself: the probe's steady loads (idle, GEMMs under the cap, the copy, the GEMM
// at half duty cycle and the burst it implies) and the 3B partitions on the card that was
// fitted.
TEST(Validation, H200FitSetIsMet) {
  const DatasetResult& probe = Dataset("h200-power-probe-card-b");
  ASSERT_EQ(probe.kind, DatasetKind::kPowerProbe);
  EXPECT_EQ(probe.probe.rows, 7);
  EXPECT_LE(probe.probe.power_pct, 1.0);  // before 2.9
  EXPECT_LE(probe.probe.time_pct, 5.0);   // before 10.1
  EXPECT_LE(probe.probe.freq_pct, 1.0);   // before 6.9
  for (const DeviceRow& r : probe.rows) {
    SCOPED_TRACE(r.name);
    if (r.name.starts_with("idle") || r.name.starts_with("copy") ||
        r.name.starts_with("gemm 8192^3")) {
      EXPECT_NEAR(r.power_error_pct, 0.0, 1.0);
    }
  }
  const DatasetResult& fit = Dataset("h200-llama3.2-3b-card-b");
  EXPECT_FALSE(fit.calibrates.empty());
  EXPECT_LE(fit.partitions.energy_pct, 16.0);  // after 15.7, before 28.6
  EXPECT_LE(fit.partitions.power_pct, 2.0);    // after 0.9, before 13.3
}

// Known gaps, pinned so that they cannot widen unnoticed and show up when fixed: GEMM power per
// clock depends on the shape (the 8192x3072x1024 GEMM alone held 1655 MHz at 677 W, the
// 8192^3 one 1503 MHz at 692 W; the 70B MLP partitions ran at ~1800 MHz at 700 W), which one
// GEMM activity and one efficiency cannot represent.
TEST(Validation, H200KnownGapsArePinned) {
  int checked = 0;
  for (const DeviceRow& r : Dataset("h200-power-probe-card-b").rows) {
    if (r.name == "gemm bf16 8192x3072x1024") {
      EXPECT_LT(r.freq_error_pct, -5.0);
      EXPECT_GT(r.freq_error_pct, -12.0);
      ++checked;
    }
  }
  for (const DeviceRow& r : Dataset("h200-llama3.3-70b-card-b").rows) {
    if (r.section == RowSection::kPartition && (r.name == "fwd_mlp" || r.name == "bwd_mlp")) {
      SCOPED_TRACE(r.name);
      EXPECT_LT(r.freq_error_pct, -8.0);
      EXPECT_GT(r.freq_error_pct, -15.0);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3);
}

// A device check replayed on a workload other than the measured one is refused, naming both
// signatures.
TEST(Validation, DeviceCheckOnAnotherWorkloadIsRefused) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kareus_validate_sig";
  std::filesystem::create_directories(dir / "workloads");
  std::filesystem::create_directories(dir / "h200-device");
  const std::filesystem::path src = testing::SourceDir() / "data" / "validation";
  std::filesystem::copy_file(src / "h200-device/run2-device-check-llama3.1-8b-tp8-h200.json",
                             dir / "h200-device/check.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(src / "workloads/device-llama3.2-3b-tp8-h200.yaml",
                             dir / "workloads/w.yaml",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "datasets.yaml")
      << "datasets:\n  - name: x\n    kind: device_check\n    file: h200-device/check.json\n"
         "    source: test\n    workload: workloads/w.yaml\n";
  try {
    ReplayDatasets({.data_dir = dir, .datasets = {}, .gpu = "", .overlays = {}});
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("signature"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("llama3.1-8b"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// The report's JSON carries every number the tables show.
TEST(Validation, JsonHasEveryDataset) {
  const Json j = ToJson(Report());
  EXPECT_EQ(j["format"], "kareus.validation/1");
  ASSERT_EQ(j["datasets"].size(), 9u);
  EXPECT_EQ(j["datasets"][0]["curves"][0]["freqs_mhz"].size(),
            j["datasets"][0]["curves"][0]["emulated_time_s"].size());
  EXPECT_FALSE(RenderValidation(Report()).empty());
}

}  // namespace
}  // namespace kareus::emulator
