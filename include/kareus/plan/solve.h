// SPDX-License-Identifier: Apache-2.0
// From instruction options to plans: solve the pipeline frontier (pipeline/solver.h), turn
// frontier points into plan::Plan objects, and write the outputs of a solve:
//   plan.json      the fastest (max-throughput) plan
//   frontier.json  every frontier point (time_s, energy_j, static_energy_j, plan_index)
//   plans/plan_NNNNN.json  the plans sampled as the published evaluation samples them
//                  (reference/kareus-official.md §4.7) plus the fastest; NNNNN is the
//                  point's iteration index (0 = slowest, as Perseus numbers its files).
#pragma once

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "kareus/common/json.h"
#include "kareus/pipeline/solver.h"
#include "kareus/plan/compose.h"
#include "kareus/plan/plan_file.h"
#include "kareus/schedule/node_classes.h"

namespace kareus::plan {

// The options of one (stage, chunk) unit (one per stage unless the schedule interleaves chunks).
struct StageOptions {
  int gpus = 1;                             // GPUs running the stage (TP x CP x DP)
  std::vector<InstructionOption> forward;   // options of every forward of the unit
  std::vector<InstructionOption> backward;  // options of every backward of the unit
};

struct PlanProblem {
  std::string method = "kareus";   // written into every plan
  Json workload = Json::object();  // free-form description written into every file
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int num_microbatches = 0;
  int num_chunks = 1;                     // model chunks per stage (interleaved 1F1B: >= 2)
  std::vector<StageOptions> stages = {};  // [stage * num_chunks + chunk]
  // The data-parallel gradient sync (schedule::GradientSync; pipeline::Problem's lists):
  // last_backward[stage] (kOverlapped) the options of the stage's last instruction, whose
  // gradient_sync says how it reduces its buckets; sync_nodes[stage * K + chunk] the options of
  // the K sync nodes of each stage (chunk 0: the tail, its own clock; chunk c > 0: the chunk's
  // buckets beside the later compute).
  schedule::GradientSync gradient_sync = schedule::GradientSync::kNone;
  std::vector<std::vector<InstructionOption>> last_backward = {};
  std::vector<std::vector<InstructionOption>> sync_nodes = {};
  double p2p_time_s = 0.0;  // transfer time on every cross-stage edge

  int NumStages() const { return static_cast<int>(stages.size()) / std::max(num_chunks, 1); }
  // GPUs of pipeline stage s (its first chunk's unit), and of the whole job.
  int StageGpus(int s) const {
    return stages[static_cast<std::size_t>(s * std::max(num_chunks, 1))].gpus;
  }
  int JobGpus() const {
    int gpus = 0;
    for (int s = 0; s < NumStages(); ++s) gpus += StageGpus(s);
    return gpus;
  }
  int SyncNodesPerStage() const { return schedule::SyncNodesPerStage(gradient_sync, num_chunks); }
  // The DAG's node classes (stages, last_backward and sync_nodes are laid out by them).
  schedule::NodeClasses Classes() const {
    return schedule::NodeClasses(NumStages(), num_chunks, gradient_sync);
  }
};

// The option `choice` of DAG node `node` of a solve of `problem` (pipeline::OptionsOf's classes).
const InstructionOption& ChosenOption(const PlanProblem& problem, const schedule::Dag& dag,
                                      int node, int choice);

struct PlanResult {
  pipeline::Result solve;            // frontier points in iteration order (slowest first)
  double unit_time_s = 0.0;          // the solver's deadline grid spacing
  std::vector<std::size_t> sampled;  // iteration indices of the plans written to plans/
  std::size_t fastest = 0;           // the point written as plan.json: the lowest time (the
                                     // last point of a solve; after re-evaluation, wherever
                                     // the lowest evaluated time is); always in `sampled`
};

// Solves the frontier; statuses are in solve.summary (an invalid problem gives no points).
PlanResult SolvePlans(const PlanProblem& problem, const pipeline::Options& options);

// The plan of frontier point `index` (iteration order).
Plan BuildPlan(const PlanProblem& problem, const pipeline::Result& result, std::size_t index);

// Iteration indices to keep out of n frontier points (iteration order, n-1 = fastest), as
// tests/artifact/create_frontier.sh does: stride = ceil(n/15); take n-1, n-1-stride, ... (at
// most 15, >= 0), sort ascending, drop positions 0, 2, 4, 6, 8. Short frontiers: n <= 10 keeps
// every plan; when the published stride gives fewer than 15 samples, 15 evenly spaced plans (or
// every plan for n < 15) lose slow-end positions until ten remain. n-1 (fastest) is always kept.
std::vector<std::size_t> SamplePlanIndices(std::size_t n);

FrontierFile BuildFrontierFile(const PlanProblem& problem, const PlanResult& result);

struct WrittenFiles {
  std::filesystem::path plan;
  std::filesystem::path frontier;
  std::vector<std::filesystem::path> plans = {};
};

// Writes plan.json, frontier.json and plans/ under `dir` (atomically, file by file). Throws
// InputError when the result has no points.
WrittenFiles WriteSolveOutputs(const std::filesystem::path& dir, const PlanProblem& problem,
                               const PlanResult& result);

}  // namespace kareus::plan
