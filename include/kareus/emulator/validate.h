// SPDX-License-Identifier: Apache-2.0
// The emulator against real measurements: every dataset in data/validation/ (measured on real
// GPUs by the Zeus/Perseus projects, NOTICE there) is replayed on the emulator with an
// equal-FLOPs stand-in workload written as a workload file, and compared by shape: time and
// energy normalized to the top clock, the energy-optimal clock and the saving there, the power
// at the top clock; for a power-limit sweep, the time against the highest limit.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kareus/common/json.h"
#include "kareus/workload/ops.h"

namespace kareus::emulator {

struct ValidateOptions {
  std::filesystem::path data_dir;  // holds datasets.yaml; empty: DataDir()/validation
};

// One instruction of a stage profile (time and energy per locked clock), measured and emulated.
struct StageCurve {
  int stage = 0;
  schedule::Direction direction = schedule::Direction::kForward;
  std::vector<int> freqs_mhz;  // descending, the measured clocks
  std::vector<double> measured_time_s, measured_energy_j;
  std::vector<double> emulated_time_s, emulated_energy_j;
  // RMS over the clocks of (emulated - measured) of time resp. energy divided by its value at
  // the top clock, in points (x100).
  double time_rms_points = 0.0;
  double energy_rms_points = 0.0;
  int measured_optimal_mhz = 0;  // clock of the lowest energy
  int emulated_optimal_mhz = 0;
  double measured_saving_pct = 0.0;  // 1 - E(optimal) / E(top clock), percent
  double emulated_saving_pct = 0.0;
  double measured_top_power_w = 0.0;  // E / t at the top clock
  double emulated_top_power_w = 0.0;
  double top_power_error_pct = 0.0;  // emulated / measured - 1, percent
  // The time split into a clock-insensitive and a clock-scaled part: t(f) = a + b/f, least
  // squares over the clocks where the measured power is at most 90 % of the top clock's (below
  // the board's limit, where the locked clock is the running clock), the same clocks for both.
  // fixed = a; scaled = b / fit_top_mhz, the clock-scaled time at the highest fitted clock. A
  // memory-bound or communication-bound share shows up in `fixed`, tensor-core work in `scaled`.
  int fit_top_mhz = 0;
  double measured_fixed_s = 0.0, emulated_fixed_s = 0.0;
  double measured_scaled_s = 0.0, emulated_scaled_s = 0.0;
};

// One power limit of a power-limit sweep (the GPU runs unlocked, its clock capped by the limit).
struct PowerLimitPoint {
  double limit_w = 0.0;
  double measured_time_s = 0.0, measured_energy_j = 0.0;
  double emulated_time_s = 0.0, emulated_energy_j = 0.0;
  double measured_time_ratio = 0.0;  // time / time at the highest limit
  double emulated_time_ratio = 0.0;
  double time_ratio_error_pct = 0.0;  // emulated / measured ratio - 1, percent
  double measured_power_w = 0.0;     // E / t
  double emulated_power_w = 0.0;
  double emulated_freq_mhz = 0.0;    // time-weighted realized clock
};

struct DatasetResult {
  std::string name;      // "gpt3-175b-a100", ...
  std::string kind;      // "stage_profile" or "power_limit_sweep"
  std::string file;      // the measured CSV, relative to the data directory
  std::string source;    // repository @ commit : path
  std::string workload;  // the stand-in workload file, relative to the data directory
  std::string gpu;       // preset, with the power limit the stand-in sets
  std::string calibrates;  // which constants this dataset calibrated ("" = validation only)
  std::vector<StageCurve> curves;         // stage_profile
  std::vector<PowerLimitPoint> limits;    // power_limit_sweep, descending limits
};

struct ValidationReport {
  std::vector<DatasetResult> datasets;
};

// Replays every dataset listed in <data_dir>/datasets.yaml. InputError names the file and the
// field for a malformed manifest, CSV or workload.
ValidationReport Validate(const ValidateOptions& options = {});

// The `kareus validate --json` document (format kareus.validation/1).
Json ToJson(const ValidationReport& report);
// The terminal tables, one per dataset.
std::string RenderValidation(const ValidationReport& report);

}  // namespace kareus::emulator
