// SPDX-License-Identifier: Apache-2.0
// The schedule vocabulary every component shares (workload/, pipeline/, plan/, runtime/,
// methods/): the direction of an instruction, its execution mode, the pipeline schedule, one
// instruction of it, each stage's order, the dependency DAG and its longest path.
//
// 1F1B follows Megatron-LM's non-interleaved schedule
// (megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_without_interleaving),
// which is also lowtime's Synchronous1F1B (reference/perseus-lowtime-zeus.md §A1).
#pragma once

#include <span>
#include <string>
#include <vector>

namespace kareus::schedule {

enum class Direction { kForward, kBackward };
const char* ToString(Direction direction);               // "forward" | "backward"
Direction DirectionFromString(const std::string& text);  // InputError on anything else

// How an instruction runs its layers: the two nanobatches overlapping one another's
// collectives, or one microbatch with every collective after the compute that feeds it.
enum class ExecutionMode { kNanobatched, kSequential };
const char* ToString(ExecutionMode mode);                    // "nanobatched" | "sequential"
ExecutionMode ExecutionModeFromString(const std::string& text);  // InputError

enum class ScheduleKind { k1F1B, kGPipe };
const char* ToString(ScheduleKind kind);                       // "1f1b" | "gpipe"
ScheduleKind ScheduleKindFromString(const std::string& text);  // InputError

// One pipeline instruction. `chunk` is the model chunk (virtual stage) it runs: 0 for the
// schedules here, which give every stage one chunk.
struct Instruction {
  int stage = 0;
  int chunk = 0;
  int microbatch = 0;
  Direction kind = Direction::kForward;
  bool operator==(const Instruction&) const = default;
};

// "forward 3" (with the chunk when it is not 0: "forward 3 (chunk 1)").
std::string ToString(const Instruction& instruction);

// The 2*M instructions of `stage` (0-based) among `num_stages`, in execution order:
//   1F1B:  min(S-s-1, M) warm-up forwards, then alternating forward/backward, then the
//          remaining backwards (cool-down);
//   GPipe: every forward, then every backward, each in microbatch order.
// InputError when a count is out of range.
std::vector<Instruction> StageOrder(ScheduleKind kind, int num_stages, int stage,
                                    int num_microbatches);

// StageOrder of every stage.
std::vector<std::vector<Instruction>> BuildSchedule(ScheduleKind kind, int num_stages,
                                                    int num_microbatches);

struct DagEdge {
  int from = 0;
  int to = 0;
  bool cross_stage = false;  // a P2P transfer between stages (may carry a transfer time)
};

// Activity-on-node DAG of a schedule. Node id = stage * 2M + position in the stage's order.
// Edges: the in-stage chain, F(s,m) -> F(s+1,m) and B(s+1,m) -> B(s,m) (cross-stage).
struct Dag {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int num_stages = 0;
  int num_microbatches = 0;
  std::vector<Instruction> nodes;
  std::vector<DagEdge> edges;
  std::vector<int> topological_order;
  std::vector<std::vector<int>> in_edges;  // per node: indices into `edges` ending there
};

Dag BuildDag(ScheduleKind kind, int num_stages, int num_microbatches);

// Earliest start and finish of every node when node v takes durations[v] and every
// cross-stage edge adds `p2p_time_s`; makespan = the latest finish (the longest path). The one
// longest-path routine: pipeline evaluation, the solver's realized makespan, timelines.
struct Timing {
  std::vector<double> start;
  std::vector<double> finish;
  double makespan = 0.0;
};
Timing StartTimes(const Dag& dag, std::span<const double> durations, double p2p_time_s = 0.0);

}  // namespace kareus::schedule
