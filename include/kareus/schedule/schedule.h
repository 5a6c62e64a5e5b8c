// SPDX-License-Identifier: Apache-2.0
// The schedule vocabulary every component shares (workload/, pipeline/, plan/, runtime/,
// methods/): the direction of an instruction, its execution mode, the pipeline schedule, one
// instruction of it, each stage's order, the dependency DAG and its longest path.
//
// 1F1B follows Megatron-LM's non-interleaved schedule
// (megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_without_interleaving),
// which is also lowtime's Synchronous1F1B (reference/perseus-lowtime-zeus.md §A1); interleaved
// 1F1B follows forward_backward_pipelining_with_interleaving (Narayanan et al., SC'21) with
// Megatron-Core's default microbatch group of one pipeline size.
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
const char* ToString(ExecutionMode mode);                        // "nanobatched" | "sequential"
ExecutionMode ExecutionModeFromString(const std::string& text);  // InputError

// k1F1B and kGPipe give every stage one model chunk; kInterleaved1F1B gives each stage V >= 2
// chunks (virtual stages): chunk c of stage s holds virtual stage c * S + s, so a microbatch
// runs chunk 0 on stages 0..S-1, then chunk 1 on stages 0..S-1, and so on.
enum class ScheduleKind { k1F1B, kGPipe, kInterleaved1F1B };
const char* ToString(ScheduleKind kind);  // "1f1b" | "gpipe" | "interleaved-1f1b"
ScheduleKind ScheduleKindFromString(const std::string& text);  // InputError

// InputError (naming the field, the value and the rule) unless the counts make a schedule of
// `kind`: stages >= 1, microbatches >= 1, chunks == 1 for 1F1B and GPipe; for interleaved 1F1B
// chunks >= 2, stages >= 2, and microbatches a multiple of stages (Megatron-LM's requirement:
// microbatches run in groups of one pipeline size per chunk).
void ValidateShape(ScheduleKind kind, int num_stages, int num_microbatches, int num_chunks);

// One pipeline instruction. `chunk` is the model chunk (virtual stage) it runs: 0 unless the
// schedule interleaves chunks.
struct Instruction {
  int stage = 0;
  int chunk = 0;
  int microbatch = 0;
  Direction kind = Direction::kForward;
  bool operator==(const Instruction&) const = default;
};

// "forward 3" (with the chunk when it is not 0: "forward 3 (chunk 1)").
std::string ToString(const Instruction& instruction);

// The 2*M*V instructions of `stage` (0-based) among `num_stages`, in execution order
// (V = num_chunks):
//   1F1B:  min(S-s-1, M) warm-up forwards, then alternating forward/backward, then the
//          remaining backwards (cool-down);
//   GPipe: every forward, then every backward, each in microbatch order;
//   interleaved 1F1B: the M*V forwards in groups of S microbatches per chunk (microbatches
//          g*S..g*S+S-1 on chunk 0, then the same group on chunk 1, ..., then the next group);
//          the backwards in the same order with the chunks reversed (chunk V-1 first);
//          min((S-s-1)*2 + (V-1)*S, M*V) warm-up forwards, then alternating forward/backward,
//          then the remaining backwards.
// InputError when the counts do not make a schedule (ValidateShape).
std::vector<Instruction> StageOrder(ScheduleKind kind, int num_stages, int stage,
                                    int num_microbatches, int num_chunks = 1);

// StageOrder of every stage.
std::vector<std::vector<Instruction>> BuildSchedule(ScheduleKind kind, int num_stages,
                                                    int num_microbatches, int num_chunks = 1);

// The data-parallel gradient reduction in the DAG (Megatron-Core DDP):
//   kAtEnd: without overlap_grad_reduce every gradient is reduced after the schedule: one node
//     per stage after its last instruction;
//   kOverlapped: with overlap_grad_reduce, per (stage, chunk) one node: a chunk c > 0 reduces
//     its buckets after its last backward (microbatch M-1), on the stage's communication
//     stream while its later instructions compute; chunk 0, the stage's last instruction,
//     reduces the buckets complete before it ends during it (that backward is a node class of
//     its own, LaunchesGradientSync) and leaves the rest, complete only when it ends, to its
//     node, the tail. The stream runs the chunks in the order their last backwards come
//     (V-1 first), so node (s, c) precedes node (s, c-1).
enum class GradientSync { kNone, kAtEnd, kOverlapped };

// What a DAG node runs: an instruction of the schedule, or a gradient reduction.
enum class NodeKind { kInstruction, kGradientSync };

// A DAG node: the instruction (for a gradient sync: its stage and chunk, microbatch 0,
// backward) and what the node runs.
struct DagNode : Instruction {
  NodeKind node = NodeKind::kInstruction;
};

// "forward 3 (chunk 1)", or "gradient sync" ("gradient sync (chunk 1)").
std::string ToString(const DagNode& node);

struct DagEdge {
  int from = 0;
  int to = 0;
  bool cross_stage = false;  // a P2P transfer between stages (may carry a transfer time)
};

// Activity-on-node DAG of a schedule. Node id = stage * 2MV + position in the stage's order;
// the gradient syncs follow the instructions (GradientSyncNode). Edges: the in-stage chain;
// forward F(s,c,m) -> F(s+1,c,m) and, between chunks, F(S-1,c,m) -> F(0,c+1,m); backward
// B(s+1,c,m) -> B(s,c,m) and B(0,c+1,m) -> B(S-1,c,m) (all cross-stage); the syncs as
// GradientSync says. A sync has no successor but another sync: the iteration ends when every
// stage's syncs have ended.
struct Dag {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int num_stages = 0;
  int num_microbatches = 0;
  int num_chunks = 1;
  GradientSync gradient_sync = GradientSync::kNone;
  std::vector<DagNode> nodes;
  std::vector<DagEdge> edges;
  std::vector<int> topological_order;
  std::vector<std::vector<int>> in_edges;  // per node: indices into `edges` ending there

  int NumInstructions() const { return 2 * num_stages * num_microbatches * num_chunks; }
  // Gradient-sync nodes per stage: 0, 1 (kAtEnd) or num_chunks (kOverlapped).
  int SyncNodesPerStage() const;
  // The node of the sync of (stage, chunk); chunk 0 is the stage's tail.
  int GradientSyncNode(int stage, int chunk = 0) const {
    return NumInstructions() + stage * SyncNodesPerStage() + chunk;
  }
  // True for the stage's last instruction (the last backward of chunk 0) with kOverlapped: the
  // backward during which the buckets it completes are reduced.
  bool LaunchesGradientSync(int node) const;
};

Dag BuildDag(ScheduleKind kind, int num_stages, int num_microbatches, int num_chunks = 1,
             GradientSync gradient_sync = GradientSync::kNone);

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
