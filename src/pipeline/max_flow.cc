// SPDX-License-Identifier: Apache-2.0
// The residual network and the max-flow: capacities of the activity arcs (SetCapacity), the
// critical sub-DAG (BackwardPass), the incremental BFS (Scan, SideMatchesFreshBfs) and the
// warm-started augmenting-path max-flow (MaxFlow). See solver.cc, part 1.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipeline/engine.h"

namespace kareus::pipeline::internal {

void Engine::SetCapacity(int v) {
  const Spec& spec = SpecOf(v);
  const int p = pos_[v];
  if (p % 2 == 1) {  // inside segment p / 2: shortening costs its slope, lengthening saves it
    up_[v] = lo_[v] = spec.slope[static_cast<std::size_t>(p / 2)];
    return;
  }
  const int k = p / 2;  // at vertex k: the faster segment's slope up, the slower one's down
  up_[v] = k == 0 ? kInf : spec.slope[static_cast<std::size_t>(k - 1)];
  lo_[v] = k == spec.last_vertex() ? 0.0 : spec.slope[static_cast<std::size_t>(k)];
}

int64_t Engine::BackwardPass(double makespan) {
  // An arc is critical when its slack is zero; one carrying flow is critical in exact
  // arithmetic (every flow path is a critical path shortened by exactly the move).
  int64_t count = 0;
  int64_t changed = 0;
  float_budget_ = kInf;
  auto mark = [&](int a, double slack) {
    const bool critical = slack <= time_tol_ || flow_[a] > flow_tol_;
    if (!critical) float_budget_ = std::min(float_budget_, slack);
    if (critical != (critical_[a] != 0)) {
      const int from = arc_from_[a];
      const int to = arc_to_[a];
      if (critical) {
        if (side_[from]) rescan_.push_back(from);
        if (side_[to]) rescan_.push_back(to);
      } else if (side_[from] && side_[to]) {
        source_side_valid_ = false;
      }
      critical_[a] = critical ? 1 : 0;
      ++changed;
    }
    count += critical ? 1 : 0;
  };
  latest_[sink_] = makespan;
  for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
    const int v = *it;
    const double finish = earliest_[2 * v + 1];
    double lf = makespan;
    if (sink_arc_[v] >= 0) mark(sink_arc_[v], makespan - finish);
    for (int i = succs_.start[v]; i < succs_.start[v + 1]; ++i) {
      const double start_by = latest_[2 * succs_.node[i]] - succs_.lag[i];
      lf = std::min(lf, start_by);
      mark(succ_arc_[i], start_by - finish);
    }
    latest_[2 * v + 1] = lf;
    const double start_by = lf - dur_[v];
    mark(v, start_by - earliest_[2 * v]);
    latest_[2 * v] = start_by;
  }
  double source_latest = makespan;
  for (int v = 0; v < n_; ++v) {
    if (source_arc_[v] < 0) continue;
    mark(source_arc_[v], latest_[2 * v]);
    source_latest = std::min(source_latest, latest_[2 * v]);
  }
  latest_[source_] = source_latest;
  critical_arcs_max_ = std::max(critical_arcs_max_, count);
  return changed;
}

void Engine::Scan(int u) {
  // A critical arc stopped by its residual capacity may cross the cut: remembered.
  auto stopped = [&](int a) {
    if (!in_boundary_[a]) {
      in_boundary_[a] = 1;
      boundary_.push_back(a);
    }
  };
  for (int i = out_start_[u]; i < out_start_[u + 1]; ++i) {
    const int w = out_to_[i];
    if (side_[w]) continue;
    const int a = out_arcs_[i];
    if (!critical_[a]) continue;
    if (up_[a] - flow_[a] <= flow_tol_) {
      stopped(a);
      continue;
    }
    side_[w] = 1;
    parent_[w] = a + 1;
    queue_.push_back(w);
  }
  for (int i = in_start_[u]; i < in_start_[u + 1]; ++i) {
    const int w = in_from_[i];
    if (side_[w]) continue;
    const int a = in_arcs_[i];
    if (!critical_[a]) continue;
    if (flow_[a] - lo_[a] <= flow_tol_) {
      stopped(a);
      continue;
    }
    side_[w] = 1;
    parent_[w] = -(a + 1);
    queue_.push_back(w);
  }
}

bool Engine::SideMatchesFreshBfs() const {
  std::vector<char> reached(side_.size(), 0);
  std::vector<int> queue{source_};
  reached[source_] = 1;
  for (std::size_t head = 0; head < queue.size(); ++head) {
    const int u = queue[head];
    for (int i = out_start_[u]; i < out_start_[u + 1]; ++i) {
      const int a = out_arcs_[i];
      const int w = out_to_[i];
      if (reached[w] || !critical_[a] || up_[a] - flow_[a] <= flow_tol_) continue;
      reached[w] = 1;
      queue.push_back(w);
    }
    for (int i = in_start_[u]; i < in_start_[u + 1]; ++i) {
      const int a = in_arcs_[i];
      const int w = in_from_[i];
      if (reached[w] || !critical_[a] || flow_[a] - lo_[a] <= flow_tol_) continue;
      reached[w] = 1;
      queue.push_back(w);
    }
  }
  // The incremental BFS stops once it reaches the sink: then its path to the sink (parent_)
  // must be an augmenting path of the current residual graph, and the fresh search must reach
  // the sink too; else the two source sides must be equal.
  if (side_[sink_]) {
    int steps = 0;
    for (int w = sink_; w != source_;) {
      const int p = parent_[w];
      if (p == 0 || ++steps > num_events_) return false;
      const int a = std::abs(p) - 1;
      const double residual = p > 0 ? up_[a] - flow_[a] : flow_[a] - lo_[a];
      if (!critical_[a] || residual <= flow_tol_) return false;
      w = p > 0 ? arc_from_[a] : arc_to_[a];
      if (!side_[w]) return false;
    }
    return reached[sink_] != 0;
  }
  for (std::size_t e = 0; e < side_.size(); ++e) {
    if ((side_[e] != 0) != (reached[e] != 0)) return false;
  }
  return true;
}

bool Engine::MaxFlow() {
  for (;;) {
    std::size_t head = 0;
    const bool incremental = source_side_valid_;
    if (source_side_valid_) {
      // The previous step's source side is still reachable (see source_side_valid_): only the
      // events whose arcs changed are scanned again, and the search continues from what they
      // reach.
      head = queue_.size();
      for (int u : rescan_) {
        if (side_[u]) Scan(u);
      }
    } else {
      for (int u : queue_) side_[u] = 0;
      queue_.clear();
      for (int a : boundary_) in_boundary_[a] = 0;
      boundary_.clear();
      queue_.push_back(source_);
      side_[source_] = 1;
    }
    rescan_.clear();
    for (; head < queue_.size() && !side_[sink_]; ++head) Scan(queue_[head]);
    if (options_.check_incremental_cuts && incremental) {
      ++cuts_checked_;
      if (!SideMatchesFreshBfs()) {
        ++cut_mismatches_;
        source_side_valid_ = false;  // continue from a fresh BFS
        continue;
      }
    }
    if (!side_[sink_]) {
      source_side_valid_ = true;
      return true;
    }
    // An augmenting path: the residual graph changes along it (the source side may shrink).
    source_side_valid_ = false;
    double bottleneck = kInf;
    for (int w = sink_; w != source_;) {
      const int p = parent_[w];
      const int a = std::abs(p) - 1;
      bottleneck = std::min(bottleneck, p > 0 ? up_[a] - flow_[a] : flow_[a] - lo_[a]);
      w = p > 0 ? arc_from_[a] : arc_to_[a];
    }
    if (!std::isfinite(bottleneck)) return false;
    for (int w = sink_; w != source_;) {
      const int p = parent_[w];
      const int a = std::abs(p) - 1;
      flow_[a] += p > 0 ? bottleneck : -bottleneck;
      w = p > 0 ? arc_from_[a] : arc_to_[a];
    }
    flow_value_ += bottleneck;
    ++augmentations_;
  }
}

}  // namespace kareus::pipeline::internal
