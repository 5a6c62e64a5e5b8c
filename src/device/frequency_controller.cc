// SPDX-License-Identifier: Apache-2.0
#include "kareus/device/frequency_controller.h"

#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "device/clock_watcher.h"
#include "device/signal_guard.h"

namespace kareus::device {
namespace {

constexpr int kResetRequest = 0;  // queue entry meaning "reset to default"

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

// Everything a controller owns, on the heap: in a forked child the whole state is left alone
// (never destroyed), because its mutex may be held and its setter thread does not exist there.
struct FrequencyController::State {
  std::shared_ptr<Nvml> nvml;
  FrequencyControllerOptions options;
  std::vector<int> supported_mhz;
  std::shared_ptr<internal::ClockWatcher> watcher;
  internal::GuardSlot* slot = nullptr;
  uint64_t generation = 0;  // internal::ForkGeneration() at construction

  mutable std::mutex mutex;
  std::condition_variable wake;  // the setter: work or stop
  std::condition_variable idle;  // WaitIdle: queue empty and the setter not busy
  std::deque<int> queue;
  int last_requested_mhz = kResetRequest;  // training-thread view, for change detection
  bool busy = false;
  bool stop = false;
  bool measure_only = false;
  bool watcher_lost = false;
  FrequencyControllerStats stats;
  std::vector<int> warned_codes;  // one warning per distinct NVML failure code
  std::thread setter;

  void Run();
  void Apply(int target_mhz);
  void ResetInProcess(const char* when);
  void Warn(const std::string& message) const;
};

FrequencyController::FrequencyController(std::shared_ptr<Nvml> nvml,
                                         FrequencyControllerOptions options)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.nvml = std::move(nvml);
  s.options = std::move(options);
  s.generation = internal::ForkGeneration();
  KAREUS_CHECK(s.nvml != nullptr) << "FrequencyController needs an Nvml";
  ThrowIfInvalid(s.options.Validate());
  s.nvml->CheckGpu(s.options.gpu);
  s.supported_mhz = QuerySupportedClocks(*s.nvml, s.options.gpu);
  s.watcher = internal::ClockWatcher::ForLibrary(s.nvml->library_path());
  s.slot =
      internal::ClaimGuardSlot(s.options.gpu, s.watcher->fd(), s.options.install_signal_handlers);
  s.setter = std::thread([&s] { s.Run(); });
}

bool FrequencyController::Forked() const {
  return state_->generation != internal::ForkGeneration();
}

FrequencyController::~FrequencyController() {
  if (Forked()) {
    // The parent's controller: its thread, its locks and its GPU are not this process's.
    (void)state_.release();
    return;
  }
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stop = true;
    s.queue.clear();  // pending clocks are moot: we are going back to the default
  }
  s.wake.notify_all();
  if (s.setter.joinable()) s.setter.join();
  // Only a controller that locked something resets (a measure-only one made no set call).
  s.ResetInProcess("nvmlDeviceResetGpuLockedClocks");
  internal::ReleaseGuardSlot(s.slot);
  s.watcher.reset();  // the last controller closes the watcher; it has nothing left to reset
}

int FrequencyController::gpu() const { return state_->options.gpu; }

const std::vector<int>& FrequencyController::supported_clocks_mhz() const {
  return state_->supported_mhz;
}

int FrequencyController::SnapToSupported(int freq_mhz) const {
  const std::vector<int>& supported = state_->supported_mhz;
  if (supported.empty()) return freq_mhz;
  // Descending list: the first clock <= freq_mhz and the one before it bracket the request.
  const auto below =
      std::lower_bound(supported.begin(), supported.end(), freq_mhz, std::greater<>());
  if (below == supported.begin()) return supported.front();
  if (below == supported.end()) return supported.back();
  const int above = *std::prev(below);
  return above - freq_mhz <= freq_mhz - *below ? above : *below;  // ties: the higher clock
}

void FrequencyController::RequestClock(int freq_mhz) {
  if (freq_mhz <= 0) {
    ThrowInput("freq_mhz", std::to_string(freq_mhz), "must be a positive clock in MHz");
  }
  if (Forked()) return;
  State& s = *state_;
  const int target = SnapToSupported(freq_mhz);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    ++s.stats.requests;
    if (target == s.last_requested_mhz || s.measure_only) {
      ++s.stats.unchanged;
      return;
    }
    s.last_requested_mhz = target;
    s.queue.push_back(target);
  }
  s.wake.notify_one();
}

void FrequencyController::RequestReset() {
  if (Forked()) return;
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.last_requested_mhz == kResetRequest) return;
    s.last_requested_mhz = kResetRequest;
    s.queue.push_back(kResetRequest);
  }
  s.wake.notify_one();
}

void FrequencyController::WaitIdle() {
  if (Forked()) return;
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  s.idle.wait(lock, [&s] { return (s.queue.empty() && !s.busy) || s.stop; });
}

void FrequencyController::ResetClocks() {
  RequestReset();
  WaitIdle();
}

bool FrequencyController::measure_only() const {
  if (Forked()) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->measure_only;
}

FrequencyControllerStats FrequencyController::stats() const {
  if (Forked()) return {};
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

void FrequencyController::State::Warn(const std::string& message) const {
  if (options.warn) {
    options.warn(message);
  } else {
    std::fprintf(stderr, "kareus: warning: %s\n", message.c_str());
    std::fflush(stderr);
  }
}

// Resets in this process if the slot may hold a locked clock, and tells the watcher it has
// nothing to do for it any more. A failed reset stays armed: the watcher retries at exit.
void FrequencyController::State::ResetInProcess(const char* when) {
  if (!slot->locked.exchange(false)) return;
  const NvmlStatus status = nvml->ResetGpuLockedClocks(options.gpu);
  if (status == NvmlStatus::kSuccess) {
    watcher->Disarm(slot->index, options.gpu);
    std::lock_guard<std::mutex> lock(mutex);
    stats.applied_mhz = 0;
    return;
  }
  slot->locked.store(true);
  {
    std::lock_guard<std::mutex> lock(mutex);
    ++stats.failures;
  }
  Warn(nvml->Describe(when, status) +
       "; the clock watcher retries when this process ends (or reset it with nvidia-smi -rgc)");
}

void FrequencyController::State::Run() {
  // These signals go to other threads, so a handler never waits on this thread's own call.
  sigset_t blocked;
  sigemptyset(&blocked);
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&blocked, signal_number);
  pthread_sigmask(SIG_BLOCK, &blocked, nullptr);

  std::unique_lock<std::mutex> lock(mutex);
  while (true) {
    wake.wait(lock, [this] { return stop || !queue.empty(); });
    if (stop) break;
    int target = 0;
    if (options.coalesce) {
      target = queue.back();
      stats.coalesced += static_cast<int64_t>(queue.size()) - 1;
      queue.clear();
    } else {
      target = queue.front();
      queue.pop_front();
    }
    busy = true;
    lock.unlock();
    Apply(target);
    lock.lock();
    busy = false;
    if (queue.empty()) idle.notify_all();
  }
  idle.notify_all();
}

// Runs on the setter thread, without the mutex except to publish results.
void FrequencyController::State::Apply(int target_mhz) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (measure_only || target_mhz == stats.applied_mhz) {
      if (!measure_only) ++stats.unchanged;
      return;
    }
  }
  if (target_mhz == kResetRequest) {
    ResetInProcess("nvmlDeviceResetGpuLockedClocks");
    return;
  }
  if (!slot->BeginSet()) return;  // a signal or exit is resetting the clocks
  // The watcher hears of the GPU before NVML is asked to lock it, so no lock ever exists that
  // the watcher would not undo.
  if (!watcher->Arm(slot->index, options.gpu)) {
    slot->EndSet();
    std::string warning;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!watcher_lost) {
        watcher_lost = true;
        warning = fmt::format(
            "the clock watcher (pid {}) is gone; GPU {} goes back to its default clocks and "
            "this controller makes no further clock changes",
            watcher->pid(), options.gpu);
      }
      measure_only = true;
      queue.clear();
    }
    ResetInProcess("nvmlDeviceResetGpuLockedClocks");
    if (!warning.empty()) Warn(warning);
    return;
  }
  const bool was_locked = slot->locked.exchange(true);
  const NvmlStatus status = nvml->SetGpuLockedClocks(options.gpu, target_mhz, target_mhz);
  slot->EndSet();

  std::string warning;
  {
    std::lock_guard<std::mutex> lock(mutex);
    ++stats.set_calls;
    if (status == NvmlStatus::kSuccess) {
      stats.applied_mhz = target_mhz;
    } else {
      ++stats.failures;
      if (!was_locked) {
        slot->locked.store(false);  // nothing of ours to reset
        watcher->Disarm(slot->index, options.gpu);
      }
      if (status == NvmlStatus::kNoPermission) {
        measure_only = true;
        queue.clear();
        warning = nvml->Describe("nvmlDeviceSetGpuLockedClocks", status) +
                  fmt::format(
                      " on GPU {}: setting clocks needs root or CAP_SYS_ADMIN "
                      "(docker --cap-add SYS_ADMIN); continuing in measure-only mode "
                      "with the default clocks, no further clock changes",
                      options.gpu);
      } else if (std::find(warned_codes.begin(), warned_codes.end(), static_cast<int>(status)) ==
                 warned_codes.end()) {
        warned_codes.push_back(static_cast<int>(status));
        warning = nvml->Describe("nvmlDeviceSetGpuLockedClocks", status) +
                  fmt::format(
                      " on GPU {} at {} MHz; the previous clock stays (warned once per "
                      "error code)",
                      options.gpu, target_mhz);
      }
    }
  }
  if (!warning.empty()) Warn(warning);
}

}  // namespace kareus::device
