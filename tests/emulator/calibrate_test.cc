// SPDX-License-Identifier: Apache-2.0
// kareus calibrate (issue 32): a fit to data the emulator itself produced with perturbed
// constants recovers them; the options and the manifests are checked at the boundary.
#include "kareus/emulator/calibrate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "emulator/test_util.h"
#include "emulator/validation_criteria.h"
#include "kareus/common/error.h"
#include "kareus/hw/gpu_spec.h"

namespace kareus::emulator {
namespace {

namespace fs = std::filesystem;

// A one-stage A40 stand-in (BERT-base's shape) and a manifest of one stage profile compared in
// absolute terms, its CSV written from the emulator run with `truth` (empty: the preset).
struct Folder {
  fs::path dir;
  explicit Folder(const std::string& name) : dir(fs::temp_directory_path() / name) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Folder() { fs::remove_all(dir); }
};

// The stand-in's stage profile (every 90 MHz) and power-limit sweep (every 25 W), both compared
// in absolute terms: the profile alone cannot split static from dynamic power (P = static +
// dynamic x V(f)^2 f fits it as well with other splits, to 0.2 %); the sweep's clock under each
// cap, where (cap - static) / dynamic sets the clock, does.
const DatasetResult& Named(const ValidationReport& report, const std::string& name) {
  for (const DatasetResult& d : report.datasets) {
    if (d.name == name) return d;
  }
  throw std::runtime_error("no dataset " + name);
}

void WriteDataset(const fs::path& dir, const hw::GpuOverlay& truth) {
  std::ofstream(dir / "w.yaml") << "name: standin\n"
                                   "model: {name: small, hidden: 1024, heads: 16, kv_groups: 16,"
                                   " head_dim: 64, ffn: 4096, layers: 4, vocab: 2}\n"
                                   "gpu: {name: A40}\n"
                                   "parallelism: {tp: 1, pp: 1}\n"
                                   "microbatch_size: 8\nsequence_length: 1024\nmicrobatches: 1\n"
                                   "recompute: none\n";
  std::ofstream(dir / "datasets.yaml")
      << "datasets:\n"
         "  - {name: profile, kind: stage_profile, file: profile.csv, source: test,"
         " workload: w.yaml, compare: absolute}\n"
         "  - {name: sweep, kind: power_limit_sweep, file: sweep.csv, source: test,"
         " workload: w.yaml, compare: absolute}\n";
  // First placeholder files (the clocks and limits), then the emulated values at the true
  // constants.
  const auto write = [&](const ValidationReport* values) {
    std::ofstream csv(dir / "profile.csv");
    csv << "stage,instruction,frequency,time,energy\n";
    for (int direction = 0; direction < 2; ++direction) {
      const char* name = direction == 0 ? "forward" : "backward";
      for (int f = 1740, i = 0; f >= 810; f -= 90, ++i) {
        double t = 1.0, e = 1.0;
        if (values != nullptr) {
          const StageCurve& c = Named(*values, "profile").curves.at(direction);
          t = c.emulated_time_s.at(i);
          e = c.emulated_energy_j.at(i);
        }
        csv << "0," << name << "," << f << "," << t << "," << e << "\n";
      }
    }
    std::ofstream sweep(dir / "sweep.csv");
    sweep << "window_name,elapsed_time,gpu0_energy\n";
    for (int w = 300, i = 0; w >= 100; w -= 25, ++i) {
      double t = 1.0, e = 1.0;
      if (values != nullptr) {
        const PowerLimitPoint& p = Named(*values, "sweep").limits.at(i);
        t = p.emulated_time_s;
        e = p.emulated_energy_j;
      }
      sweep << "step_" << w << "," << t << "," << e << "\n";
    }
  };
  write(nullptr);
  const ValidationReport truth_run =
      ReplayDatasets({.data_dir = dir, .datasets = {}, .gpu = "", .overlays = {truth}});
  write(&truth_run);
}

double Rel(double fitted, double truth) { return std::abs(fitted / truth - 1.0); }

TEST(Calibrate, RecoversPerturbedConstants) {
  const Folder folder("kareus_calibrate_recover");
  const hw::GpuSpec preset = hw::GpuPreset("A40");
  hw::GpuOverlay truth;
  truth.preset = "A40";
  truth.dynamic_max_w = preset.power.dynamic_max_w * 1.15;
  truth.idle_w = preset.power.idle_w * 0.9;
  truth.static_w = preset.power.static_w * 0.9;
  truth.gemm_efficiency = preset.gemm_efficiency * 0.92;
  truth.attention_efficiency = preset.attention_efficiency * 0.92;
  WriteDataset(folder.dir, truth);

  const GpuCalibration fit = CalibrateGpu(
      {.data = {folder.dir}, .gpu = "A40", .datasets = {}, .hold_out = {}, .prior_width = 1.0});
  ASSERT_TRUE(fit.overlay.dynamic_max_w && fit.overlay.idle_w && fit.overlay.gemm_efficiency);
  EXPECT_LT(Rel(*fit.overlay.dynamic_max_w, *truth.dynamic_max_w), 0.03);
  EXPECT_LT(Rel(*fit.overlay.idle_w, *truth.idle_w), 0.03);
  EXPECT_LT(Rel(*fit.overlay.gemm_efficiency, *truth.gemm_efficiency), 0.02);
  // The preset misses the data by several percent; the overlay fits the held-out clocks too.
  ASSERT_EQ(fit.datasets.size(), 2u);
  for (const DatasetFit& d : fit.datasets) {
    EXPECT_GT(d.held_before_pct, 5.0) << d.name;
    EXPECT_LT(d.held_after_pct, 1.0) << d.name;
    EXPECT_GT(d.held_rows, 0) << d.name;
  }
  // What was fitted is what the overlay file says, and the file reads back to the same tag.
  const hw::GpuOverlay back = hw::ParseGpuOverlay(
      YamlMap::Parse(hw::GpuOverlayToYaml(fit.overlay, &preset), "overlay.yaml"));
  EXPECT_EQ(back.Tag(), fit.overlay.Tag());
}

// Data that the preset itself produced: the fit stays at the preset (the prior's pull and the
// data agree), so calibrating cannot invent a change.
TEST(Calibrate, PresetDataLeavesThePreset) {
  const Folder folder("kareus_calibrate_preset");
  hw::GpuOverlay none;
  none.preset = "A40";
  WriteDataset(folder.dir, none);
  const GpuCalibration fit = CalibrateGpu(
      {.data = {folder.dir}, .gpu = "A40", .datasets = {}, .hold_out = {}, .prior_width = 1.0});
  const hw::GpuSpec preset = hw::GpuPreset("A40");
  EXPECT_LT(Rel(*fit.overlay.dynamic_max_w, preset.power.dynamic_max_w), 0.005);
  EXPECT_LT(Rel(*fit.overlay.gemm_efficiency, preset.gemm_efficiency), 0.005);
  EXPECT_LT(fit.held_after_pct, 0.2);
}

TEST(Calibrate, BadOptionsAndDatasetsAreNamed) {
  EXPECT_THROW(
      CalibrateGpu({.data = {}, .gpu = "", .datasets = {}, .hold_out = {}, .prior_width = 1.0}),
      InputError);
  EXPECT_THROW(
      CalibrateGpu({.data = {}, .gpu = "A40", .datasets = {}, .hold_out = {}, .prior_width = 0.0}),
      InputError);
  try {
    CalibrateGpu({.data = {},
                  .gpu = "A40",
                  .datasets = {"no-such-dataset"},
                  .hold_out = {},
                  .prior_width = 1.0});
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-dataset"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gpt3-175b-a40"), std::string::npos) << e.what();
  }
  const Folder folder("kareus_calibrate_nofolder");
  EXPECT_THROW(CalibrateGpu({.data = {folder.dir / "missing"},
                             .gpu = "A40",
                             .datasets = {},
                             .hold_out = {},
                             .prior_width = 1.0}),
               InputError);
  // Every dataset held out: nothing to fit.
  EXPECT_THROW(CalibrateGpu({.data = {},
                             .gpu = "A40",
                             .datasets = {"gpt3-175b-a40"},
                             .hold_out = {"gpt3-175b-a40"},
                             .prior_width = 1.0}),
               InputError);
  // A GPU no dataset was measured on: nothing to fit, said so.
  try {
    CalibrateGpu({.data = {}, .gpu = "H100-SXM", .datasets = {}, .hold_out = {}, .prior_width = 1});
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("nothing to calibrate"), std::string::npos) << e.what();
  }
}

// ---- The overlays shipped in data/validation/overlays (issue 32's experiments) ---------------
// Each was written by the kareus calibrate command in data/validation/README.md; these tests pin
// what each does to the datasets, the criteria it meets and the ones it does not.

fs::path ValidationDir() { return testing::SourceDir() / "data" / "validation"; }

ValidationReport ReplayWith(const std::string& overlay_file, const std::string& gpu) {
  return ReplayDatasets(
      {.data_dir = ValidationDir(),
       .datasets = {},
       .gpu = gpu,
       .overlays = {hw::LoadGpuOverlayFile(ValidationDir() / "overlays" / overlay_file)}});
}

// Fitted on every A40 file together (the GPT-3 stage profile, the BERT sweep): the forward
// stages meet the criteria (saving within 3 points, optimum within 60 MHz) and the BERT
// sweep keeps its 10 %; the backward does not (its measured time is 78 % clock-insensitive, the
// stand-in's 8 %: README.md), pinned so that it cannot widen.
TEST(ShippedOverlays, A40ForwardMeetsTheCriteriaBackwardIsPinned) {
  const ValidationReport r = ReplayWith("a40.yaml", "A40");
  const DatasetResult& gpt3 = Named(r, "gpt3-175b-a40");
  ASSERT_EQ(gpt3.curves.size(), 16u);
  for (const StageCurve& c : gpt3.curves) {
    SCOPED_TRACE("stage " + std::to_string(c.stage) + " " + schedule::ToString(c.direction));
    EXPECT_LE(std::abs(c.top_power_error_pct), 10.0);
    if (c.direction == schedule::Direction::kForward) {
      EXPECT_LE(std::abs(c.emulated_saving_pct - c.measured_saving_pct), 3.0);   // preset 5.0
      EXPECT_LE(std::abs(c.emulated_optimal_mhz - c.measured_optimal_mhz), 60);  // preset 45
    } else {
      EXPECT_LE(std::abs(c.emulated_saving_pct - c.measured_saving_pct), 12.0);  // preset 14.9
      EXPECT_GT(std::abs(c.emulated_saving_pct - c.measured_saving_pct), 3.0);   // not met
    }
  }
  const DatasetResult& bert = Named(r, "bert-base-a40-power-limit");
  for (const PowerLimitPoint& p : bert.limits) {
    EXPECT_LE(std::abs(p.time_ratio_error_pct), 10.0) << p.limit_w << " W";
  }
}

// Fitted on the A100 GPT-3 stage profile: the A100 criteria still hold.
TEST(ShippedOverlays, A100KeepsItsCriteria) {
  const ValidationReport r = ReplayWith("a100-sxm4-80gb.yaml", "A100-SXM4-80GB");
  testing::ExpectStageProfileCriteria(Named(r, "gpt3-175b-a100"));
}

// Fitted on card A's 3B device check: card A's partition energy error falls from 18.3 to under
// 5 %, card B's from 15.7 to 12.5 %, not below the 10 % (README.md: the three comparable
// partitions disagree in ways no constant of the chip reconciles, and card B's trail draws 651 W
// where card A's draws 704 W).
TEST(ShippedOverlays, H200CardAOverlayOnCardB) {
  const ValidationReport preset = ReplayDatasets(
      {.data_dir = ValidationDir(), .datasets = {}, .gpu = "H200-SXM", .overlays = {}});
  const ValidationReport r = ReplayWith("h200-card-a.yaml", "H200-SXM");
  EXPECT_LT(Named(r, "h200-llama3.2-3b-card-a").partitions.energy_pct, 5.0);
  const double before = Named(preset, "h200-llama3.2-3b-card-b").partitions.energy_pct;
  const double after = Named(r, "h200-llama3.2-3b-card-b").partitions.energy_pct;
  EXPECT_LT(after, before);
  EXPECT_LE(after, 13.5);
  EXPECT_GT(after, 10.0);  // the criterion not met: see above
  EXPECT_LE(Named(r, "h200-llama3.2-3b-card-b").partitions.power_pct, 2.0);
}

// The shipped file is what the command in README.md writes today.
TEST(ShippedOverlays, H200CardAOverlayIsReproduced) {
  const GpuCalibration fit = CalibrateGpu({.data = {},
                                           .gpu = "H200-SXM",
                                           .datasets = {"h200-llama3.2-3b-card-a"},
                                           .hold_out = {},
                                           .prior_width = 1.0});
  const hw::GpuOverlay shipped =
      hw::LoadGpuOverlayFile(ValidationDir() / "overlays" / "h200-card-a.yaml");
  EXPECT_LT(Rel(*fit.overlay.dynamic_max_w, *shipped.dynamic_max_w), 1e-4);
  EXPECT_LT(Rel(*fit.overlay.idle_w, *shipped.idle_w), 1e-4);
  EXPECT_LT(Rel(*fit.overlay.hbm_efficiency, *shipped.hbm_efficiency), 1e-4);
  EXPECT_EQ(fit.overlay.voltage_curve.size(), shipped.voltage_curve.size());
}

}  // namespace
}  // namespace kareus::emulator
