// SPDX-License-Identifier: Apache-2.0
// `kareus device-check`: what this machine's GPUs are and how the emulator compares with them.
// Read-only: it never changes clocks or power limits. Sections, each with its own status so one
// failure does not hide the rest:
//   nvml            the GPUs NVML sees: name, UUID, supported SM and memory clocks, power limits,
//                   current clocks, clock event reasons, temperature, the energy counter
//   cuda            driver, cuBLASLt and NCCL versions, how attention runs, the CUDA devices
//                   (SMs, memory, their NVML index)
//   energy_counter  per GPU: the counter's update period and the idle power, measured
//   workload        the workload measured and the clock it is measured at (the clock as found)
//   kernels         every compute kernel of every partition type alone: measured time against
//                   the emulator's (SimulateKernel on all SMs)
//   partitions      every partition type: its compute ops of one nanobatch (the occurrence
//                   without a collective: runs on one GPU) and, with enough GPUs, the whole
//                   partition at a few knobs: time, energy, average power against the emulator
//                   and their relative errors, (emulated - measured) / measured
//   energy_window   one partition over two window lengths: the protocol's self-consistency
//   nccl            communicators with minCTAs = maxCTAs: a one-rank plumbing check, and with
//                   several GPUs the collective's time per SM count against the emulator
// A section has "status": "ok" or "error" (with "error": the message); a row that failed carries
// its own "error".
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/common/json.h"

namespace kareus::measure {

struct DeviceCheckOptions {
  std::filesystem::path workload;  // a workload file (the CLI's default: examples/device/)
  std::vector<int> devices;        // CUDA ordinals to use; empty: 0, 1, ...
  double window_s = 2.0;           // energy window per partition measurement
  double cooldown_s = 0.5;         // idle before each window
  int kernel_runs = 50;            // timed runs per kernel (after 5 warm-up runs)
  bool quiet = true;               // no notes on stderr from the backend
  // Called with the report so far after each section (the CLI saves it, so a run cut short by
  // a time limit still leaves every finished section on disk).
  std::function<void(const Json& partial)> on_section;

  // The first invalid field, its value and the rule; nullopt when valid.
  std::optional<OptionError> Validate() const;
};

// Runs the check. Throws only for invalid options or an unreadable workload (InputError);
// everything the machine does wrong lands in its section.
Json RunDeviceCheck(const DeviceCheckOptions& options);

// The report as text: one block per section, tables side by side with the emulator.
std::string FormatDeviceCheck(const Json& report);

// The default workload of the check: examples/device/llama3.2-3b-tp8-h200.yaml next to the data
// folder (a source tree or an installation); empty when it is not there.
std::filesystem::path DefaultDeviceCheckWorkload();

}  // namespace kareus::measure
