// SPDX-License-Identifier: Apache-2.0
// `kareus calibrate` (issue 32): a GPU preset's physical constants fitted to a user's own
// measurements — the datasets of one or more validation manifests (datasets.yaml: per-clock
// stage profiles, power-limit sweeps, `kareus device-check` reports, power probes) — and written
// as an overlay (hw::GpuOverlay) that workloads and the CLI can name.
//
// The fit moves seven physical quantities of the preset (the scales the profiler's prior
// calibration moves, plus static power, the voltage curve's rise and the memory efficiency),
// by regularized nonlinear least squares (Levenberg-Marquardt, forward differences, several
// starts) on the logarithms of emulated / measured time and energy, each dataset counted as at
// most kMaxRowsPerDataset observations, with a normal prior on each parameter centred at the
// preset. The rows are split into a fit part and a held-out part, and both errors are reported
// for the preset and for the overlay.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/common/json.h"
#include "kareus/emulator/validate.h"
#include "kareus/hw/gpu_overlay.h"

namespace kareus::emulator {

struct CalibrateOptions {
  // Folders holding a datasets.yaml, or the manifests themselves; empty: the installed
  // data/validation.
  std::vector<std::filesystem::path> data;
  std::string gpu;                    // the preset to fit (every dataset measured on it)
  std::vector<std::string> datasets;  // only these datasets (empty: every one on the GPU)
  // Datasets replayed but not fitted: the held-out part. Empty: every 4th row (clock, limit,
  // partition or kernel) of each dataset is held out instead.
  std::vector<std::string> hold_out;
  // Scales the prior's sigmas (1: the defaults below; larger: the data may move the constants
  // further from the preset).
  double prior_width = 1.0;

  std::optional<OptionError> Validate() const;
};

// One fitted quantity: its name, what it scales, the fitted value (a scale, or MHz for the
// shift) and the prior's sigma on it.
struct CalibrationParameter {
  std::string name;
  std::string meaning;
  double value = 0.0;
  double sigma = 0.0;
};

// One dataset's errors: the RMS over its rows of 100 x ln(emulated / measured) (shape datasets:
// of the values normalized to the top clock or the highest limit), before (the preset) and after
// (the overlay), on its fitted rows and on its held-out rows (NaN where it has none).
struct DatasetFit {
  std::string name;
  std::filesystem::path manifest;
  DatasetKind kind = DatasetKind::kStageProfile;
  int fit_rows = 0, held_rows = 0;
  double fit_before_pct = 0.0, fit_after_pct = 0.0;
  double held_before_pct = 0.0, held_after_pct = 0.0;
};

struct GpuCalibration {
  std::string gpu;
  hw::GpuOverlay overlay;
  std::vector<CalibrationParameter> parameters;
  std::vector<DatasetFit> datasets;
  // Pooled over every dataset's rows.
  double fit_before_pct = 0.0, fit_after_pct = 0.0;
  double held_before_pct = 0.0, held_after_pct = 0.0;
  int evaluations = 0;  // replays of the fitted datasets
  // kareus validate's reports of the same datasets on the preset and with the overlay.
  std::vector<ValidationReport> preset, calibrated;
};

// Fits the preset. InputError for invalid options, an unknown dataset name, or no dataset of the
// GPU in the manifests; what ReplayDatasets throws for a malformed manifest or file.
// Deterministic.
GpuCalibration CalibrateGpu(const CalibrateOptions& options);

// The `kareus calibrate --json` document (format kareus.calibration/1).
Json ToJson(const GpuCalibration& calibration);
// The terminal report: the parameters, the errors per dataset, and validate's metrics compared.
std::string RenderCalibration(const GpuCalibration& calibration);

}  // namespace kareus::emulator
