// SPDX-License-Identifier: Apache-2.0
// Builds a run's typed summary (methods/summary.h) from its method results.
#pragma once

#include <vector>

#include "kareus/methods/run.h"

namespace kareus::methods::internal {

// The clocks a method with per-instruction clock control may pick: the GPU's profiling grid
// (the published sub-grid), or every supported clock with the profiler's full_grid.
std::vector<int> PlanningClocks(const workload::WorkloadModel& model, const RunOptions& options);

RunSummary BuildSummary(const RunResult& run);

}  // namespace kareus::methods::internal
