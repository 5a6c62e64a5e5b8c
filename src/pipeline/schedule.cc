// SPDX-License-Identifier: Apache-2.0
#include "kareus/pipeline/schedule.h"

#include <algorithm>

#include "kareus/common/error.h"

namespace kareus::pipeline {

const char* ToString(InstructionKind kind) {
  return kind == InstructionKind::kForward ? "forward" : "backward";
}

const char* ToString(ScheduleKind kind) { return kind == ScheduleKind::k1F1B ? "1f1b" : "gpipe"; }

ScheduleKind ScheduleKindFromString(const std::string& text) {
  if (text == "1f1b") return ScheduleKind::k1F1B;
  if (text == "gpipe") return ScheduleKind::kGPipe;
  ThrowInput("schedule", text, "must be 1f1b or gpipe");
}

std::vector<std::vector<Instruction>> BuildSchedule(ScheduleKind kind, int num_stages,
                                                    int num_microbatches) {
  if (num_stages < 1) ThrowInput("stages", Describe(num_stages), "must be >= 1");
  if (num_microbatches < 1) ThrowInput("microbatches", Describe(num_microbatches), "must be >= 1");
  const int m_total = num_microbatches;
  std::vector<std::vector<Instruction>> order(num_stages);
  for (int s = 0; s < num_stages; ++s) {
    auto& list = order[s];
    int next_f = 0;
    int next_b = 0;
    auto forward = [&] { list.push_back({s, next_f++, InstructionKind::kForward}); };
    auto backward = [&] { list.push_back({s, next_b++, InstructionKind::kBackward}); };
    if (kind == ScheduleKind::kGPipe) {
      for (int m = 0; m < m_total; ++m) forward();
      for (int m = 0; m < m_total; ++m) backward();
      continue;
    }
    const int warmup = std::min(num_stages - s - 1, m_total);
    for (int i = 0; i < warmup; ++i) forward();
    for (int i = 0; i < m_total - warmup; ++i) {
      forward();
      backward();
    }
    for (int i = 0; i < warmup; ++i) backward();
  }
  return order;
}

Dag BuildDag(ScheduleKind kind, int num_stages, int num_microbatches) {
  const auto order = BuildSchedule(kind, num_stages, num_microbatches);
  const int per_stage = 2 * num_microbatches;
  Dag dag;
  dag.num_stages = num_stages;
  dag.num_microbatches = num_microbatches;
  // position_of[stage][kind][microbatch] -> node id
  std::vector<std::vector<int>> forward_id(num_stages, std::vector<int>(num_microbatches));
  std::vector<std::vector<int>> backward_id(num_stages, std::vector<int>(num_microbatches));
  for (int s = 0; s < num_stages; ++s) {
    for (int p = 0; p < per_stage; ++p) {
      const Instruction& inst = order[s][p];
      const int id = s * per_stage + p;
      dag.nodes.push_back(inst);
      (inst.kind == InstructionKind::kForward ? forward_id : backward_id)[s][inst.microbatch] = id;
      if (p > 0) dag.edges.push_back({id - 1, id, false});
    }
  }
  for (int s = 0; s + 1 < num_stages; ++s) {
    for (int m = 0; m < num_microbatches; ++m) {
      dag.edges.push_back({forward_id[s][m], forward_id[s + 1][m], true});
      dag.edges.push_back({backward_id[s + 1][m], backward_id[s][m], true});
    }
  }
  // Kahn's algorithm; the schedule is deadlock-free, so every node gets ordered.
  const int n = static_cast<int>(dag.nodes.size());
  std::vector<int> indegree(n, 0);
  std::vector<std::vector<int>> out(n);
  for (const DagEdge& e : dag.edges) {
    ++indegree[e.to];
    out[e.from].push_back(e.to);
  }
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

}  // namespace kareus::pipeline
