// SPDX-License-Identifier: Apache-2.0
#include "runtime/signal_guard.h"

#include <csignal>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <mutex>

#include <cerrno>

namespace kareus::runtime::internal {
namespace {

constexpr int kMaxSlots = 64;
GuardSlot g_slots[kMaxSlots];

constexpr int kSignals[] = {SIGINT, SIGTERM};
struct sigaction g_previous[NSIG];
std::atomic<bool> g_installed[NSIG];
std::terminate_handler g_previous_terminate = nullptr;
std::once_flag g_process_hooks_once;
std::mutex g_install_mutex;

void SleepOneMillisecond() {
  timespec delay{.tv_sec = 0, .tv_nsec = 1'000'000};
  nanosleep(&delay, nullptr);  // async-signal-safe
}

// Reset, then hand the signal to whatever was there before us (by default: terminate the
// process with this signal, so the parent sees the usual "killed by SIGTERM" status).
void HandleSignal(int signal_number) {
  const int saved_errno = errno;
  ResetAllGuarded();
  sigaction(signal_number, &g_previous[signal_number], nullptr);
  g_installed[signal_number].store(false);
  errno = saved_errno;
  raise(signal_number);  // delivered when this handler returns
}

[[noreturn]] void HandleTerminate() {
  ResetAllGuarded();
  if (g_previous_terminate != nullptr) g_previous_terminate();
  std::abort();
}

void InstallSignalHandlers() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  for (int signal_number : kSignals) {
    if (g_installed[signal_number].load()) continue;
    struct sigaction current {};
    sigaction(signal_number, nullptr, &current);
    // A process that ignores the signal keeps ignoring it; the controller's destructor resets.
    if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_IGN) continue;
    struct sigaction ours {};
    ours.sa_handler = HandleSignal;
    sigemptyset(&ours.sa_mask);
    ours.sa_flags = SA_RESTART;
    g_previous[signal_number] = current;
    sigaction(signal_number, &ours, nullptr);
    g_installed[signal_number].store(true);
  }
  std::call_once(g_process_hooks_once, [] {
    g_previous_terminate = std::set_terminate(HandleTerminate);
    std::atexit(ResetAllGuarded);
  });
}

}  // namespace

bool GuardSlot::BeginSet() {
  if (stopping.load()) return false;
  in_flight.fetch_add(1);
  if (stopping.load()) {
    in_flight.fetch_sub(1);
    return false;
  }
  return true;
}

GuardSlot* ClaimGuardSlot(Nvml::RawReset raw, bool install_handlers) {
  GuardSlot* claimed = nullptr;
  for (GuardSlot& slot : g_slots) {
    bool expected = false;
    if (slot.claimed.compare_exchange_strong(expected, true)) {
      claimed = &slot;
      break;
    }
  }
  if (claimed == nullptr) {
    throw Error("too many live frequency controllers in this process (at most 64)");
  }
  claimed->locked.store(false);
  claimed->stopping.store(false);
  claimed->in_flight.store(0);
  claimed->reset = raw.reset;
  claimed->device = raw.device;
  claimed->active.store(true);  // publishes reset/device
  if (install_handlers) InstallSignalHandlers();
  return claimed;
}

void ReleaseGuardSlot(GuardSlot* slot) {
  if (slot == nullptr) return;
  slot->active.store(false);
  slot->claimed.store(false);
}

void ResetAllGuarded() {
  for (GuardSlot& slot : g_slots) {
    if (!slot.active.load()) continue;
    slot.stopping.store(true);
    // Bounded wait: the setter thread blocks these signals, so it is never the one waiting here;
    // 200 ms covers NVML's 10-20 ms setter latency with margin.
    for (int i = 0; i < 200 && slot.in_flight.load() > 0; ++i) SleepOneMillisecond();
    if (slot.locked.exchange(false) && slot.reset != nullptr) slot.reset(slot.device);
  }
}

bool GuardHandlerInstalled(int signal_number) {
  return signal_number > 0 && signal_number < NSIG && g_installed[signal_number].load();
}

}  // namespace kareus::runtime::internal
