// SPDX-License-Identifier: Apache-2.0
// Resets locked clocks when the process dies by SIGINT/SIGTERM, std::terminate or exit(), for
// every live FrequencyController. The state a handler reads lives in a fixed array of slots in
// static storage (no allocation, no lock in the handler); each controller owns one slot.
#pragma once

#include <atomic>

#include "kareus/runtime/nvml.h"

namespace kareus::runtime::internal {

struct GuardSlot {
  std::atomic<bool> claimed{false};   // owned by a controller
  std::atomic<bool> active{false};    // reset/device are published and valid
  std::atomic<bool> locked{false};    // we may have locked clocks: a reset is due
  std::atomic<bool> stopping{false};  // a signal/exit is resetting: the setter must not set
  std::atomic<int> in_flight{0};      // set calls in progress on the setter thread
  int (*reset)(void* device) = nullptr;
  void* device = nullptr;

  // Bracket a set call: false means "do not set, the process is going down".
  bool BeginSet();
  void EndSet() { in_flight.fetch_sub(1); }
};

// Claims a slot for `raw` and (once per process, when asked) installs the SIGINT/SIGTERM
// handlers, the terminate handler and the exit hook. Throws Error when every slot is taken.
GuardSlot* ClaimGuardSlot(Nvml::RawReset raw, bool install_handlers);
void ReleaseGuardSlot(GuardSlot* slot);

// Resets every active slot that has clocks locked: waits (bounded) for in-flight set calls to
// finish first, so a set cannot land after the reset. Async-signal-safe apart from the NVML
// call itself, which is a driver ioctl.
void ResetAllGuarded();

// True when our handler is installed for `signal_number` (tests).
bool GuardHandlerInstalled(int signal_number);

}  // namespace kareus::runtime::internal
