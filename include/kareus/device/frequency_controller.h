// SPDX-License-Identifier: Apache-2.0
// Applies GPU clocks off the training thread. Modelled on Zeus's FrequencyController
// (reference/perseus-lowtime-zeus.md §B1): NVML's setter takes 10-20 ms, so the training
// thread only enqueues the clock and a setter thread makes the call, only when it changes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/device/nvml.h"

namespace kareus::device {

struct FrequencyControllerOptions {
  int gpu = 0;                          // NVML index of the GPU (see NvmlIndexForCudaDevice)
  bool install_signal_handlers = true;  // reset clocks on SIGINT/SIGTERM/SIGHUP/SIGQUIT (through
                                        // the watcher), then die as before
  bool coalesce = true;                 // a setter that fell behind applies only the newest clock
  // Receives warnings (permission refused, failed calls), from any thread; default: stderr.
  std::function<void(const std::string&)> warn = nullptr;

  // The first invalid field, its value and the rule; nullopt when valid (the GPU index is
  // checked against NVML's device count when the controller opens it).
  std::optional<OptionError> Validate() const;
};

struct FrequencyControllerStats {
  int64_t requests = 0;   // RequestClock calls
  int64_t unchanged = 0;  // requests that needed no NVML call (same clock as before)
  int64_t coalesced = 0;  // requests superseded by a newer one before the setter reached them
  int64_t set_calls = 0;  // nvmlDeviceSetGpuLockedClocks calls made
  int64_t failures = 0;   // set/reset calls that failed (the permission refusal included)
  int applied_mhz = 0;    // clock NVML last accepted; 0 = the GPU's default clocks
};

// One GPU's locked SM clock. Clocks go back to the default (nvmlDeviceResetGpuLockedClocks)
// on every way out of the process (docs/ARCHITECTURE.md §8 "Clock reset, path by path"): the
// destructor and ResetClocks() reset in process; SIGINT/SIGTERM/SIGHUP/SIGQUIT, std::terminate
// and exit() reset synchronously through the clock watcher (a small process started with the
// first controller, device/clock_watcher.h) from async-signal-safe handlers; any other end
// (SIGKILL, SIGSEGV, abort, _exit, an application handler that exits) closes the watcher's
// socket and the watcher resets. A child made by fork() disarms: its copy does nothing (every
// method is a no-op, measure_only() is true, stats() are zero) and never touches the parent's
// GPU. Without the privilege to set clocks (NVML_ERROR_NO_PERMISSION) it warns once and
// measures only: no further NVML set or reset calls. RequestClock/RequestReset never wait for
// NVML. Thread-safe; usually driven by one training thread.
class FrequencyController {
 public:
  // Throws EnvironmentError for a GPU index NVML does not know, or when the clock watcher
  // (kareus-clock-watcher: $KAREUS_CLOCK_WATCHER, beside the library, or in the build tree)
  // cannot be started: no clock is locked without something to reset it.
  FrequencyController(std::shared_ptr<Nvml> nvml, FrequencyControllerOptions options = {});
  ~FrequencyController();
  FrequencyController(const FrequencyController&) = delete;
  FrequencyController& operator=(const FrequencyController&) = delete;

  // Enqueues "lock the SM clock at freq_mhz" (snapped to the nearest supported clock); returns
  // at once. Throws InputError for freq_mhz <= 0.
  void RequestClock(int freq_mhz);
  // Enqueues "back to default clocks"; returns at once.
  void RequestReset();
  // Blocks until every request made so far has been applied (or skipped).
  void WaitIdle();
  // Resets now and waits for it (for an exception handler or before a checkpoint).
  void ResetClocks();

  bool measure_only() const;
  FrequencyControllerStats stats() const;
  int gpu() const;
  // Graphics clocks the GPU supports at its highest memory clock, descending; empty when NVML
  // does not list them (then requests are passed through unchanged).
  const std::vector<int>& supported_clocks_mhz() const;
  // The supported clock nearest to freq_mhz (ties: the higher one); freq_mhz itself when the
  // list is empty.
  int SnapToSupported(int freq_mhz) const;

 private:
  struct State;
  bool Forked() const;  // true in a child of fork(): the controller belongs to the parent
  std::unique_ptr<State> state_;
};

}  // namespace kareus::device
