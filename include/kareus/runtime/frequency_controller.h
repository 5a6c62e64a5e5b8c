// SPDX-License-Identifier: Apache-2.0
// Applies GPU clocks off the training thread. Modelled on Zeus's FrequencyController
// (reference/perseus-lowtime-zeus.md §B1): NVML's setter takes 10-20 ms, so the training
// thread only enqueues the clock and a setter thread makes the call, only when it changes.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/runtime/nvml.h"

namespace kareus::runtime {

namespace internal {
struct GuardSlot;
}

struct FrequencyControllerOptions {
  int gpu = 0;                          // NVML index of the GPU (see NvmlIndexForCudaDevice)
  bool install_signal_handlers = true;  // reset clocks on SIGINT/SIGTERM, then die as before
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

// One GPU's locked SM clock. Clocks are reset to the default (nvmlDeviceResetGpuLockedClocks)
// by the destructor, ResetClocks(), SIGINT/SIGTERM, std::terminate and exit(). Without the
// privilege to set clocks (NVML_ERROR_NO_PERMISSION) it warns once and measures only: no
// further NVML set or reset calls. RequestClock/RequestReset never wait for NVML.
// Thread-safe; usually driven by one training thread.
class FrequencyController {
 public:
  // Throws EnvironmentError for a GPU index NVML does not know.
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
  int gpu() const { return options_.gpu; }
  // Graphics clocks the GPU supports at its highest memory clock, descending; empty when NVML
  // does not list them (then requests are passed through unchanged).
  const std::vector<int>& supported_clocks_mhz() const { return supported_mhz_; }
  // The supported clock nearest to freq_mhz (ties: the higher one); freq_mhz itself when the
  // list is empty.
  int SnapToSupported(int freq_mhz) const;

 private:
  static constexpr int kResetRequest = 0;  // queue entry meaning "reset to default"

  void Run();
  void Apply(int target_mhz);
  void Warn(const std::string& message) const;

  std::shared_ptr<Nvml> nvml_;
  FrequencyControllerOptions options_;
  std::vector<int> supported_mhz_;
  internal::GuardSlot* slot_ = nullptr;

  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the setter: work or stop
  std::condition_variable idle_;  // WaitIdle: queue empty and the setter not busy
  std::deque<int> queue_;
  int last_requested_mhz_ = kResetRequest;  // training-thread view, for change detection
  bool busy_ = false;
  bool stop_ = false;
  bool measure_only_ = false;
  FrequencyControllerStats stats_;
  std::vector<int> warned_codes_;  // one warning per distinct NVML failure code
  std::thread setter_;
};

}  // namespace kareus::runtime
