// SPDX-License-Identifier: Apache-2.0
// What the tests' lower bounds (stage_bound.cc, label_bound.cc) both read off the DAG: its
// same-stage chains and the longest all-fastest path out of every node (the windows every plan
// within a deadline respects end at the deadline minus that path).
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

#include "kareus/schedule/schedule.h"

namespace kareus::pipeline::testing {

// The chains of same-stage edges, one per head, the heads in the order they appear in `order`
// (every node once); nullopt when a node has two same-stage predecessors or successors.
inline std::optional<std::vector<std::vector<int>>> SameStageChains(const schedule::Dag& dag,
                                                                    const std::vector<int>& order) {
  const std::size_t n = dag.nodes.size();
  std::vector<int> next(n, -1);
  std::vector<int> prev(n, -1);
  for (const schedule::DagEdge& e : dag.edges) {
    if (e.cross_stage) continue;
    if (next[static_cast<std::size_t>(e.from)] >= 0 || prev[static_cast<std::size_t>(e.to)] >= 0) {
      return std::nullopt;
    }
    next[static_cast<std::size_t>(e.from)] = e.to;
    prev[static_cast<std::size_t>(e.to)] = e.from;
  }
  std::vector<std::vector<int>> chains;
  for (int v : order) {
    if (prev[static_cast<std::size_t>(v)] >= 0) continue;
    std::vector<int> chain;
    for (int w = v; w >= 0; w = next[static_cast<std::size_t>(w)]) chain.push_back(w);
    chains.push_back(std::move(chain));
  }
  return chains;
}

// tail[v]: the longest path out of v, v itself excluded, with every node at `fastest` and
// `p2p` on every cross-stage edge (seconds or grid units).
template <typename T>
std::vector<T> LongestTails(const schedule::Dag& dag, const std::vector<T>& fastest, T p2p) {
  std::vector<std::vector<std::pair<int, T>>> succ(dag.nodes.size());
  for (const schedule::DagEdge& e : dag.edges) {
    succ[static_cast<std::size_t>(e.from)].push_back({e.to, e.cross_stage ? p2p : T{0}});
  }
  std::vector<T> tail(dag.nodes.size(), T{0});
  for (auto it = dag.topological_order.rbegin(); it != dag.topological_order.rend(); ++it) {
    const auto v = static_cast<std::size_t>(*it);
    for (const auto& [w, lag] : succ[v]) {
      tail[v] = std::max(
          tail[v], lag + fastest[static_cast<std::size_t>(w)] + tail[static_cast<std::size_t>(w)]);
    }
  }
  return tail;
}

}  // namespace kareus::pipeline::testing
