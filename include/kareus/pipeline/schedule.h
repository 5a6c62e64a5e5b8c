// SPDX-License-Identifier: Apache-2.0
// Pipeline schedules and their dependency DAG (activity on node). 1F1B follows Megatron-LM's
// non-interleaved schedule (megatron/core/pipeline_parallel/schedules.py,
// forward_backward_pipelining_without_interleaving), which is also lowtime's Synchronous1F1B
// (reference/perseus-lowtime-zeus.md §A1).
#pragma once

#include <string>
#include <vector>

namespace kareus::pipeline {

enum class InstructionKind { kForward, kBackward };
const char* ToString(InstructionKind kind);  // "forward" | "backward"

enum class ScheduleKind { k1F1B, kGPipe };
const char* ToString(ScheduleKind kind);                  // "1f1b" | "gpipe"
ScheduleKind ScheduleKindFromString(const std::string& text);  // throws InputError

struct Instruction {
  int stage = 0;
  int microbatch = 0;
  InstructionKind kind = InstructionKind::kForward;
};

// Per stage, its 2*M instructions in execution order.
//   1F1B: stage s runs min(S-s-1, M) warm-up forwards, then alternates F/B, then the remaining
//         backwards (cool-down).
//   GPipe: every forward, then every backward, each in microbatch order.
std::vector<std::vector<Instruction>> BuildSchedule(ScheduleKind kind, int num_stages,
                                                    int num_microbatches);

struct DagEdge {
  int from = 0;
  int to = 0;
  bool cross_stage = false;  // a P2P transfer between stages (may carry a transfer time)
};

// Node id = stage * 2M + position in the stage's order. Edges: the in-stage chain,
// F(s,m) -> F(s+1,m) and B(s+1,m) -> B(s,m). Nodes are listed in a topological order by
// `topological_order`.
struct Dag {
  int num_stages = 0;
  int num_microbatches = 0;
  std::vector<Instruction> nodes;
  std::vector<DagEdge> edges;
  std::vector<int> topological_order;
};

Dag BuildDag(ScheduleKind kind, int num_stages, int num_microbatches);

}  // namespace kareus::pipeline
