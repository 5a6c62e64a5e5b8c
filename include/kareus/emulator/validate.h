// SPDX-License-Identifier: Apache-2.0
// The emulator against real measurements: every dataset in data/validation/ (measured on real
// GPUs by the Zeus/Perseus projects, NOTICE there) is replayed on the emulator with an
// equal-FLOPs stand-in workload written as a workload file, and compared by shape: time and
// energy normalized to the top clock, the energy-optimal clock and the saving there, the power
// at the top clock; for a power-limit sweep, the time against the highest limit. Kareus's own
// real-GPU checks (`kareus device-check` reports and the power probe of
// scripts/device-power-probe.py, data/validation/h200-device/) are replayed row by row at the
// measured conditions and compared in absolute time, energy, power and realized clock.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kareus/common/json.h"
#include "kareus/hw/gpu_overlay.h"
#include "kareus/workload/ops.h"

namespace kareus::emulator {

struct ReplayOptions {
  std::filesystem::path data_dir;  // holds datasets.yaml; empty: DataDir()/validation
  // Only the datasets of these names (empty: all); InputError for a name the manifest lacks.
  std::vector<std::string> datasets;
  // Only the datasets measured on this GPU preset ("": all).
  std::string gpu;
  // Overlays of refitted constants (kareus calibrate): each applies to every dataset measured on
  // its preset, on top of the preset and of any overlay the stand-in workload names.
  std::vector<hw::GpuOverlay> overlays;
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
  double measured_power_w = 0.0;      // E / t
  double emulated_power_w = 0.0;
  double emulated_freq_mhz = 0.0;  // time-weighted realized clock
};

// What a row of a real-GPU check measured: a partition or a kernel (device_check), a load
// (power_probe). ToString: "partition", "kernel", "probe" (the JSON and the tables).
enum class RowSection { kPartition, kKernel, kProbe };
const char* ToString(RowSection section);

// The kinds of dataset the manifest lists. ToString: "stage_profile", "power_limit_sweep",
// "device_check", "power_probe" (the manifest's and the JSON's names).
enum class DatasetKind { kStageProfile, kPowerLimitSweep, kDeviceCheck, kPowerProbe };
const char* ToString(DatasetKind kind);

// One row of a real-GPU check replayed on the emulator. Relative errors are (emulated -
// measured) / measured in percent; NaN where a quantity was not measured (a kernel's energy).
struct DeviceRow {
  RowSection section = RowSection::kPartition;
  std::string name;   // partition type; "type/op"; the probe's load
  std::string shape;  // kernels and probe loads; "" for partitions
  // false: the measured thing is not what the emulator models (unfused attention, a split-K
  // GEMM, an L2-resident load, ...): reported, kept out of the medians; `note` says why.
  bool comparable = true;
  std::string note;
  double measured_time_s = 0.0, emulated_time_s = 0.0;  // per run (probe: per step)
  double measured_energy_j = 0.0, emulated_energy_j = 0.0;
  double measured_power_w = 0.0, emulated_power_w = 0.0;
  double measured_freq_mhz = 0.0, emulated_freq_mhz = 0.0;  // realized SM clock
  double time_error_pct = 0.0, energy_error_pct = 0.0, power_error_pct = 0.0, freq_error_pct = 0.0;
};

// Median |relative error| in percent over a set of rows (NaN where no row has the quantity).
struct DeviceMedians {
  int rows = 0;
  double time_pct = 0.0, energy_pct = 0.0, power_pct = 0.0, freq_pct = 0.0;
};

struct DatasetResult {
  std::string name;  // "gpt3-175b-a100", ...
  DatasetKind kind = DatasetKind::kStageProfile;
  std::string file;        // the measured CSV, relative to the data directory
  std::string source;      // repository @ commit : path
  std::string workload;    // the stand-in workload file, relative to the data directory
  std::string gpu;         // preset, with the power limit the stand-in sets
  std::string gpu_preset;  // the preset alone ("A40")
  std::string overlay;     // the tag of the overlay replayed ("" = the preset as is)
  // The manifest's `compare` (stage_profile, power_limit_sweep): false (`shape`, the default):
  // the stand-in holds the measured work only in FLOPs, so only shapes are compared; true
  // (`absolute`): the workload is the measured one, and kareus calibrate also fits the absolute
  // time and energy.
  bool absolute = false;
  std::string calibrates;          // which constants this dataset calibrated ("" = validation only)
  std::vector<StageCurve> curves;  // stage_profile
  std::vector<PowerLimitPoint> limits;  // power_limit_sweep, descending limits
  // device_check, power_probe: every row, and the medians over the comparable rows per section
  // (device_check: partitions and kernels; power_probe: the loads) and over the partitions that
  // are not comparable (unfused attention; the backend's hashed dropout), reported apart.
  std::string device;  // the measured card, as the file names it
  std::vector<DeviceRow> rows;
  DeviceMedians partitions, partitions_not_comparable, kernels, probe;
};

struct ValidationReport {
  std::vector<DatasetResult> datasets;
};

// Replays every dataset listed in <data_dir>/datasets.yaml. InputError names the file and the
// field for a malformed manifest, CSV or workload.
ValidationReport ReplayDatasets(const ReplayOptions& options = {});

// The `kareus validate --json` document (format kareus.validation/1).
Json ToJson(const ValidationReport& report);
// The terminal tables, one per dataset.
std::string RenderValidation(const ValidationReport& report);
// The headline metrics of each dataset, on the preset and with an overlay, side by side (the
// reports of the same manifest, without and with the overlay: kareus validate --gpu-overlay,
// kareus calibrate).
std::string RenderComparison(const ValidationReport& preset, const ValidationReport& overlay);

}  // namespace kareus::emulator
