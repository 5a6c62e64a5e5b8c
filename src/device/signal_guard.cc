// SPDX-License-Identifier: Apache-2.0
#include "device/signal_guard.h"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <mutex>

#include "device/clock_watcher.h"
#include "kareus/common/error.h"

namespace kareus::device::internal {
namespace {

constexpr int kMaxSlots = 64;
GuardSlot g_slots[kMaxSlots];

constexpr int kMaxWatchers = 16;
struct WatcherFdSlot {
  std::atomic<int> fd{-1};  // constant-initialized: -1 before any constructor runs
};
WatcherFdSlot g_watcher_fds[kMaxWatchers];

std::atomic<uint64_t> g_fork_generation{0};

// The signals that end a process by default and that a person or a job scheduler sends to ask
// it to stop; fatal faults (SIGSEGV, SIGABRT, ...) are left alone: the watcher resets after them.
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
struct sigaction g_previous[NSIG];
std::atomic<bool> g_installed[NSIG];
std::terminate_handler g_previous_terminate = nullptr;
std::once_flag g_process_hooks_once;
std::once_flag g_fork_hook_once;
std::mutex g_install_mutex;

// The watcher answers a reset within NVML's setter latency (10-20 ms); the bound only matters
// when it is stuck or gone.
constexpr int kResetAnswerTimeoutMs = 2000;

void SleepOneMillisecond() {
  timespec delay{.tv_sec = 0, .tv_nsec = 1'000'000};
  nanosleep(&delay, nullptr);  // async-signal-safe
}

// Reset (through the watcher), then hand the signal to whatever was there before us (by
// default: the process ends by this signal, so the parent sees the usual status).
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

// In the child of fork(): nothing here belongs to it. Its slots go inactive (so its handlers
// and exit hook reset nothing) and its copies of the watcher sockets are closed (so the watcher
// keeps waiting for the parent). Only atomics and close(): async-signal-safe, as a fork child
// handler of a multithreaded parent must be.
void AfterForkInChild() {
  g_fork_generation.fetch_add(1);
  for (GuardSlot& slot : g_slots) {
    slot.active.store(false);
    slot.locked.store(false);
    slot.stopping.store(false);
    slot.in_flight.store(0);
    slot.watcher_fd.store(-1);
    slot.claimed.store(false);
  }
  for (WatcherFdSlot& slot : g_watcher_fds) {
    const int old = slot.fd.exchange(-1);
    if (old >= 0) close(old);
  }
}

void InstallSignalHandlers() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  for (int signal_number : kSignals) {
    if (g_installed[signal_number].load()) continue;
    struct sigaction current {};
    sigaction(signal_number, nullptr, &current);
    // A process that ignores the signal keeps ignoring it (the watcher still resets at exit).
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

uint64_t ForkGeneration() { return g_fork_generation.load(std::memory_order_relaxed); }

int RegisterWatcherFd(int fd) {
  std::call_once(g_fork_hook_once, [] { pthread_atfork(nullptr, nullptr, AfterForkInChild); });
  for (int i = 0; i < kMaxWatchers; ++i) {
    int expected = -1;
    if (g_watcher_fds[i].fd.compare_exchange_strong(expected, fd)) return i;
  }
  throw Error("too many clock watchers in this process (at most 16 NVML libraries)");
}

int WatcherFd(int registry_index) { return g_watcher_fds[registry_index].fd.load(); }

int TakeWatcherFd(int registry_index) { return g_watcher_fds[registry_index].fd.exchange(-1); }

GuardSlot* ClaimGuardSlot(int gpu, int watcher_fd, bool install_handlers) {
  std::call_once(g_fork_hook_once, [] { pthread_atfork(nullptr, nullptr, AfterForkInChild); });
  GuardSlot* claimed = nullptr;
  for (int i = 0; i < kMaxSlots; ++i) {
    bool expected = false;
    if (g_slots[i].claimed.compare_exchange_strong(expected, true)) {
      claimed = &g_slots[i];
      claimed->index = i;
      break;
    }
  }
  if (claimed == nullptr) {
    throw Error("too many live frequency controllers in this process (at most 64)");
  }
  claimed->locked.store(false);
  claimed->stopping.store(false);
  claimed->in_flight.store(0);
  claimed->gpu.store(gpu);
  claimed->watcher_fd.store(watcher_fd);
  claimed->active.store(true);  // publishes gpu/watcher_fd
  if (install_handlers) InstallSignalHandlers();
  return claimed;
}

void ReleaseGuardSlot(GuardSlot* slot) {
  if (slot == nullptr) return;
  slot->active.store(false);
  slot->watcher_fd.store(-1);
  slot->claimed.store(false);
}

void ResetAllGuarded() {
  for (GuardSlot& slot : g_slots) {
    if (slot.active.load()) slot.stopping.store(true);
  }
  // Bounded wait: the setter thread blocks the handled signals, so it is never the one waiting
  // here; 200 ms covers NVML's 10-20 ms setter latency with margin.
  for (GuardSlot& slot : g_slots) {
    if (!slot.active.load()) continue;
    for (int i = 0; i < 200 && slot.in_flight.load() > 0; ++i) SleepOneMillisecond();
  }
  for (GuardSlot& slot : g_slots) {
    if (!slot.active.load() || slot.in_flight.load() > 0) continue;  // late set: see header
    if (!slot.locked.exchange(false)) continue;
    if (!ResetThroughWatcher(slot.watcher_fd.load(), slot.index, slot.gpu.load(),
                             kResetAnswerTimeoutMs)) {
      slot.locked.store(true);  // not confirmed: the watcher (still armed) resets at exit
    }
  }
}

bool GuardHandlerInstalled(int signal_number) {
  return signal_number > 0 && signal_number < NSIG && g_installed[signal_number].load();
}

}  // namespace kareus::device::internal
