// SPDX-License-Identifier: Apache-2.0
#include "kareus/runtime/energy_monitor.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace kareus::runtime {

std::optional<OptionError> EnergyMonitorOptions::Validate() const {
  if (!(power_poll_period_s > 0.0) || !std::isfinite(power_poll_period_s)) {
    return OptionError{"power_poll_period_s", fmt::format("{}", power_poll_period_s),
                       "must be a finite number > 0"};
  }
  for (int gpu : gpus) {
    if (gpu < 0) return OptionError{"gpus", std::to_string(gpu), "must be >= 0"};
    if (std::count(gpus.begin(), gpus.end(), gpu) > 1) {
      return OptionError{"gpus", std::to_string(gpu), "each GPU may be listed once"};
    }
  }
  return std::nullopt;
}

EnergyMonitor::EnergyMonitor(std::shared_ptr<device::Nvml> nvml, EnergyMonitorOptions options)
    : nvml_(std::move(nvml)), options_(std::move(options)) {
  KAREUS_CHECK(nvml_ != nullptr) << "EnergyMonitor needs an Nvml";
  ThrowIfInvalid(options_.Validate());
  gpus_ = options_.gpus;
  if (gpus_.empty()) {
    for (int gpu = 0; gpu < nvml_->device_count(); ++gpu) gpus_.push_back(gpu);
  }
  bool any_fallback = false;
  for (int gpu : gpus_) {
    nvml_->CheckGpu(gpu);
    uint64_t energy_mj = 0;
    const device::NvmlStatus status = nvml_->TotalEnergyMj(gpu, &energy_mj);
    if (status == device::NvmlStatus::kSuccess) {
      uses_counter_.push_back(1);
    } else if (status == device::NvmlStatus::kNotSupported) {
      uses_counter_.push_back(0);  // pre-Volta: no counter
      any_fallback = true;
    } else {
      throw device::NvmlError(nvml_->Describe("nvmlDeviceGetTotalEnergyConsumption", status) +
                                  fmt::format(" on GPU {}", gpu),
                              static_cast<int>(status));
    }
  }
  integrated_j_.assign(gpus_.size(), 0.0);
  last_power_w_.assign(gpus_.size(), 0.0);
  if (any_fallback) {
    for (size_t i = 0; i < gpus_.size(); ++i) {
      if (!uses_counter_[i]) last_power_w_[i] = nvml_->PowerW(gpus_[i]);
    }
    last_sample_ = Clock::now();
    poller_ = std::thread([this] { Poll(); });
  }
}

EnergyMonitor::~EnergyMonitor() {
  stop_.store(true);
  if (poller_.joinable()) poller_.join();
}

void EnergyMonitor::Poll() {
  const auto period = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options_.power_poll_period_s));
  while (!stop_.load()) {
    std::this_thread::sleep_for(period);
    std::vector<double> power_w(gpus_.size(), 0.0);
    for (size_t i = 0; i < gpus_.size(); ++i) {
      if (uses_counter_[i]) continue;
      try {
        power_w[i] = nvml_->PowerW(gpus_[i]);
      } catch (const device::NvmlError&) {
        power_w[i] = -1.0;  // keep the last reading
      }
    }
    std::lock_guard<std::mutex> lock(power_mutex_);
    const Clock::time_point now = Clock::now();
    const double elapsed_s = std::chrono::duration<double>(now - last_sample_).count();
    for (size_t i = 0; i < gpus_.size(); ++i) {
      if (uses_counter_[i]) continue;
      integrated_j_[i] += last_power_w_[i] * elapsed_s;
      if (power_w[i] >= 0.0) last_power_w_[i] = power_w[i];
    }
    last_sample_ = now;
  }
}

double EnergyMonitor::EnergyJ(size_t position, Clock::time_point now) const {
  if (uses_counter_[position]) {
    uint64_t energy_mj = 0;
    const device::NvmlStatus status = nvml_->TotalEnergyMj(gpus_[position], &energy_mj);
    if (status != device::NvmlStatus::kSuccess) {
      throw device::NvmlError(nvml_->Describe("nvmlDeviceGetTotalEnergyConsumption", status) +
                                  fmt::format(" on GPU {}", gpus_[position]),
                              static_cast<int>(status));
    }
    return static_cast<double>(energy_mj) / 1000.0;
  }
  std::lock_guard<std::mutex> lock(power_mutex_);
  const double since_sample_s = std::chrono::duration<double>(now - last_sample_).count();
  return integrated_j_[position] + last_power_w_[position] * std::max(0.0, since_sample_s);
}

EnergyMonitor::Snapshot EnergyMonitor::Take() const {
  Snapshot snapshot;
  snapshot.time = Clock::now();
  snapshot.energy_j.reserve(gpus_.size());
  for (size_t i = 0; i < gpus_.size(); ++i) snapshot.energy_j.push_back(EnergyJ(i, snapshot.time));
  return snapshot;
}

void EnergyMonitor::BeginWindow(const std::string& name) {
  Snapshot snapshot = Take();
  std::lock_guard<std::mutex> lock(mutex_);
  if (!windows_.emplace(name, std::move(snapshot)).second) {
    ThrowInput("window", name, "a window of this name is already open");
  }
}

EnergyMeasurement EnergyMonitor::EndWindow(const std::string& name) {
  const Snapshot end = Take();
  Snapshot begin;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = windows_.find(name);
    if (it == windows_.end()) ThrowInput("window", name, "no window of this name is open");
    begin = std::move(it->second);
    windows_.erase(it);
  }
  EnergyMeasurement measurement;
  measurement.time_s = std::chrono::duration<double>(end.time - begin.time).count();
  for (size_t i = 0; i < gpus_.size(); ++i) {
    const double energy_j = end.energy_j[i] - begin.energy_j[i];
    measurement.gpu_energy_j.push_back(energy_j);
    measurement.total_energy_j += energy_j;
    if (!uses_counter_[i]) measurement.power_integrated = true;
  }
  return measurement;
}

void EnergyMonitor::CancelWindow(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  windows_.erase(name);
}

std::vector<std::string> EnergyMonitor::open_windows() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> names;
  for (const auto& [name, snapshot] : windows_) names.push_back(name);
  return names;
}

}  // namespace kareus::runtime
