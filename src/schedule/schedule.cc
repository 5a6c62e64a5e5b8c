// SPDX-License-Identifier: Apache-2.0
#include "kareus/schedule/schedule.h"

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

const char* ToString(ScheduleKind kind) { return kind == ScheduleKind::k1F1B ? "1f1b" : "gpipe"; }

ScheduleKind ScheduleKindFromString(const std::string& text) {
  if (text == "1f1b") return ScheduleKind::k1F1B;
  if (text == "gpipe") return ScheduleKind::kGPipe;
  ThrowInput("schedule", text, "must be \"1f1b\" or \"gpipe\"");
}

std::string ToString(const Instruction& instruction) {
  if (instruction.chunk == 0) return fmt::format("{} {}", ToString(instruction.kind), instruction.microbatch);
  return fmt::format("{} {} (chunk {})", ToString(instruction.kind), instruction.microbatch,
                     instruction.chunk);
}

std::vector<Instruction> StageOrder(ScheduleKind kind, int num_stages, int stage,
                                    int num_microbatches) {
  if (num_stages < 1) ThrowInput("stages", Describe(num_stages), "must be >= 1");
  if (stage < 0 || stage >= num_stages) {
    ThrowInput("stage", Describe(stage), fmt::format("must be in [0, {}]", num_stages - 1));
  }
  if (num_microbatches < 1) ThrowInput("microbatches", Describe(num_microbatches), "must be >= 1");
  std::vector<Instruction> order;
  order.reserve(2 * static_cast<std::size_t>(num_microbatches));
  int next_forward = 0;
  int next_backward = 0;
  auto forward = [&] { order.push_back({.stage = stage, .microbatch = next_forward++, .kind = Direction::kForward}); };
  auto backward = [&] { order.push_back({.stage = stage, .microbatch = next_backward++, .kind = Direction::kBackward}); };
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
                                                    int num_microbatches) {
  if (num_stages < 1) ThrowInput("stages", Describe(num_stages), "must be >= 1");
  std::vector<std::vector<Instruction>> order;
  for (int s = 0; s < num_stages; ++s) order.push_back(StageOrder(kind, num_stages, s, num_microbatches));
  return order;
}

Dag BuildDag(ScheduleKind kind, int num_stages, int num_microbatches) {
  const auto order = BuildSchedule(kind, num_stages, num_microbatches);
  const int per_stage = 2 * num_microbatches;
  Dag dag;
  dag.kind = kind;
  dag.num_stages = num_stages;
  dag.num_microbatches = num_microbatches;
  // [stage][microbatch] -> node id, per direction
  std::vector<std::vector<int>> forward_id(num_stages, std::vector<int>(num_microbatches));
  std::vector<std::vector<int>> backward_id(num_stages, std::vector<int>(num_microbatches));
  for (int s = 0; s < num_stages; ++s) {
    for (int p = 0; p < per_stage; ++p) {
      const Instruction& inst = order[s][p];
      const int id = s * per_stage + p;
      dag.nodes.push_back(inst);
      (inst.kind == Direction::kForward ? forward_id : backward_id)[s][inst.microbatch] = id;
      if (p > 0) dag.edges.push_back({id - 1, id, false});
    }
  }
  for (int s = 0; s + 1 < num_stages; ++s) {
    for (int m = 0; m < num_microbatches; ++m) {
      dag.edges.push_back({forward_id[s][m], forward_id[s + 1][m], true});
      dag.edges.push_back({backward_id[s + 1][m], backward_id[s][m], true});
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
