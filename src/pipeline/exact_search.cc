// SPDX-License-Identifier: Apache-2.0
// The exact dynamic program over a topological order (ExactAt; a beam past its budget) and
// the neighbourhood search built on it. See solver.cc, part 3.
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
    for (std::size_t i = chain.size(); i-- > 0;) {
      const int v = chain[i];
      x.chain_of[v] = static_cast<int>(c);
      x.index_in_chain[v] = static_cast<int>(i);
      const Spec& spec = SpecOf(v);
      std::vector<std::size_t> units(spec.time.size());
      for (std::size_t j = 0; j < spec.time.size(); ++j) {
        units[j] = static_cast<std::size_t>(std::floor(spec.time[j] / x.grid));
      }
      for (std::size_t b = 0; b < cells; ++b) {
        double best = kInf;
        for (std::size_t j = x.first[v]; j < x.end[v]; ++j) {
          if (units[j] <= b) best = std::min(best, spec.eff[j] + t[i + 1][b - units[j]]);
        }
        t[i][b] = best;
      }
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

double Engine::ChainBound(const ExactSearch& x, std::size_t c, int next, double free_from) const {
  const std::size_t cells = ExactSearch::kCells;
  const std::vector<int>& chain = chains_[c];
  const double span = x.deadline - x.tail[chain.back()] - free_from;
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
                               double incumbent, std::vector<ExactCandidate>& candidates) const {
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
      double low = from.energy[s] + spec.eff[j] + pg_ * makespan_low +
                   x.loose_after[static_cast<std::size_t>(k)];
      for (auto [c, src] : step.chain_sources) {
        const double free_from =
            src == -2
                ? x.head[chains_[c][static_cast<std::size_t>(next[c])]]
                : (src == -1 ? finish : from.finish[s * d_from + static_cast<std::size_t>(src)]);
        low += ChainBound(x, c, next[c], free_from);
      }
      if (low >= incumbent * (1 - 1e-12)) continue;
      candidates.push_back({from.energy[s] + spec.eff[j], static_cast<int>(s), static_cast<int>(j),
                            makespan, finish, low});
    }
  }
}

bool Engine::KeepUndominated(const ExactLayer& from, const ExactStep& step,
                             std::vector<ExactCandidate>& candidates, std::size_t beam,
                             int64_t budget, int64_t& work, ExactLayer& to) const {
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

bool Engine::ExactAt(int64_t budget, double deadline, std::vector<int>& choice, std::size_t beam,
                     const std::vector<char>* free_nodes) const {
  const double incumbent = Energy(choice);
  int64_t work = 0;
  const ExactSearch x = PrepareExact(deadline, choice, free_nodes);
  std::vector<ExactLayer> layers(static_cast<std::size_t>(n_) + 1);
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
    CollectCandidates(x, k, from, step, next, incumbent, candidates);
    if (!KeepUndominated(from, step, candidates, beam, budget, work, to)) {
      exact_work_ += work;
      return false;
    }
  }
  exact_work_ += work;
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
  if (best >= 0) {
    for (int k = n_; k > 0; --k) {
      const ExactLayer& layer = layers[static_cast<std::size_t>(k)];
      choice[x.order[k - 1]] = layer.option[static_cast<std::size_t>(best)];
      best = layer.parent[static_cast<std::size_t>(best)];
    }
  }
  return beam == 0;
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
      Refine(trial, deadline, nullptr);
      if (Energy(trial) < before * (1 - 1e-12)) {
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
