// SPDX-License-Identifier: Apache-2.0
#include "kareus/runtime/frequency_controller.h"

#include <pthread.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "runtime/signal_guard.h"

namespace kareus::runtime {
namespace {

// Graphics clocks at the highest memory clock, as Zeus lists them (§B1: "available frequencies
// ... at the max memory clock"). A GPU or driver that does not list clocks gets an empty list.
std::vector<int> QuerySupportedClocks(const Nvml& nvml, int gpu) {
  try {
    std::vector<int> memory = nvml.SupportedMemoryClocksMhz(gpu);
    if (memory.empty()) return {};
    const int max_memory = *std::max_element(memory.begin(), memory.end());
    std::vector<int> graphics = nvml.SupportedGraphicsClocksMhz(gpu, max_memory);
    std::sort(graphics.begin(), graphics.end(), std::greater<>());
    graphics.erase(std::unique(graphics.begin(), graphics.end()), graphics.end());
    return graphics;
  } catch (const NvmlError& e) {
    if (e.code() == static_cast<int>(NvmlStatus::kNotSupported)) return {};
    throw;
  }
}

}  // namespace

std::optional<OptionError> FrequencyControllerOptions::Validate() const {
  if (gpu < 0) return OptionError{"gpu", std::to_string(gpu), "must be >= 0 (an NVML index)"};
  return std::nullopt;
}

FrequencyController::FrequencyController(std::shared_ptr<Nvml> nvml,
                                         FrequencyControllerOptions options)
    : nvml_(std::move(nvml)), options_(std::move(options)) {
  KAREUS_CHECK(nvml_ != nullptr) << "FrequencyController needs an Nvml";
  ThrowIfInvalid(options_.Validate());
  nvml_->CheckGpu(options_.gpu);
  supported_mhz_ = QuerySupportedClocks(*nvml_, options_.gpu);
  slot_ = internal::ClaimGuardSlot(nvml_->RawResetOf(options_.gpu),
                                   options_.install_signal_handlers);
  setter_ = std::thread([this] { Run(); });
}

FrequencyController::~FrequencyController() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    queue_.clear();  // pending clocks are moot: we are going back to the default
  }
  wake_.notify_all();
  if (setter_.joinable()) setter_.join();
  // Only a controller that locked something resets (a measure-only one made no set call).
  if (slot_->locked.exchange(false)) {
    const NvmlStatus status = nvml_->ResetGpuLockedClocks(options_.gpu);
    if (status != NvmlStatus::kSuccess) {
      Warn(nvml_->Describe("nvmlDeviceResetGpuLockedClocks", status) +
           "; the GPU keeps its locked clock until reset (nvidia-smi -rgc)");
    }
  }
  internal::ReleaseGuardSlot(slot_);
}

int FrequencyController::SnapToSupported(int freq_mhz) const {
  if (supported_mhz_.empty()) return freq_mhz;
  // Descending list: the first clock <= freq_mhz and the one before it bracket the request.
  const auto below = std::lower_bound(supported_mhz_.begin(), supported_mhz_.end(), freq_mhz,
                                      std::greater<>());
  if (below == supported_mhz_.begin()) return supported_mhz_.front();
  if (below == supported_mhz_.end()) return supported_mhz_.back();
  const int above = *std::prev(below);
  return above - freq_mhz <= freq_mhz - *below ? above : *below;  // ties: the higher clock
}

void FrequencyController::RequestClock(int freq_mhz) {
  if (freq_mhz <= 0) {
    ThrowInput("freq_mhz", std::to_string(freq_mhz), "must be a positive clock in MHz");
  }
  const int target = SnapToSupported(freq_mhz);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.requests;
    if (target == last_requested_mhz_ || measure_only_) {
      ++stats_.unchanged;
      return;
    }
    last_requested_mhz_ = target;
    queue_.push_back(target);
  }
  wake_.notify_one();
}

void FrequencyController::RequestReset() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (last_requested_mhz_ == kResetRequest) return;
    last_requested_mhz_ = kResetRequest;
    queue_.push_back(kResetRequest);
  }
  wake_.notify_one();
}

void FrequencyController::WaitIdle() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return (queue_.empty() && !busy_) || stop_; });
}

void FrequencyController::ResetClocks() {
  RequestReset();
  WaitIdle();
}

bool FrequencyController::measure_only() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return measure_only_;
}

FrequencyControllerStats FrequencyController::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void FrequencyController::Warn(const std::string& message) const {
  if (options_.warn) {
    options_.warn(message);
  } else {
    std::fprintf(stderr, "kareus: warning: %s\n", message.c_str());
    std::fflush(stderr);
  }
}

void FrequencyController::Run() {
  // SIGINT/SIGTERM go to other threads, so the handler never waits on this thread's own call.
  sigset_t blocked;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGINT);
  sigaddset(&blocked, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &blocked, nullptr);

  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) break;
    int target = 0;
    if (options_.coalesce) {
      target = queue_.back();
      stats_.coalesced += static_cast<int64_t>(queue_.size()) - 1;
      queue_.clear();
    } else {
      target = queue_.front();
      queue_.pop_front();
    }
    busy_ = true;
    lock.unlock();
    Apply(target);
    lock.lock();
    busy_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
  idle_.notify_all();
}

// Runs on the setter thread, without the mutex except to publish results.
void FrequencyController::Apply(int target_mhz) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (measure_only_ || target_mhz == stats_.applied_mhz) {
      if (!measure_only_) ++stats_.unchanged;
      return;
    }
  }
  if (target_mhz == kResetRequest) {
    if (!slot_->locked.exchange(false)) return;
    const NvmlStatus status = nvml_->ResetGpuLockedClocks(options_.gpu);
    std::lock_guard<std::mutex> lock(mutex_);
    if (status == NvmlStatus::kSuccess) {
      stats_.applied_mhz = 0;
    } else {
      ++stats_.failures;
    }
    return;
  }
  if (!slot_->BeginSet()) return;  // a signal or exit is resetting the clocks
  const bool was_locked = slot_->locked.exchange(true);
  const NvmlStatus status = nvml_->SetGpuLockedClocks(options_.gpu, target_mhz, target_mhz);
  slot_->EndSet();

  std::string warning;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.set_calls;
    if (status == NvmlStatus::kSuccess) {
      stats_.applied_mhz = target_mhz;
    } else {
      ++stats_.failures;
      if (!was_locked) slot_->locked.store(false);  // nothing of ours to reset
      if (status == NvmlStatus::kNoPermission) {
        measure_only_ = true;
        queue_.clear();
        warning = nvml_->Describe("nvmlDeviceSetGpuLockedClocks", status) +
                  fmt::format(" on GPU {}: setting clocks needs root or CAP_SYS_ADMIN "
                              "(docker --cap-add SYS_ADMIN); continuing in measure-only mode "
                              "with the default clocks, no further clock changes",
                              options_.gpu);
      } else if (std::find(warned_codes_.begin(), warned_codes_.end(),
                           static_cast<int>(status)) == warned_codes_.end()) {
        warned_codes_.push_back(static_cast<int>(status));
        warning = nvml_->Describe("nvmlDeviceSetGpuLockedClocks", status) +
                  fmt::format(" on GPU {} at {} MHz; the previous clock stays (warned once per "
                              "error code)",
                              options_.gpu, target_mhz);
      }
    }
  }
  if (!warning.empty()) Warn(warning);
}

}  // namespace kareus::runtime
