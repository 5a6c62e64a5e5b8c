// SPDX-License-Identifier: Apache-2.0
// What a signal, std::terminate, exit() or fork() does to clocks this process locked. Each live
// FrequencyController owns one slot of a fixed array in static storage; a handler only reads and
// writes atomics there and talks to the clock watcher (clock_watcher.h) with send/poll/recv:
// no NVML call, no lock, no allocation in any handler.
#pragma once

#include <atomic>
#include <cstdint>

namespace kareus::device::internal {

struct GuardSlot {
  int index = 0;                      // position in the array: the slot id the watcher knows
  std::atomic<bool> claimed{false};   // owned by a controller
  std::atomic<bool> active{false};    // gpu/watcher_fd are published and valid
  std::atomic<bool> locked{false};    // we may have locked clocks: a reset is due
  std::atomic<bool> stopping{false};  // a signal/exit is resetting: the setter must not set
  std::atomic<int> in_flight{0};      // set calls in progress on the setter thread
  std::atomic<int> gpu{-1};           // NVML index
  std::atomic<int> watcher_fd{-1};    // socket to the clock watcher

  // Bracket a set call: false means "do not set, the process is going down".
  bool BeginSet();
  void EndSet() { in_flight.fetch_sub(1); }
};

// Claims a slot for a controller of `gpu` whose watcher listens on `watcher_fd`, and (once per
// process, when asked) installs the SIGINT/SIGTERM/SIGHUP/SIGQUIT handlers, the terminate
// handler and the exit hook; the fork handler is installed in any case. Throws Error when every
// slot is taken.
GuardSlot* ClaimGuardSlot(int gpu, int watcher_fd, bool install_handlers);
void ReleaseGuardSlot(GuardSlot* slot);

// Marks every active slot stopping, waits (bounded, 200 ms) for in-flight set calls, then asks
// the watcher to reset each GPU this process locked and waits (bounded) for its answers.
// Async-signal-safe. A slot whose set call did not finish in time keeps `locked`: its watcher
// resets it when the process ends, the controller's destructor when it does not.
void ResetAllGuarded();

// Incremented in every child of fork() (pthread_atfork): objects made before the fork compare
// it with the value they recorded and, in the child, leave clocks, threads and locks alone.
uint64_t ForkGeneration();

// Registers a watcher socket so that a forked child closes its copy (the watcher then sees the
// socket close only when the process that started it ends). Returns a registry index.
int RegisterWatcherFd(int fd);
int WatcherFd(int registry_index);      // -1 once closed (or in a forked child)
int TakeWatcherFd(int registry_index);  // unregisters and returns the fd for closing

// True when our handler is installed for `signal_number` (tests).
bool GuardHandlerInstalled(int signal_number);

}  // namespace kareus::device::internal
