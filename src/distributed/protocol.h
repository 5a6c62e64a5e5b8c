// SPDX-License-Identifier: Apache-2.0
// The messages between the planner (rank 0) and the executors, by tag. Every body is encoded
// with distributed/codec.h.
#pragma once

namespace kareus::distributed::internal {

enum Tag : int {
  kReady = 1,   // executor -> planner: set up (host, pid, per-workload backend identity) or why not
  kUnit = 2,    // planner -> executor: measure one unit (a batch slice of one partition type)
  kSample = 3,  // executor -> planner: one measurement of a unit, as soon as it exists
  kUnitDone = 4,  // executor -> planner: the unit's backend GPU-seconds and measurement count
  kJob = 5,       // planner -> executor: finish one workload (evaluate) with its profile
  kJobDone = 6,   // executor -> planner: the workload's files and evaluation row
  kFailed = 7,    // executor -> planner: a unit or job failed (why)
  kStop = 8,      // planner -> executor: no more work
  kBye = 9,       // executor -> planner: stopped
};

}  // namespace kareus::distributed::internal
