// SPDX-License-Identifier: Apache-2.0
// The exact dynamic program over a topological order (ExactAt; a beam past its budget) and
// the neighbourhood search built on it. See solver.cc, part 3.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kareus/common/error.h"
#include "pipeline/engine.h"

namespace kareus::pipeline::internal {

ExactSearch Engine::PrepareExact(double deadline, const std::vector<int>& choice,
                                 const std::vector<char>* free_nodes) const {
  ExactSearch x;
  x.deadline = deadline;
  // Per node: its first and one-past-last allowed front index (a fixed node: its given one).
  x.first.resize(static_cast<std::size_t>(n_));
  x.end.resize(static_cast<std::size_t>(n_));
  for (int v = 0; v < n_; ++v) {
    const bool free = free_nodes == nullptr || (*free_nodes)[v];
    x.first[v] = free ? std::size_t{0} : static_cast<std::size_t>(choice[v]);
    x.end[v] = free ? SpecOf(v).time.size() : static_cast<std::size_t>(choice[v]) + 1;
  }
  const auto fastest_time = [&](int v) { return SpecOf(v).time[x.first[v]]; };
  // Order: by earliest start with every instruction at its fastest (topological, since every
  // duration is positive), which keeps the set of open instructions narrow.
  x.head.assign(static_cast<std::size_t>(n_), 0.0);
  for (int v : dag_.topological_order) {
    x.head[v] = EarliestStart(v, [&](int p) { return x.head[p] + fastest_time(p); });
  }
  x.tail.assign(static_cast<std::size_t>(n_), 0.0);  // after the node, at fastest
  for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
    const int v = *it;
    for (int i = succs_.start[v]; i < succs_.start[v + 1]; ++i) {
      const int w = succs_.node[i];
      x.tail[v] = std::max(x.tail[v], succs_.lag[i] + fastest_time(w) + x.tail[w]);
    }
  }
  x.order.resize(static_cast<std::size_t>(n_));
  std::iota(x.order.begin(), x.order.end(), 0);
  std::stable_sort(x.order.begin(), x.order.end(),
                   [&](int a, int b) { return x.head[a] < x.head[b]; });
  std::vector<int> position(static_cast<std::size_t>(n_));
  for (int k = 0; k < n_; ++k) position[x.order[k]] = k;
  x.last_use.assign(static_cast<std::size_t>(n_), -1);  // last successor's position
  for (int v = 0; v < n_; ++v) {
    for (int i = succs_.start[v]; i < succs_.start[v + 1]; ++i) {
      x.last_use[v] = std::max(x.last_use[v], position[succs_.node[i]]);
    }
  }
  BuildCompletionBounds(x);
  return x;
}

void Engine::BuildCompletionBounds(ExactSearch& x) const {
  // Completion bound, per chain (a stage's instructions in order): the least effective energy
  // of the chain's unplaced suffix when its durations must fit, one after another, between the
  // last placed one's finish and the deadline less the last one's tail -- a knapsack over
  // durations rounded down to a grid of `grid` seconds (a relaxation). Instructions in no
  // chain: each at its cheapest option that fits between its fastest head and tail.
  const std::size_t cells = ExactSearch::kCells;
  x.grid = x.deadline / static_cast<double>(cells - 1);
  x.chain_of.assign(static_cast<std::size_t>(n_), -1);
  x.index_in_chain.assign(static_cast<std::size_t>(n_), -1);
  x.table.resize(chains_.size());
  for (std::size_t c = 0; c < chains_.size(); ++c) {
    const std::vector<int>& chain = chains_[c];
    auto& t = x.table[c];
    t.assign(chain.size() + 1, std::vector<double>(cells, 0.0));
    // Cells of the suffix at its slowest allowed options: from there on its row is constant
    // (every term reads the next row where that row is constant), bit for bit.
    std::size_t saturated = 0;
    for (std::size_t i = chain.size(); i-- > 0;) {
      const int v = chain[i];
      x.chain_of[v] = static_cast<int>(c);
      x.index_in_chain[v] = static_cast<int>(i);
      const Spec& spec = SpecOf(v);
      std::vector<std::size_t> units(spec.time.size());
      for (std::size_t j = 0; j < spec.time.size(); ++j) {
        units[j] = static_cast<std::size_t>(std::floor(spec.time[j] / x.grid));
      }
      saturated += units[x.end[v] - 1];
      const std::size_t computed = std::min(cells, saturated + 1);
      // Row b: the least over the options that fit b cells of the option's energy plus the
      // next row's at the cells left, option by option over contiguous cells (vectorized; the
      // least of the same terms). Front times ascend, so do their units.
      double* row = t[i].data();
      const double* after = t[i + 1].data();
      std::fill(row, row + computed, kInf);
      for (std::size_t j = x.first[v]; j < x.end[v] && units[j] < computed; ++j) {
        const std::size_t u = units[j];
        const double eff = spec.eff[j];
        for (std::size_t b = u; b < computed; ++b) row[b] = std::min(row[b], eff + after[b - u]);
      }
      std::fill(row + computed, row + cells, row[computed - 1]);
    }
  }
  // Nodes in no chain (gradient syncs), each at its cheapest option that fits between its
  // fastest head and tail: loose_after[k] sums those at order positions > k (the unplaced ones
  // once position k is placed; a placed node's energy is in the state's).
  x.loose_after.assign(static_cast<std::size_t>(n_), 0.0);
  for (int k = n_ - 1; k > 0; --k) {
    const int v = x.order[static_cast<std::size_t>(k)];
    double own = 0.0;
    if (x.chain_of[v] < 0) {
      const Spec& spec = SpecOf(v);
      own = x.end[v] - x.first[v] == 1 ? spec.eff[x.first[v]]
                                       : spec.eff[static_cast<std::size_t>(spec.Fit(
                                             x.deadline - x.head[v] - x.tail[v] + time_tol_))];
    }
    x.loose_after[static_cast<std::size_t>(k) - 1] =
        x.loose_after[static_cast<std::size_t>(k)] + own;
  }
}

double Engine::ChainBound(const ExactSearch& x, std::size_t c, int next, double free_from,
                          double deadline) const {
  const std::size_t cells = ExactSearch::kCells;
  const std::vector<int>& chain = chains_[c];
  const double span = std::min(deadline, x.deadline) - x.tail[chain.back()] - free_from;
  if (span < -time_tol_) return kInf;
  const double units = std::floor(std::max(0.0, span) / x.grid + 1e-9);
  const std::size_t b =
      units >= static_cast<double>(cells - 1) ? cells - 1 : static_cast<std::size_t>(units);
  return x.table[c][static_cast<std::size_t>(next)][b];
}

ExactStep Engine::PrepareStep(const ExactSearch& x, int k, const ExactLayer& from, ExactLayer& to,
                              std::vector<int>& next) const {
  const int v = x.order[k];
  ExactStep step;
  // The new open set: the old one less the instructions whose last successor is v, plus v.
  for (std::size_t i = 0; i < from.open.size(); ++i) {
    if (x.last_use[from.open[i]] > k) {
      to.open.push_back(from.open[i]);
      step.source.push_back(static_cast<int>(i));
    }
  }
  if (x.last_use[v] > k) {
    to.open.push_back(v);
    step.source.push_back(-1);
  }
  for (int i = preds_.start[v]; i < preds_.start[v + 1]; ++i) {
    const auto it = std::find(from.open.begin(), from.open.end(), preds_.node[i]);
    step.pred_slots.emplace_back(static_cast<int>(it - from.open.begin()), preds_.lag[i]);
  }
  if (x.chain_of[v] >= 0) next[static_cast<std::size_t>(x.chain_of[v])] = x.index_in_chain[v] + 1;
  // Per chain with an unplaced suffix: where its last placed instruction's finish comes from
  // (-2: none placed yet, the suffix starts at its first instruction's fastest head; -1: v
  // itself; else a slot of from.open).
  for (std::size_t c = 0; c < chains_.size(); ++c) {
    if (next[c] >= static_cast<int>(chains_[c].size())) continue;
    int src = -2;
    if (next[c] > 0) {
      const int last = chains_[c][static_cast<std::size_t>(next[c] - 1)];
      src = last == v ? -1
                      : static_cast<int>(std::find(from.open.begin(), from.open.end(), last) -
                                         from.open.begin());
    }
    step.chain_sources.emplace_back(c, src);
  }
  return step;
}

void Engine::CollectCandidates(const ExactSearch& x, int k, const ExactLayer& from,
                               const ExactStep& step, const std::vector<int>& next,
                               const Incumbents& incumbents,
                               std::vector<ExactCandidate>& candidates) const {
  const int v = x.order[k];
  const std::size_t d_from = from.open.size();
  const std::size_t count = from.energy.size();
  const Spec& spec = SpecOf(v);
  candidates.clear();
  for (std::size_t s = 0; s < count; ++s) {
    double start = 0.0;
    for (auto [slot, lag] : step.pred_slots)
      start = std::max(start, from.finish[s * d_from + slot] + lag);
    double open_low = 0.0;  // the makespan is at least each open finish plus its tail
    for (std::size_t i = 0; i < d_from; ++i) {
      const int u = from.open[i];
      if (x.last_use[u] > k) open_low = std::max(open_low, from.finish[s * d_from + i] + x.tail[u]);
    }
    for (std::size_t j = x.first[v]; j < x.end[v]; ++j) {
      const double finish = start + spec.time[j];
      const double makespan =
          x.last_use[v] < 0 ? std::max(from.makespan[s], finish) : from.makespan[s];
      const double makespan_low = std::max({makespan, finish + x.tail[v], open_low});
      if (makespan_low > x.deadline + time_tol_) continue;
      const double base = from.energy[s] + spec.eff[j] + pg_ * makespan_low +
                          x.loose_after[static_cast<std::size_t>(k)];
      // The bound of the completions that finish by `deadline`.
      const auto bound = [&](double deadline) {
        double low = base;
        for (auto [c, src] : step.chain_sources) {
          const double free_from =
              src == -2
                  ? x.head[chains_[c][static_cast<std::size_t>(next[c])]]
                  : (src == -1 ? finish : from.finish[s * d_from + static_cast<std::size_t>(src)]);
          low += ChainBound(x, c, next[c], free_from, deadline);
        }
        return low;
      };
      const double low = bound(x.deadline);
      // (A plan counts against a completion when it finishes no later, without the tolerance:
      // the points then pick among the plans and states that meet their deadline within it.)
      if (low >= incumbents.At(makespan_low) * (1 - 1e-12)) {
        continue;
      } else if (incumbents.time.size() > 1) {
        // Many incumbents (ExactFrontier): the completions finishing in each of kBoundSlices
        // slices of [max(makespan_low, fastest), deadline] against the incumbent at the slice's
        // start (and the static energy until then); no plan is faster than `fastest`.
        const double earliest = std::max(makespan_low, incumbents.fastest);
        bool useful = false;
        for (int i = 1; i <= ExactSearch::kBoundSlices && !useful; ++i) {
          const double from_t =
              earliest + (x.deadline - earliest) * (i - 1) / ExactSearch::kBoundSlices;
          const double to_t = earliest + (x.deadline - earliest) * i / ExactSearch::kBoundSlices;
          useful =
              bound(to_t) + pg_ * (from_t - makespan_low) < incumbents.At(from_t) * (1 - 1e-12);
        }
        if (!useful) continue;
      }
      candidates.push_back({from.energy[s] + spec.eff[j], static_cast<int>(s), static_cast<int>(j),
                            makespan, finish, low});
    }
  }
}

bool Engine::KeepUndominated(const ExactLayer& from, const ExactStep& step,
                             std::vector<ExactCandidate>& candidates, std::size_t beam,
                             int64_t budget, bool measured, int64_t& work, ExactLayer& to) const {
  const std::size_t d_from = from.open.size();
  const std::size_t d_to = to.open.size();
  // Exact: cheapest first (a kept state is then never more energetic than a later one). Beam:
  // the best completion bound first, and the layer stops at `beam` states.
  if (beam == 0) {
    std::sort(candidates.begin(), candidates.end(),
              [](const ExactCandidate& a, const ExactCandidate& b) { return a.energy < b.energy; });
  } else {
    std::sort(candidates.begin(), candidates.end(),
              [](const ExactCandidate& a, const ExactCandidate& b) { return a.low < b.low; });
  }
  std::vector<double> vec(d_to);
  if (beam == 0) {
    if (KeepUndominatedByStaircase(from, step, candidates, budget, measured, work, to)) return true;
    if (work > budget) return false;
    // The tree pays for its sort and nodes on large layers only.
    return candidates.size() >= kTreeCandidates
               ? KeepUndominatedByTree(from, step, candidates, budget, measured, work, to)
               : KeepUndominatedBySum(from, step, candidates, budget, measured, work, to);
  }
  for (const ExactCandidate& c : candidates) {
    if (beam > 0 && to.energy.size() >= beam) break;
    for (std::size_t i = 0; i < d_to; ++i) {
      vec[i] = step.source[i] < 0 ? c.finish
                                  : from.finish[static_cast<std::size_t>(c.parent) * d_from +
                                                static_cast<std::size_t>(step.source[i])];
    }
    // c is dominated when a kept state is no more energetic (always so in exact mode) and no
    // later anywhere.
    bool dominated = false;
    work += static_cast<int64_t>(to.energy.size()) + 1;
    if (work > budget) return false;
    for (std::size_t q = 0; q < to.energy.size() && !dominated; ++q) {
      if (to.makespan[q] > c.makespan + time_tol_ || to.energy[q] > c.energy) continue;
      bool no_later = true;
      for (std::size_t i = 0; i < d_to && no_later; ++i) {
        no_later = to.finish[q * d_to + i] <= vec[i] + time_tol_;
      }
      dominated = no_later;
    }
    if (dominated) continue;
    to.finish.insert(to.finish.end(), vec.begin(), vec.end());
    to.makespan.push_back(c.makespan);
    to.energy.push_back(c.energy);
    to.parent.push_back(c.parent);
    to.option.push_back(c.option);
  }
  return true;
}

bool Engine::KeepUndominatedByStaircase(const ExactLayer& from, const ExactStep& step,
                                        const std::vector<ExactCandidate>& candidates,
                                        int64_t budget, bool measured, int64_t& work,
                                        ExactLayer& to) const {
  // The dimensions a kept state must not exceed: the open finishes, and the makespan unless
  // every candidate has the same. With at most two, in the order of energy, a candidate is
  // dominated when the staircase of the kept states (ascending in the first dimension,
  // descending in the second; a kept state another dominates in both is not on it) has, among
  // its entries no later in the first, one no later in the second: the last of them.
  const std::size_t d_from = from.open.size();
  const std::size_t d_to = to.open.size();
  bool same_makespan = true;
  for (const ExactCandidate& c : candidates) same_makespan &= c.makespan == candidates[0].makespan;
  const std::size_t dims = d_to + (same_makespan ? 0 : 1);
  if (dims > 2 || candidates.empty()) return false;
  const auto coordinate = [&](const ExactCandidate& c, std::size_t i) {
    if (i == d_to) return c.makespan;
    return step.source[i] < 0 ? c.finish
                              : from.finish[static_cast<std::size_t>(c.parent) * d_from +
                                            static_cast<std::size_t>(step.source[i])];
  };
  std::vector<std::pair<double, double>> stairs;  // (first, second)
  for (const ExactCandidate& c : candidates) {
    const double a = dims > 0 ? coordinate(c, 0) : 0.0;
    const double b = dims > 1 ? coordinate(c, 1) : 0.0;
    auto it = std::upper_bound(stairs.begin(), stairs.end(), a + time_tol_,
                               [](double t, const auto& e) { return t < e.first; });
    work += measured ? 1 + static_cast<int64_t>(std::bit_width(stairs.size()))
                     : static_cast<int64_t>(to.energy.size()) + 1;
    if (work > budget) return false;
    if (it != stairs.begin() && std::prev(it)->second <= b + time_tol_) continue;
    // Kept: off the staircase go the entries it dominates in both (first >= a, second >= b).
    it = std::lower_bound(stairs.begin(), stairs.end(), a,
                          [](const auto& e, double t) { return e.first < t; });
    auto end = it;
    while (end != stairs.end() && end->second >= b) ++end;
    if (measured) work += end - it;
    it = stairs.erase(it, end);
    stairs.insert(it, {a, b});
    for (std::size_t i = 0; i < d_to; ++i) to.finish.push_back(coordinate(c, i));
    to.makespan.push_back(c.makespan);
    to.energy.push_back(c.energy);
    to.parent.push_back(c.parent);
    to.option.push_back(c.option);
  }
  return true;
}

bool Engine::KeepUndominatedByTree(const ExactLayer& from, const ExactStep& step,
                                   const std::vector<ExactCandidate>& candidates, int64_t budget,
                                   bool measured, int64_t& work, ExactLayer& to) const {
  // A segment tree over the candidates in the order of their first open finish: a leaf holds a
  // kept state's other dimensions (the other finishes and the makespan), an inner node their
  // least per dimension. The kept states no later in the first finish are a prefix of the
  // leaves; a subtree whose least values are later than the candidate's in some dimension holds
  // no state that dominates it, so the search descends only where one may.
  const std::size_t d_from = from.open.size();
  const std::size_t d_to = to.open.size();
  const std::size_t count = candidates.size();
  const std::size_t others = d_to;  // finishes 1.. and the makespan
  const auto coordinate = [&](const ExactCandidate& c, std::size_t i) {
    if (i == d_to) return c.makespan;
    return step.source[i] < 0 ? c.finish
                              : from.finish[static_cast<std::size_t>(c.parent) * d_from +
                                            static_cast<std::size_t>(step.source[i])];
  };
  std::vector<std::size_t> by_first(count);
  std::iota(by_first.begin(), by_first.end(), std::size_t{0});
  std::vector<double> first(count);
  for (std::size_t i = 0; i < count; ++i) first[i] = coordinate(candidates[i], 0);
  std::stable_sort(by_first.begin(), by_first.end(),
                   [&](std::size_t a, std::size_t b) { return first[a] < first[b]; });
  std::vector<std::size_t> leaf_of(count);
  std::vector<double> sorted_first(count);
  for (std::size_t r = 0; r < count; ++r) {
    leaf_of[by_first[r]] = r;
    sorted_first[r] = first[by_first[r]];
  }
  std::size_t leaves = 1;
  while (leaves < count) leaves *= 2;
  std::vector<double> least(2 * leaves * others, kInf);  // per node, per other dimension
  struct Node {
    std::size_t index;  // heap order: 1 is the root, 2i and 2i + 1 its children
    std::size_t lo;     // its first leaf
    std::size_t span;   // its leaves
  };
  std::vector<Node> stack;
  std::vector<double> row(d_to + 1);
  for (std::size_t i = 0; i < count; ++i) {
    const ExactCandidate& c = candidates[i];
    for (std::size_t k = 0; k <= d_to; ++k) row[k] = coordinate(c, k);
    if (!measured) {
      work += static_cast<int64_t>(to.energy.size()) + 1;
      if (work > budget) return false;
    }
    // Leaves [0, prefix) are no later in the first finish.
    const std::size_t prefix = static_cast<std::size_t>(
        std::upper_bound(sorted_first.begin(), sorted_first.end(), row[0] + time_tol_) -
        sorted_first.begin());
    bool dominated = false;
    stack.assign(1, {.index = 1, .lo = 0, .span = leaves});
    int64_t visited = 0;
    while (!stack.empty() && !dominated) {
      const Node node = stack.back();
      stack.pop_back();
      ++visited;
      if (node.lo >= prefix) continue;
      bool may = true;
      const double* m = &least[node.index * others];
      for (std::size_t k = 0; k < others && may; ++k) may = m[k] <= row[k + 1] + time_tol_;
      if (!may) continue;
      if (node.span == 1) {
        dominated = true;  // a kept state no later anywhere
      } else {
        const std::size_t half = node.span / 2;
        stack.push_back({.index = 2 * node.index + 1, .lo = node.lo + half, .span = half});
        stack.push_back({.index = 2 * node.index, .lo = node.lo, .span = half});
      }
    }
    if (measured) {
      work += visited + 1;
      if (work > budget) return false;
    }
    if (dominated) continue;
    for (std::size_t node = leaves + leaf_of[i]; node >= 1; node /= 2) {
      double* m = &least[node * others];
      for (std::size_t k = 0; k < others; ++k) m[k] = std::min(m[k], row[k + 1]);
    }
    for (std::size_t k = 0; k < d_to; ++k) to.finish.push_back(row[k]);
    to.makespan.push_back(c.makespan);
    to.energy.push_back(c.energy);
    to.parent.push_back(c.parent);
    to.option.push_back(c.option);
  }
  return true;
}

bool Engine::KeepUndominatedBySum(const ExactLayer& from, const ExactStep& step,
                                  const std::vector<ExactCandidate>& candidates, int64_t budget,
                                  bool measured, int64_t& work, ExactLayer& to) const {
  // A state that dominates another (no later in the makespan and any open finish) has a sum of
  // those no larger (within the tolerances): only the kept states up to the candidate's sum are
  // compared, in the order of their sums. In the order of energy the later candidates tend to
  // be the faster ones, with the smaller sums.
  const std::size_t d_from = from.open.size();
  const std::size_t d_to = to.open.size();
  const double slack = static_cast<double>(d_to + 1) * time_tol_;
  std::vector<std::pair<double, std::size_t>> by_sum;  // (sum, kept state), ascending
  std::vector<double> vec(d_to);
  for (const ExactCandidate& c : candidates) {
    double sum = c.makespan;
    for (std::size_t i = 0; i < d_to; ++i) {
      vec[i] = step.source[i] < 0 ? c.finish
                                  : from.finish[static_cast<std::size_t>(c.parent) * d_from +
                                                static_cast<std::size_t>(step.source[i])];
      sum += vec[i];
    }
    if (!measured) {
      work += static_cast<int64_t>(to.energy.size()) + 1;
      if (work > budget) return false;
    }
    // (A few ulps more: a dominating state's sum may round above the candidate's + slack.)
    const double limit = sum + slack + 8 * std::numeric_limits<double>::epsilon() * std::abs(sum);
    const auto end = std::upper_bound(by_sum.begin(), by_sum.end(), limit,
                                      [](double t, const auto& e) { return t < e.first; });
    bool dominated = false;
    for (auto it = by_sum.begin(); it != end && !dominated; ++it) {
      const std::size_t q = it->second;
      work += measured ? 1 : 0;
      if (to.makespan[q] > c.makespan + time_tol_) continue;
      bool no_later = true;
      for (std::size_t i = 0; i < d_to && no_later; ++i) {
        no_later = to.finish[q * d_to + i] <= vec[i] + time_tol_;
      }
      dominated = no_later;
    }
    if (measured && ++work > budget) return false;
    if (dominated) continue;
    by_sum.insert(std::upper_bound(by_sum.begin(), by_sum.end(), sum,
                                   [](double t, const auto& e) { return t < e.first; }),
                  {sum, to.energy.size()});
    to.finish.insert(to.finish.end(), vec.begin(), vec.end());
    to.makespan.push_back(c.makespan);
    to.energy.push_back(c.energy);
    to.parent.push_back(c.parent);
    to.option.push_back(c.option);
  }
  return true;
}

bool Engine::RunLayers(const ExactSearch& x, const Incumbents& incumbents, std::size_t beam,
                       int64_t budget, bool measured, int64_t& work,
                       std::vector<ExactLayer>& layers) const {
  layers.assign(static_cast<std::size_t>(n_) + 1, ExactLayer{});
  layers[0].makespan = {0.0};
  layers[0].energy = {0.0};
  layers[0].parent = {-1};
  layers[0].option = {-1};
  std::vector<ExactCandidate> candidates;
  std::vector<int> next(chains_.size(), 0);  // per chain: its first unplaced position
  for (int k = 0; k < n_; ++k) {
    const ExactLayer& from = layers[k];
    ExactLayer& to = layers[k + 1];
    const ExactStep step = PrepareStep(x, k, from, to, next);
    if (measured) {
      // Past the budget before the candidates exist, and never a layer whose candidates (and
      // the dominance tree over them) would take more than a few hundred MB.
      const std::size_t examined = from.energy.size() * (x.end[x.order[k]] - x.first[x.order[k]]);
      work += static_cast<int64_t>(examined);
      if (work > budget || examined > kFrontierLayerCandidates) return false;
    }
    CollectCandidates(x, k, from, step, next, incumbents, candidates);
    if (!KeepUndominated(from, step, candidates, beam, budget, measured, work, to)) return false;
  }
  return true;
}

// The plan of the last layer's state `s`, written into `choice` (front indices).
void Engine::TraceBack(const ExactSearch& x, const std::vector<ExactLayer>& layers, int s,
                       std::vector<int>& choice) const {
  for (int k = n_; k > 0; --k) {
    const ExactLayer& layer = layers[static_cast<std::size_t>(k)];
    choice[x.order[k - 1]] = layer.option[static_cast<std::size_t>(s)];
    s = layer.parent[static_cast<std::size_t>(s)];
  }
}

bool Engine::ExactAt(int64_t budget, double deadline, std::vector<int>& choice, std::size_t beam,
                     const std::vector<char>* free_nodes) const {
  const double incumbent = Energy(choice);
  int64_t work = 0;
  const ExactSearch x = PrepareExact(deadline, choice, free_nodes);
  std::vector<ExactLayer> layers;
  const bool finished =
      RunLayers(x, {.time = {-kInf}, .energy = {incumbent}}, beam, budget, false, work, layers);
  exact_work_ += work;
  if (!finished) return false;
  // Every complete state beats the incumbent (its bound was below): the cheapest one.
  const ExactLayer& last = layers[static_cast<std::size_t>(n_)];
  int best = -1;
  double best_energy = incumbent;
  for (std::size_t s = 0; s < last.energy.size(); ++s) {
    const double total = last.energy[s] + pg_ * last.makespan[s];
    if (last.makespan[s] <= deadline + time_tol_ && total < best_energy) {
      best_energy = total;
      best = static_cast<int>(s);
    }
  }
  if (best >= 0) TraceBack(x, layers, best, choice);
  return beam == 0;
}

std::vector<int> Engine::FrontChoice(const IterationPoint& point) const {
  std::vector<int> choice(static_cast<std::size_t>(n_));
  for (int v = 0; v < n_; ++v) {
    const std::vector<int>& options = SpecOf(v).option;
    const auto it = std::find(options.begin(), options.end(), point.choice[v]);
    KAREUS_CHECK(it != options.end())
        << "node " << v << ": option " << point.choice[v] << " is on no front entry";
    choice[v] = static_cast<int>(it - options.begin());
  }
  return choice;
}

void Engine::SetPlan(IterationPoint& point, const std::vector<int>& choice, bool exact) const {
  for (int v = 0; v < n_; ++v)
    point.choice[v] = SpecOf(v).option[static_cast<std::size_t>(choice[v])];
  point.cost = EvaluateFront(choice);
  point.exact = exact;
  if (exact) point.model_energy_j = point.cost.energy_j;
}

bool Engine::ExactFrontier(int64_t budget) {
  if (raw_.empty()) return false;
  // The realized plans as a staircase: each point's engine energy, at its time.
  std::vector<std::vector<int>> choices;
  std::vector<double> energies;
  std::vector<std::size_t> by_time;
  double slowest = 0.0;
  for (std::size_t i = 0; i < raw_.size(); ++i) {
    choices.push_back(FrontChoice(raw_[i]));
    energies.push_back(Energy(choices.back()));
    by_time.push_back(i);
    slowest = std::max(slowest, raw_[i].deadline_s);
  }
  std::sort(by_time.begin(), by_time.end(), [&](std::size_t a, std::size_t b) {
    return raw_[a].cost.time_s < raw_[b].cost.time_s;
  });
  Incumbents incumbents;
  incumbents.fastest = RealMakespan(std::vector<int>(static_cast<std::size_t>(n_), 0));
  std::vector<std::size_t> incumbent_of;  // per step of the staircase: the point behind it
  for (std::size_t i : by_time) {
    const bool cheaper = incumbents.energy.empty() || energies[i] < incumbents.energy.back();
    incumbents.time.push_back(raw_[i].cost.time_s);
    incumbents.energy.push_back(cheaper ? energies[i] : incumbents.energy.back());
    incumbent_of.push_back(cheaper ? i : incumbent_of.back());
  }
  int64_t work = 0;
  const ExactSearch x = PrepareExact(slowest, choices.front(), nullptr);
  std::vector<ExactLayer> layers;
  const bool finished = RunLayers(x, incumbents, 0, budget, true, work, layers);
  exact_work_ += work;
  if (!finished) return false;
  // The complete states by makespan, each with the cheapest state up to it.
  const ExactLayer& last = layers[static_cast<std::size_t>(n_)];
  std::vector<int> states(last.energy.size());
  std::iota(states.begin(), states.end(), 0);
  std::sort(states.begin(), states.end(),
            [&](int a, int b) { return last.makespan[a] < last.makespan[b]; });
  std::vector<double> makespans;
  std::vector<int> cheapest;
  double least = kInf;
  for (int s : states) {
    const double total = last.energy[s] + pg_ * last.makespan[s];
    makespans.push_back(last.makespan[s]);
    if (cheapest.empty() || total < least) {
      least = total;
      cheapest.push_back(s);
    } else {
      cheapest.push_back(cheapest.back());
    }
  }
  // Each deadline's least energy: the cheapest complete state that meets it, unless a realized
  // plan that meets it is no costlier (the states no cheaper than one were dropped).
  std::vector<int> plan(static_cast<std::size_t>(n_));
  for (IterationPoint& point : raw_) {
    const double deadline = point.deadline_s + time_tol_;
    const auto step = std::upper_bound(incumbents.time.begin(), incumbents.time.end(), deadline);
    const std::size_t own = static_cast<std::size_t>(&point - raw_.data());
    const std::size_t known =
        step == incumbents.time.begin()
            ? own
            : incumbent_of[static_cast<std::size_t>(step - incumbents.time.begin()) - 1];
    plan = choices[known];
    const auto it = std::upper_bound(makespans.begin(), makespans.end(), deadline);
    if (it != makespans.begin()) {
      const int s = cheapest[static_cast<std::size_t>(it - makespans.begin()) - 1];
      if (last.energy[s] + pg_ * last.makespan[s] < energies[known] * (1 - 1e-12))
        TraceBack(x, layers, s, plan);
    }
    SetPlan(point, plan, true);
  }
  return true;
}

bool Engine::NeighborhoodSearch(std::vector<int>& choice, double deadline, int rounds) const {
  // Neighbourhoods: every pair of stages (with three or more), then windows of kWindow nodes
  // of the topological order, half-overlapping.
  constexpr int kWindow = 12;
  std::vector<std::vector<char>> hoods;
  const int stages = problem_.num_stages;
  if (stages >= 3) {
    for (int a = 0; a < stages; ++a) {
      for (int b = a + 1; b < stages; ++b) {
        std::vector<char> mask(static_cast<std::size_t>(n_), 0);
        for (int v = 0; v < n_; ++v) {
          const int s = dag_.nodes[static_cast<std::size_t>(v)].stage;
          mask[v] = static_cast<char>(s == a || s == b);
        }
        hoods.push_back(std::move(mask));
      }
    }
  }
  if (n_ > kWindow) {
    for (int first = 0; first < n_; first += kWindow / 2) {
      std::vector<char> mask(static_cast<std::size_t>(n_), 0);
      const int last = std::min(n_, first + kWindow);
      for (int k = first; k < last; ++k)
        mask[dag_.topological_order[static_cast<std::size_t>(k)]] = 1;
      hoods.push_back(std::move(mask));
      if (last == n_) break;
    }
  }
  bool changed = false;
  for (int round = 0; round < rounds; ++round) {
    bool improved = false;
    for (const std::vector<char>& mask : hoods) {
      const double before = Energy(choice);
      std::vector<int> trial = choice;
      if (!ExactAt(kNeighborhoodBudget, deadline, trial, 0, &mask)) {
        // Out of budget: the same neighbourhood as a beam (a heuristic) within the budget.
        double options = 1.0;
        for (int v = 0; v < n_; ++v)
          options += mask[v] ? static_cast<double>(SpecOf(v).time.size()) : 1.0;
        const auto beam = static_cast<std::size_t>(
            std::clamp(std::sqrt(static_cast<double>(kNeighborhoodBudget) / options), 4.0, 4096.0));
        ExactAt(kNeighborhoodBudget, deadline, trial, beam, &mask);
      }
      if (trial == choice) continue;
      double makespan = 0.0;
      Refine(trial, deadline, nullptr, &makespan);
      if (Energy(trial, makespan) < before * (1 - 1e-12)) {
        choice.swap(trial);
        improved = true;
        changed = true;
      }
    }
    if (!improved) break;
  }
  return changed;
}

}  // namespace kareus::pipeline::internal
