// SPDX-License-Identifier: Apache-2.0
// Named begin/end measurement windows over chosen GPUs, like ZeusMonitor
// (reference/perseus-lowtime-zeus.md §C1): time from a steady clock, energy from NVML's total
// energy counter (mJ since the driver loaded, Volta and newer). A GPU without the counter falls
// back to integrating nvmlDeviceGetPowerUsage on a poller thread.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/device/nvml.h"

namespace kareus::runtime {

struct EnergyMonitorOptions {
  std::vector<int> gpus;              // NVML indices to measure; empty: every GPU
  double power_poll_period_s = 0.01;  // power sampling period of the fallback (no counter)

  // The first invalid field, its value and the rule; nullopt when valid (GPU indices are
  // checked against the machine when the monitor opens them).
  std::optional<OptionError> Validate() const;
};

struct EnergyMeasurement {
  double time_s = 0.0;               // window length (steady clock)
  std::vector<double> gpu_energy_j;  // per monitored GPU, in the order of EnergyMonitor::gpus()
  double total_energy_j = 0.0;       // sum over the monitored GPUs
  // True when some GPU's energy came from power integration: NVML's power reading is an
  // average over about a second on recent GPUs (Zeus issue #45), so short windows are rough.
  bool power_integrated = false;
};

// Thread-safe. Windows may nest and overlap; names are unique among open windows.
class EnergyMonitor {
 public:
  // Throws EnvironmentError for unknown GPU indices or an energy counter that fails other than
  // "not supported".
  EnergyMonitor(std::shared_ptr<device::Nvml> nvml, EnergyMonitorOptions options = {});
  ~EnergyMonitor();
  EnergyMonitor(const EnergyMonitor&) = delete;
  EnergyMonitor& operator=(const EnergyMonitor&) = delete;

  // InputError when a window of that name is already open.
  void BeginWindow(const std::string& name);
  // InputError when no window of that name is open.
  EnergyMeasurement EndWindow(const std::string& name);
  void CancelWindow(const std::string& name);  // forgets the window; no error if absent

  const std::vector<int>& gpus() const { return gpus_; }
  // Whether GPU gpus()[position] is read from the energy counter (else power integration).
  bool uses_energy_counter(int position) const { return uses_counter_.at(position) != 0; }
  std::vector<std::string> open_windows() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Snapshot {
    Clock::time_point time;
    std::vector<double> energy_j;
  };
  Snapshot Take() const;
  double EnergyJ(size_t position, Clock::time_point now) const;
  void Poll();

  std::shared_ptr<device::Nvml> nvml_;
  EnergyMonitorOptions options_;
  std::vector<int> gpus_;
  std::vector<char> uses_counter_;

  mutable std::mutex mutex_;
  std::map<std::string, Snapshot> windows_;

  // Power integration (left Riemann sum: energy += last power x elapsed, so a read between
  // samples extrapolates the last power and readings never decrease).
  mutable std::mutex power_mutex_;
  std::vector<double> integrated_j_;
  std::vector<double> last_power_w_;
  Clock::time_point last_sample_;
  std::atomic<bool> stop_{false};
  std::thread poller_;
};

}  // namespace kareus::runtime
