// SPDX-License-Identifier: Apache-2.0
// What the parts of kareus validate share (validate.cc: the manifest and the CSV datasets;
// validate_device.cc: Kareus's own GPU checks; validate_report.cc: JSON and tables).
#pragma once

#include <filesystem>
#include <string>

#include "kareus/emulator/validate.h"
#include "kareus/hw/gpu_spec.h"
#include "kareus/workload/workload.h"

namespace kareus::emulator::internal {

inline double Percent(double value) { return 100.0 * value; }
// A table cell: the value with `decimals` decimals, "-" when it is not finite.
std::string Cell(double value, int decimals);

// A device_check JSON file (kareus device-check --json) replayed on the emulator.
void ReplayDeviceCheck(const std::filesystem::path& path, const workload::Workload& w,
                       DatasetResult& out);
// A power_probe JSON file (scripts/device-power-probe.py) replayed on the GPU preset alone.
void ReplayPowerProbe(const std::filesystem::path& path, const hw::GpuSpec& preset,
                      DatasetResult& out);

}  // namespace kareus::emulator::internal
