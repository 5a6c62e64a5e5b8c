// SPDX-License-Identifier: Apache-2.0
#include "kareus/schedule/schedule.h"
#include "kareus/schedule/node_classes.h"

#include <algorithm>

#include <fmt/format.h>

#include "kareus/common/error.h"

namespace kareus::schedule {

const char* ToString(Direction direction) {
  return direction == Direction::kForward ? "forward" : "backward";
}

Direction DirectionFromString(const std::string& text) {
  if (text == "forward") return Direction::kForward;
  if (text == "backward") return Direction::kBackward;
  ThrowInput("instruction kind", text, "must be \"forward\" or \"backward\"");
}

const char* ToString(ExecutionMode mode) {
  return mode == ExecutionMode::kNanobatched ? "nanobatched" : "sequential";
}

ExecutionMode ExecutionModeFromString(const std::string& text) {
  if (text == "nanobatched") return ExecutionMode::kNanobatched;
  if (text == "sequential") return ExecutionMode::kSequential;
  ThrowInput("execution mode", text, "must be \"nanobatched\" or \"sequential\"");
}

const char* ToString(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::kInterleaved1F1B:
      return "interleaved-1f1b";
  }
  return "unknown";
}

ScheduleKind ScheduleKindFromString(const std::string& text) {
  if (text == "1f1b") return ScheduleKind::k1F1B;
  if (text == "gpipe") return ScheduleKind::kGPipe;
  if (text == "interleaved-1f1b") return ScheduleKind::kInterleaved1F1B;
  ThrowInput("schedule", text, "must be \"1f1b\", \"gpipe\" or \"interleaved-1f1b\"");
}

void ValidateShape(ScheduleKind kind, int num_stages, int num_microbatches, int num_chunks) {
  if (num_stages < 1) ThrowInput("stages", Describe(num_stages), "must be >= 1");
  if (num_microbatches < 1) ThrowInput("microbatches", Describe(num_microbatches), "must be >= 1");
  if (kind != ScheduleKind::kInterleaved1F1B) {
    if (num_chunks != 1) {
      ThrowInput("chunks", Describe(num_chunks),
                 fmt::format("must be 1 for the {} schedule (only interleaved 1F1B runs several "
                             "model chunks per stage)",
                             ToString(kind)));
    }
    return;
  }
  if (num_chunks < 2) {
    ThrowInput("chunks", Describe(num_chunks), "must be >= 2 for interleaved 1F1B");
  }
  if (num_stages < 2) {
    ThrowInput("stages", Describe(num_stages), "must be >= 2 for interleaved 1F1B");
  }
  if (num_microbatches % num_stages != 0) {
    ThrowInput(
        "microbatches", Describe(num_microbatches),
        fmt::format("must be a multiple of the pipeline stages ({}) for interleaved 1F1B "
                    "(Megatron-LM runs microbatches in groups of one pipeline size per chunk)",
                    num_stages));
  }
}

std::string ToString(const Instruction& instruction) {
  if (instruction.chunk == 0)
    return fmt::format("{} {}", ToString(instruction.kind), instruction.microbatch);
  return fmt::format("{} {} (chunk {})", ToString(instruction.kind), instruction.microbatch,
                     instruction.chunk);
}

std::string ToString(const DagNode& node) {
  if (node.node == NodeKind::kGradientSync) {
    return node.chunk == 0 ? "gradient sync" : fmt::format("gradient sync (chunk {})", node.chunk);
  }
  return ToString(static_cast<const Instruction&>(node));
}

namespace {

// Interleaved 1F1B: the k-th forward (k = 0..M*V-1) runs microbatch group k / (S*V), chunk
// (k mod S*V) / S, microbatch g*S + k mod S; the k-th backward runs the same microbatch on
// chunk V-1-c. With M a multiple of S every group is full (ValidateShape).
Instruction InterleavedSlot(int stage, int num_stages, int num_chunks, int k, Direction kind) {
  const int per_group = num_stages * num_chunks;
  const int group = k / per_group;
  const int chunk = (k % per_group) / num_stages;
  const int microbatch = group * num_stages + k % num_stages;
  return {.stage = stage,
          .chunk = kind == Direction::kForward ? chunk : num_chunks - 1 - chunk,
          .microbatch = microbatch,
          .kind = kind};
}

}  // namespace

std::vector<Instruction> StageOrder(ScheduleKind kind, int num_stages, int stage,
                                    int num_microbatches, int num_chunks) {
  ValidateShape(kind, num_stages, num_microbatches, num_chunks);
  if (stage < 0 || stage >= num_stages) {
    ThrowInput("stage", Describe(stage), fmt::format("must be in [0, {}]", num_stages - 1));
  }
  std::vector<Instruction> order;
  order.reserve(2 * static_cast<std::size_t>(num_microbatches) * num_chunks);
  if (kind == ScheduleKind::kInterleaved1F1B) {
    const int total = num_microbatches * num_chunks;
    const int warmup =
        std::min((num_stages - stage - 1) * 2 + (num_chunks - 1) * num_stages, total);
    auto forward = [&](int k) {
      order.push_back(InterleavedSlot(stage, num_stages, num_chunks, k, Direction::kForward));
    };
    auto backward = [&](int k) {
      order.push_back(InterleavedSlot(stage, num_stages, num_chunks, k, Direction::kBackward));
    };
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < total - warmup; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
    return order;
  }
  int next_forward = 0;
  int next_backward = 0;
  auto forward = [&] {
    order.push_back({.stage = stage, .microbatch = next_forward++, .kind = Direction::kForward});
  };
  auto backward = [&] {
    order.push_back({.stage = stage, .microbatch = next_backward++, .kind = Direction::kBackward});
  };
  if (kind == ScheduleKind::kGPipe) {
    for (int m = 0; m < num_microbatches; ++m) forward();
    for (int m = 0; m < num_microbatches; ++m) backward();
    return order;
  }
  // Megatron-LM forward_backward_pipelining_without_interleaving.
  const int warmup = std::min(num_stages - stage - 1, num_microbatches);
  for (int i = 0; i < warmup; ++i) forward();
  for (int i = 0; i < num_microbatches - warmup; ++i) {
    forward();
    backward();
  }
  for (int i = 0; i < warmup; ++i) backward();
  return order;
}

std::vector<std::vector<Instruction>> BuildSchedule(ScheduleKind kind, int num_stages,
                                                    int num_microbatches, int num_chunks) {
  ValidateShape(kind, num_stages, num_microbatches, num_chunks);
  std::vector<std::vector<Instruction>> order;
  for (int s = 0; s < num_stages; ++s) {
    order.push_back(StageOrder(kind, num_stages, s, num_microbatches, num_chunks));
  }
  return order;
}

int Dag::SyncNodesPerStage() const {
  return schedule::SyncNodesPerStage(gradient_sync, num_chunks);
}

bool Dag::LaunchesGradientSync(int node) const {
  const DagNode& n = nodes[static_cast<std::size_t>(node)];
  return gradient_sync == GradientSync::kOverlapped && n.node == NodeKind::kInstruction &&
         n.kind == Direction::kBackward && n.chunk == 0 && n.microbatch == num_microbatches - 1;
}

Dag BuildDag(ScheduleKind kind, int num_stages, int num_microbatches, int num_chunks,
             GradientSync gradient_sync) {
  const auto order = BuildSchedule(kind, num_stages, num_microbatches, num_chunks);
  const int per_stage = 2 * num_microbatches * num_chunks;
  Dag dag;
  dag.kind = kind;
  dag.num_stages = num_stages;
  dag.num_microbatches = num_microbatches;
  dag.num_chunks = num_chunks;
  dag.gradient_sync = gradient_sync;
  // [stage][chunk * M + microbatch] -> node id, per direction
  const std::size_t slots = static_cast<std::size_t>(num_chunks) * num_microbatches;
  std::vector<std::vector<int>> forward_id(num_stages, std::vector<int>(slots));
  std::vector<std::vector<int>> backward_id(num_stages, std::vector<int>(slots));
  for (int s = 0; s < num_stages; ++s) {
    for (int p = 0; p < per_stage; ++p) {
      const Instruction& inst = order[s][p];
      const int id = s * per_stage + p;
      DagNode node;
      static_cast<Instruction&>(node) = inst;
      dag.nodes.push_back(node);
      (inst.kind == Direction::kForward
           ? forward_id
           : backward_id)[s][inst.chunk * num_microbatches + inst.microbatch] = id;
      if (p > 0) dag.edges.push_back({id - 1, id, false});
    }
  }
  // Virtual stage v = c * S + s; a microbatch's forward goes v -> v+1, its backward v+1 -> v.
  const int virtual_stages = num_stages * num_chunks;
  for (int v = 0; v + 1 < virtual_stages; ++v) {
    const int s = v % num_stages, c = v / num_stages;
    const int s_next = (v + 1) % num_stages, c_next = (v + 1) / num_stages;
    for (int m = 0; m < num_microbatches; ++m) {
      dag.edges.push_back({forward_id[s][c * num_microbatches + m],
                           forward_id[s_next][c_next * num_microbatches + m], true});
      dag.edges.push_back({backward_id[s_next][c_next * num_microbatches + m],
                           backward_id[s][c * num_microbatches + m], true});
    }
  }
  const int syncs = dag.SyncNodesPerStage();
  for (int s = 0; s < num_stages; ++s) {
    for (int c = 0; c < syncs; ++c) {
      DagNode node;
      node.stage = s;
      node.chunk = c;
      node.kind = Direction::kBackward;
      node.node = NodeKind::kGradientSync;
      dag.nodes.push_back(node);
      const int id = dag.GradientSyncNode(s, c);
      if (c == 0) {
        dag.edges.push_back({s * per_stage + per_stage - 1, id, false});
      } else {
        dag.edges.push_back(
            {backward_id[s][c * num_microbatches + num_microbatches - 1], id, false});
        dag.edges.push_back({id, id - 1, false});
      }
    }
  }
  const int n = static_cast<int>(dag.nodes.size());
  dag.in_edges.assign(n, {});
  std::vector<int> indegree(n, 0);
  std::vector<std::vector<int>> out(n);
  for (int e = 0; e < static_cast<int>(dag.edges.size()); ++e) {
    const DagEdge& edge = dag.edges[e];
    dag.in_edges[edge.to].push_back(e);
    ++indegree[edge.to];
    out[edge.from].push_back(edge.to);
  }
  // Kahn's algorithm; the schedules are deadlock-free, so every node gets ordered.
  std::vector<int> ready;
  for (int v = 0; v < n; ++v) {
    if (indegree[v] == 0) ready.push_back(v);
  }
  while (!ready.empty()) {
    const int v = ready.back();
    ready.pop_back();
    dag.topological_order.push_back(v);
    for (int w : out[v]) {
      if (--indegree[w] == 0) ready.push_back(w);
    }
  }
  KAREUS_CHECK(static_cast<int>(dag.topological_order.size()) == n) << "schedule has a cycle";
  return dag;
}

Timing StartTimes(const Dag& dag, std::span<const double> durations, double p2p_time_s) {
  KAREUS_CHECK(durations.size() == dag.nodes.size()) << "one duration per DAG node";
  Timing timing;
  timing.start.assign(dag.nodes.size(), 0.0);
  timing.finish.assign(dag.nodes.size(), 0.0);
  for (int v : dag.topological_order) {
    double start = 0.0;
    for (int e : dag.in_edges[v]) {
      const DagEdge& edge = dag.edges[e];
      start = std::max(start, timing.finish[edge.from] + (edge.cross_stage ? p2p_time_s : 0.0));
    }
    timing.start[v] = start;
    timing.finish[v] = start + durations[v];
    timing.makespan = std::max(timing.makespan, timing.finish[v]);
  }
  return timing;
}

}  // namespace kareus::schedule
