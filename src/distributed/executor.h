// SPDX-License-Identifier: Apache-2.0
// An executor: what every rank runs (rank 0 on a thread of its own) to measure the units and
// finish the workloads the planner hands out.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "distributed/link.h"
#include "kareus/distributed/planner.h"

namespace kareus::distributed::internal {

// How a rank's backend for one workload identifies itself; every rank must match rank 0's.
struct Identity {
  std::string gpu;
  std::string workload_signature;
  std::string backend;
  bool operator==(const Identity&) const = default;
};

struct Ready {
  bool ok = false;
  std::string host;
  int64_t pid = 0;
  std::string error;                 // why not ok
  std::vector<Identity> identities;  // per workload
};
std::string Encode(const Ready& ready);
Ready DecodeReady(std::string_view body);

// A test switch (KAREUS_FAULT_KILL_RANK=R:N): rank R kills itself with SIGKILL right after
// sending its N-th measurement, as a crashed node would.
struct KillFault {
  int rank = -1;
  int64_t after_measurements = 0;
};
KillFault KillFaultFromEnvironment();

// Serves until the planner says stop: sets up (make_spec, one backend per workload; a failure
// goes to the planner in the ready message), then measures units and finishes workloads; a
// unit or job that fails is reported (kFailed) and the executor keeps serving.
// The kill switch is read from the environment here (a malformed value is a set-up failure).
void ServeExecutor(ExecutorLink& link, const std::function<WorkerSpec()>& make_spec,
                   const std::string& host, int64_t pid);

}  // namespace kareus::distributed::internal
