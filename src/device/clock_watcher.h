// SPDX-License-Identifier: Apache-2.0
// The clock watcher: a small process (kareus-clock-watcher) that a process setting GPU clocks
// starts once per NVML library. It is connected by a Unix socket (SOCK_SEQPACKET) and told,
// before every set call, which GPU a controller may lock; when the socket closes for any reason
// (exit, _exit, a crash, SIGKILL: the kernel closes it once the last thread of the process is
// gone, so no set call can land afterwards) it resets every GPU still armed and exits. It
// ignores SIGINT/SIGTERM/SIGHUP/SIGQUIT and runs in its own session, so a Ctrl-C or a kill of
// the process group does not take it down with the job.
//
// Protocol: one fixed-size WatcherMessage per record.
//   parent -> watcher  'L' slot gpu   slot may lock gpu (sent before every set call)
//                      'U' slot gpu   slot reset gpu itself: nothing to do for it any more
//                      'R' slot gpu   reset gpu now if slot armed it, disarm, answer 'r'
//   watcher -> parent  'K'            started, NVML initialized (once, first)
//                      'E' + text     could not start (NVML missing, ...), then exits
//                      'r'            answer to 'R'
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

namespace kareus::device::internal {

struct WatcherMessage {
  char op = 0;
  char text[119] = {};  // 'E': the reason, NUL-terminated
  int32_t slot = -1;
  int32_t gpu = -1;
};

// The watcher program's path: $KAREUS_CLOCK_WATCHER, else kareus-clock-watcher beside the
// library or executable holding this code (or in ../libexec/kareus/ from there), else at the
// install path, else the one in the build tree. Empty when none is executable.
std::string FindClockWatcherProgram();

class ClockWatcher {
 public:
  // The process's watcher for NVML library `library_path` (started on first use, shared by
  // every controller of the process, closed with the last one). Throws EnvironmentError when it
  // cannot be found or started.
  static std::shared_ptr<ClockWatcher> ForLibrary(const std::string& library_path);
  ~ClockWatcher();  // closes the socket: the watcher resets what is still armed and exits
  ClockWatcher(const ClockWatcher&) = delete;
  ClockWatcher& operator=(const ClockWatcher&) = delete;

  // Tell the watcher; false when it is gone (the message could not be sent).
  bool Arm(int slot, int gpu) const;
  bool Disarm(int slot, int gpu) const;

  int fd() const;  // -1 in a forked child (the atfork handler closed it there)
  pid_t pid() const { return pid_; }

 private:
  ClockWatcher(int registry_index, pid_t pid, uint64_t generation)
      : registry_index_(registry_index), pid_(pid), generation_(generation) {}
  int registry_index_;
  pid_t pid_;
  uint64_t generation_;  // ForkGeneration() when started: a forked child never owns it
};

// Async-signal-safe (send, poll, recv only): asks the watcher behind `fd` to reset `gpu` for
// `slot` now and waits up to `timeout_ms` for its answer. False on any failure.
bool ResetThroughWatcher(int fd, int slot, int gpu, int timeout_ms);

// The pid of the watcher serving this process for the NVML library `library_path`, or -1 when
// none runs (tests).
pid_t ClockWatcherPid(const std::string& library_path);

}  // namespace kareus::device::internal
