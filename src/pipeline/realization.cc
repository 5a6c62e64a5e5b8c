// SPDX-License-Identifier: Apache-2.0
// Realization in real options (front indices per node): makespan, energy, repair, slack
// refinement (FillForward/FillBackward, Refine), one-exchange local search, the chains and the
// chain search. See solver.cc, parts 2 and 3.
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

double Engine::RealMakespan(const std::vector<int>& choice) const {
  // Nodes in topological order; finish times by the longest path.
  std::vector<double>& finish = scratch_.real_finish;
  finish.assign(static_cast<std::size_t>(n_), 0.0);
  double makespan = 0.0;
  for (int v : dag_.topological_order) {
    const double start = EarliestStart(v, [&](int p) { return finish[p]; });
    finish[v] = start + SpecOf(v).time[static_cast<std::size_t>(choice[v])];
    makespan = std::max(makespan, finish[v]);
  }
  return makespan;
}

double Engine::Energy(const std::vector<int>& choice) const {
  return Energy(choice, RealMakespan(choice));
}

double Engine::Energy(const std::vector<int>& choice, double makespan) const {
  return Effective(choice) + pg_ * makespan;
}

double Engine::Effective(const std::vector<int>& choice) const {
  double effective = 0.0;
  for (int v = 0; v < n_; ++v) effective += SpecOf(v).eff[static_cast<std::size_t>(choice[v])];
  return effective;
}

void Engine::Durations(const std::vector<int>& choice, std::vector<double>& dur) const {
  dur.resize(static_cast<std::size_t>(n_));
  for (int v = 0; v < n_; ++v) dur[v] = SpecOf(v).time[static_cast<std::size_t>(choice[v])];
}

// Makes `choice` meet `deadline` by moving instructions that finish too late to their fastest
// option (the all-fastest plan meets any deadline >= the minimum time).
void Engine::Repair(std::vector<int>& choice, double deadline) const {
  std::vector<double> finish(n_, 0.0);
  std::vector<double> latest_start(n_, 0.0);
  for (int round = 0; round <= n_; ++round) {
    for (int v : dag_.topological_order) {
      const double start = EarliestStart(v, [&](int p) { return finish[p]; });
      finish[v] = start + SpecOf(v).time[static_cast<std::size_t>(choice[v])];
    }
    bool late = false;
    for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
      const int v = *it;
      const double lf = LatestFinish(v, deadline, [&](int w) { return latest_start[w]; });
      if (finish[v] > lf + time_tol_ && choice[v] != 0) {
        choice[v] = 0;
        late = true;
      }
      latest_start[v] = lf - SpecOf(v).time[static_cast<std::size_t>(choice[v])];
    }
    if (!late) return;
  }
}

// Forward pass in topological order with latest finishes from the current durations (a node's
// successors are unchanged when it is visited): each node takes the cheapest option that fits
// its window (and `cap`, when given). True when anything changed. With `carried` the latest
// finishes and durations in scratch_ are the previous FillBackward's (of this `choice` and
// `deadline`): the same values this pass would compute, so it skips computing them.
bool Engine::FillForward(std::vector<int>& choice, double deadline, const std::vector<double>* cap,
                         bool carried) const {
  std::vector<double>& latest_finish = scratch_.fill_latest;
  std::vector<double>& start = scratch_.fill_earliest;  // left for a carried FillBackward
  std::vector<double>& finish = scratch_.fill_finish;
  std::vector<double>& dur = scratch_.fill_dur;
  const auto n = static_cast<std::size_t>(n_);
  if (!carried) {
    Durations(choice, dur);
    latest_finish.resize(n);
    for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
      const int v = *it;
      latest_finish[v] =
          LatestFinish(v, deadline, [&](int w) { return latest_finish[w] - dur[w]; });
    }
  }
  start.resize(n);
  finish.resize(n);
  bool changed = false;
  for (int v : dag_.topological_order) {
    const double es = EarliestStart(v, [&](int p) { return finish[p]; });
    start[v] = es;
    double window = latest_finish[v] - es;
    if (cap != nullptr) window = std::min(window, (*cap)[v]);
    changed = TakeSlower(v, window, choice, dur) || changed;
    finish[v] = es + dur[v];
  }
  return changed;
}

// The mirror image: reverse topological order with earliest starts from the current durations
// (with `carried`: the previous FillForward's).
bool Engine::FillBackward(std::vector<int>& choice, double deadline, const std::vector<double>* cap,
                          bool carried) const {
  std::vector<double>& earliest_start = scratch_.fill_earliest;
  std::vector<double>& latest_finish = scratch_.fill_latest;  // left for a carried FillForward
  std::vector<double>& latest_start = scratch_.fill_latest_start;
  std::vector<double>& dur = scratch_.fill_dur;
  const auto n = static_cast<std::size_t>(n_);
  if (!carried) {
    Durations(choice, dur);
    earliest_start.resize(n);
    for (int v : dag_.topological_order) {
      earliest_start[v] = EarliestStart(v, [&](int p) { return earliest_start[p] + dur[p]; });
    }
  }
  latest_finish.resize(n);
  latest_start.resize(n);
  bool changed = false;
  for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
    const int v = *it;
    const double lf = LatestFinish(v, deadline, [&](int w) { return latest_start[w]; });
    latest_finish[v] = lf;
    double window = lf - earliest_start[v];
    if (cap != nullptr) window = std::min(window, (*cap)[v]);
    changed = TakeSlower(v, window, choice, dur) || changed;
    latest_start[v] = lf - dur[v];
  }
  return changed;
}

// Slack refinement within `deadline`: first each instruction may only move up to the slower end
// of its convex segment (`cap`: spreads the slack the way the convex optimum does), then
// freely, forward and backward until nothing changes.
int Engine::Refine(std::vector<int>& choice, double deadline, const std::vector<double>* cap,
                   double* makespan) const {
  // Each pass hands the next the windows' other ends (carried), so only the first computes them.
  int passes = 0;
  bool carried = false;
  if (cap != nullptr) {
    FillForward(choice, deadline, cap, false);
    FillBackward(choice, deadline, cap, true);
    passes += 2;
    carried = true;
  }
  // A pass that changes nothing leaves a plan where no instruction's float fits a slower option:
  // the other direction would change nothing either. Its arrays then hold the plan's finishes
  // (a forward pass) or its earliest starts (a backward pass): RealMakespan's values.
  double reached = -1.0;
  for (int round = 0; round < 8; ++round) {
    ++passes;
    if (!FillForward(choice, deadline, nullptr, carried)) {
      reached = 0.0;
      for (int v = 0; v < n_; ++v) reached = std::max(reached, scratch_.fill_finish[v]);
      break;
    }
    carried = true;
    ++passes;
    if (!FillBackward(choice, deadline, nullptr, true)) {
      reached = 0.0;
      for (int v = 0; v < n_; ++v)
        reached = std::max(reached, scratch_.fill_earliest[v] + scratch_.fill_dur[v]);
      break;
    }
  }
  if (makespan != nullptr) *makespan = reached >= 0.0 ? reached : RealMakespan(choice);
  return passes;
}

// One-exchange local search: make one instruction faster (each faster front entry), let Refine
// hand the freed slack to the others, keep the result when the energy drops; until no exchange
// helps or kExchangeBudget units of work are spent (a bounded cost instead of O(n^2 options)).
// From a Refine fixpoint a trial follows only the nodes its change reaches (TrialRefine: the
// plan Refine gives) and its energy is the plan's less what the touched nodes changed; its
// work is what it visited (kTrialVisitWork per node). Where the plan is no fixpoint the full
// Refine runs, at n x (its passes + 2).
void Engine::Exchange(std::vector<int>& choice, double deadline) const {
  const auto eff = [&](int v, int j) { return SpecOf(v).eff[static_cast<std::size_t>(j)]; };
  double best = Energy(choice);
  double best_effective = Effective(choice);
  TrialState& s = scratch_.trial;
  bool fixpoint = CaptureFixpoint(choice, deadline, s);
  std::vector<int> trial = choice;
  int64_t work = 0;
  for (int round = 0; round < 4; ++round) {
    bool improved = false;
    for (int v : dag_.topological_order) {
      for (int j = 0; j < choice[v]; ++j) {
        if (work > kExchangeBudget) return;
        double makespan = 0.0;
        double energy = 0.0;
        bool settled = false;
        if (fixpoint) {
          trial[v] = j;
          TrialRefine(trial, v, deadline, s, &makespan, &settled);
          // The energy from what the trial changed (the nodes it touched).
          double change = 0.0;
          for (int u : s.touched) change += eff(u, trial[u]) - eff(u, choice[u]);
          energy = best_effective + change + pg_ * makespan;
          work += kTrialVisitWork * s.visits + static_cast<int64_t>(sink_nodes_.size());
        } else {
          trial = choice;
          trial[v] = j;
          const int passes = Refine(trial, deadline, nullptr, &makespan);
          energy = Energy(trial, makespan);
          work += static_cast<int64_t>(n_) * (passes + 2);
        }
        if (energy < best * (1 - 1e-12)) {
          choice = trial;
          best_effective = Effective(choice);
          best = best_effective + pg_ * makespan;
          if (fixpoint && settled) {
            AcceptTrial(s);
          } else {
            fixpoint = CaptureFixpoint(choice, deadline, s);
          }
          improved = true;
          break;
        }
        if (fixpoint) ResetTrial(trial, choice, s);
      }
    }
    if (!improved) break;
  }
}

bool Engine::CaptureFixpoint(const std::vector<int>& choice, double deadline, TrialState& s) const {
  const auto n = static_cast<std::size_t>(n_);
  Durations(choice, s.dur);
  s.lf.resize(n);
  s.ls.resize(n);
  s.es.resize(n);
  s.fin.resize(n);
  // FillForward's windows, in its arithmetic.
  for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
    const int v = *it;
    s.lf[v] = LatestFinish(v, deadline, [&](int w) { return s.ls[w]; });
    s.ls[v] = s.lf[v] - s.dur[v];
  }
  bool fixpoint = true;
  for (int v : dag_.topological_order) {
    s.es[v] = EarliestStart(v, [&](int p) { return s.fin[p]; });
    s.fin[v] = s.es[v] + s.dur[v];
    if (NextFits(v, choice[v], s.lf[v] - s.es[v])) fixpoint = false;
  }
  s.t_dur = s.dur;
  s.t_lf = s.lf;
  s.t_ls = s.ls;
  s.t_es = s.es;
  s.t_fin = s.fin;
  s.touched.clear();
  s.is_touched.assign(n, 0);
  s.queued.assign(n, 0);
  return fixpoint;
}

int Engine::TrialRefine(std::vector<int>& trial, int v, double deadline, TrialState& s,
                        double* makespan, bool* settled) const {
  const auto touch = [&](int u) {
    if (!s.is_touched[u]) {
      s.is_touched[u] = 1;
      s.touched.push_back(u);
    }
  };
  // The nodes of one pass, in its order (forwards: ascending topological positions): every
  // touched node, and whatever `visit` pushes (always later in the order).
  const auto run = [&](bool forwards, auto visit) {
    std::vector<int>& heap = s.heap;
    heap.clear();
    const auto later = [&](int a, int b) { return forwards ? a > b : a < b; };
    const auto push = [&](int u) {
      if (s.queued[u]) return;
      s.queued[u] = 1;
      heap.push_back(topo_position_[u]);
      std::push_heap(heap.begin(), heap.end(), later);
    };
    for (int u : s.touched) push(u);
    while (!heap.empty()) {
      ++s.visits;
      std::pop_heap(heap.begin(), heap.end(), later);
      const int u = dag_.topological_order[static_cast<std::size_t>(heap.back())];
      heap.pop_back();
      s.queued[u] = 0;
      touch(u);
      visit(u, push);
    }
  };
  const auto forward = [&](int u, auto push) {
    const double es = EarliestStart(u, [&](int p) { return s.t_fin[p]; });
    s.t_es[u] = es;
    const bool moved = TakeSlower(u, s.t_lf[u] - es, trial, s.t_dur);
    s.t_fin[u] = es + s.t_dur[u];
    if (s.t_fin[u] != s.fin[u]) {
      for (int i = succs_.start[u]; i < succs_.start[u + 1]; ++i) push(succs_.node[i]);
    }
    return moved;
  };
  // A backward pass's step (`fill` false: only the windows, as FillForward computes them).
  const auto backward = [&](int u, auto push, bool fill) {
    const double lf = LatestFinish(u, deadline, [&](int w) { return s.t_ls[w]; });
    s.t_lf[u] = lf;
    const bool moved = fill && TakeSlower(u, lf - s.t_es[u], trial, s.t_dur);
    s.t_ls[u] = lf - s.t_dur[u];
    if (s.t_ls[u] != s.ls[u]) {
      for (int i = preds_.start[u]; i < preds_.start[u + 1]; ++i) push(preds_.node[i]);
    }
    return moved;
  };
  s.visits = 0;
  s.t_dur[v] = SpecOf(v).time[static_cast<std::size_t>(trial[v])];
  touch(v);
  // Refine(trial, deadline, nullptr): the first forward pass computes its latest finishes from
  // the durations (v's changed), the later passes take the other direction's.
  run(false, [&](int u, auto push) { backward(u, push, false); });
  int passes = 0;
  *settled = false;
  for (int round = 0; round < 8 && !*settled; ++round) {
    bool changed = false;
    ++passes;
    run(true, [&](int u, auto push) { changed = forward(u, push) || changed; });
    // The makespan: the latest finish, a sink's (a node finishes no later than its successors
    // start: the same double as the latest over every node).
    if (!changed) {
      double reached = 0.0;
      for (int u : sink_nodes_) reached = std::max(reached, s.t_fin[u]);
      *makespan = reached;
      *settled = true;
      break;
    }
    changed = false;
    ++passes;
    run(false, [&](int u, auto push) { changed = backward(u, push, true) || changed; });
    if (!changed) {
      double reached = 0.0;
      for (int u : sink_nodes_) reached = std::max(reached, s.t_es[u] + s.t_dur[u]);
      *makespan = reached;
      *settled = true;
    }
  }
  if (!*settled) *makespan = RealMakespan(trial);
  return passes;
}

void Engine::ResetTrial(std::vector<int>& trial, const std::vector<int>& choice,
                        TrialState& s) const {
  for (int u : s.touched) {
    trial[u] = choice[u];
    s.t_dur[u] = s.dur[u];
    s.t_lf[u] = s.lf[u];
    s.t_ls[u] = s.ls[u];
    s.t_es[u] = s.es[u];
    s.t_fin[u] = s.fin[u];
    s.is_touched[u] = 0;
  }
  s.touched.clear();
}

void Engine::AcceptTrial(TrialState& s) const {
  // The settled trial's last pass changed nothing: its windows are a fixpoint's.
  for (int u : s.touched) {
    s.dur[u] = s.t_dur[u];
    s.lf[u] = s.t_lf[u];
    s.es[u] = s.t_es[u];
    s.fin[u] = s.t_fin[u] = s.t_es[u] + s.t_dur[u];
    s.ls[u] = s.t_ls[u] = s.t_lf[u] - s.t_dur[u];
    s.is_touched[u] = 0;
  }
  s.touched.clear();
}

void Engine::BuildChains() {
  chain_prev_.assign(static_cast<std::size_t>(n_), -1);
  chain_next_.assign(static_cast<std::size_t>(n_), -1);
  const auto is_sync = [&](int v) {
    return dag_.nodes[static_cast<std::size_t>(v)].node == schedule::NodeKind::kGradientSync;
  };
  for (const DagEdge& e : dag_.edges) {
    // The compute stream only: a gradient sync runs beside its stage's instructions (and an
    // overlapped one branches off the chain), so it stays out of every chain.
    if (e.cross_stage || is_sync(e.from) || is_sync(e.to)) continue;
    if (chain_next_[e.from] >= 0 || chain_prev_[e.to] >= 0) {
      chain_prev_.assign(static_cast<std::size_t>(n_), -1);
      chain_next_.assign(static_cast<std::size_t>(n_), -1);
      return;
    }
    chain_next_[e.from] = e.to;
    chain_prev_[e.to] = e.from;
  }
  for (int v = 0; v < n_; ++v) {
    if (chain_prev_[v] >= 0 || chain_next_[v] < 0) continue;
    std::vector<int> chain;
    for (int w = v; w >= 0; w = chain_next_[w]) chain.push_back(w);
    chains_.push_back(std::move(chain));
  }
}

void Engine::Schedule(const std::vector<int>& choice, double deadline, bool latest,
                      std::vector<double>& start) const {
  start.assign(static_cast<std::size_t>(n_), 0.0);
  if (!latest) {
    for (int v : dag_.topological_order) {
      start[v] = EarliestStart(
          v, [&](int p) { return start[p] + SpecOf(p).time[static_cast<std::size_t>(choice[p])]; });
    }
    return;
  }
  for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
    const int v = *it;
    const double lf = LatestFinish(v, deadline, [&](int w) { return start[w]; });
    start[v] = lf - SpecOf(v).time[static_cast<std::size_t>(choice[v])];
  }
}

bool Engine::OptimizeChain(const std::vector<int>& chain, std::vector<int>& choice,
                           const std::vector<double>& start, double deadline) const {
  const std::size_t length = chain.size();
  // Windows from the fixed neighbours: release (earliest start) and deadline (latest finish),
  // the latter tightened by the chain's own successors at their fastest.
  std::vector<double> release(length, 0.0);
  std::vector<double> due(length, deadline);
  double current = 0.0;
  for (std::size_t i = 0; i < length; ++i) {
    const int v = chain[i];
    current += SpecOf(v).eff[static_cast<std::size_t>(choice[v])];
    for (int j = preds_.start[v]; j < preds_.start[v + 1]; ++j) {
      const int p = preds_.node[j];
      if (p == chain_prev_[v]) continue;
      release[i] =
          std::max(release[i],
                   start[p] + SpecOf(p).time[static_cast<std::size_t>(choice[p])] + preds_.lag[j]);
    }
    for (int j = succs_.start[v]; j < succs_.start[v + 1]; ++j) {
      const int w = succs_.node[j];
      if (w == chain_next_[v]) continue;
      due[i] = std::min(due[i], start[w] - succs_.lag[j]);
    }
  }
  for (std::size_t i = length - 1; i-- > 0;) {
    due[i] = std::min(due[i], due[i + 1] - SpecOf(chain[i + 1]).time.front());
  }
  using State = ChainState;
  std::vector<std::vector<State>>& layers = scratch_.chain_layers;
  layers.resize(length + 1);
  layers[0].assign(1, {0.0, 0.0, -1, -1});
  // At most kChainStates states per layer, fewer on long chains of many options: a layer's
  // merge visits about states x options candidates, so the chain's whole program stays within
  // about kChainWork of them (the at-scale example's stage chains, 256 instructions of 31-84
  // options, keep ~285; the benchmark cases of 20 clocks 409-2,048; see kChainWork).
  std::size_t options_total = 0;
  for (int v : chain) options_total += SpecOf(v).time.size();
  const std::size_t max_states = std::clamp<std::size_t>(
      kChainWork / std::max<std::size_t>(options_total, 1), kChainStatesMin, kChainStates);
  // Per layer, the candidates (state k, option j) form one list per option j: along k the
  // finishes grow and the energies fall (the states are a Pareto staircase). The lists are
  // merged in order of (finish, energy) through a heap, and a list whose next entry the
  // staircase already dominates jumps (galloping: doubling steps, then a binary search within the
  // last one) to its first entry that is cheaper than the staircase's last state: the same states
  // as sorting every candidate, without visiting the dominated ones.
  std::vector<ChainHead>& heap = scratch_.chain_heap;
  const auto later = [](const ChainHead& a, const ChainHead& b) {
    return a.finish != b.finish ? a.finish > b.finish : a.energy > b.energy;
  };
  for (std::size_t i = 0; i < length; ++i) {
    const Spec& spec = SpecOf(chain[i]);
    const std::vector<State>& from = layers[i];
    // States finishing before the release all start at the release: only the cheapest (the
    // last of them) matters.
    std::size_t k0 = 0;
    while (k0 + 1 < from.size() && from[k0 + 1].finish <= release[i]) ++k0;
    const auto begin = [&](std::size_t k) { return std::max(from[k].finish, release[i]); };
    heap.clear();
    for (std::size_t j = 0; j < spec.time.size(); ++j) {
      const double finish = begin(k0) + spec.time[j];
      if (finish > due[i] + time_tol_) break;  // slower options fit no state either
      heap.push_back(
          {finish, from[k0].energy + spec.eff[j], static_cast<int>(k0), static_cast<int>(j)});
    }
    if (heap.empty()) return false;  // the current choice is feasible; numerical trouble
    std::make_heap(heap.begin(), heap.end(), later);
    std::vector<State>& to = layers[i + 1];
    to.clear();
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const ChainHead h = heap.back();
      heap.pop_back();
      if (to.empty() || h.energy < to.back().energy - 1e-12 * std::abs(h.energy))
        to.push_back({h.finish, h.energy, h.state, h.option});
      // The list's next entry that the staircase does not already dominate (energies only
      // fall along the staircase, so one dominated now stays dominated).
      // Galloping from the next state: the jump is usually short.
      const double eff = spec.eff[static_cast<std::size_t>(h.option)];
      const double best = to.back().energy;
      const auto dominated = [&](const State& state) { return state.energy + eff >= best; };
      std::size_t k = static_cast<std::size_t>(h.state) + 1;
      if (k < from.size() && dominated(from[k])) {
        std::size_t step = 1;
        std::size_t low = k;  // dominated
        while (low + step < from.size() && dominated(from[low + step])) {
          low += step;
          step *= 2;
        }
        const std::size_t high = std::min(low + step, from.size());  // not dominated, or the end
        k = static_cast<std::size_t>(
            std::partition_point(from.begin() + static_cast<std::ptrdiff_t>(low) + 1,
                                 from.begin() + static_cast<std::ptrdiff_t>(high), dominated) -
            from.begin());
      }
      if (k >= from.size()) continue;
      const double finish = begin(k) + spec.time[static_cast<std::size_t>(h.option)];
      if (finish > due[i] + time_tol_) continue;
      heap.push_back({finish, from[k].energy + eff, static_cast<int>(k), h.option});
      std::push_heap(heap.begin(), heap.end(), later);
    }
    if (to.size() > max_states) {
      // Keep an evenly spread subset (always the fastest and the cheapest).
      std::vector<State> kept;
      for (std::size_t q = 0; q < max_states; ++q)
        kept.push_back(to[q * (to.size() - 1) / (max_states - 1)]);
      to.swap(kept);
    }
  }
  const State& best = layers[length].back();
  if (!(best.energy < current - 1e-9 * std::max(1.0, std::abs(current)))) return false;
  int k = static_cast<int>(layers[length].size()) - 1;
  for (std::size_t i = length; i-- > 0;) {
    const State& state = layers[i + 1][static_cast<std::size_t>(k)];
    choice[chain[i]] = state.option;
    k = state.parent;
  }
  return true;
}

void Engine::ChainSearch(std::vector<int>& choice, double deadline, int rounds) const {
  if (chains_.empty()) return;
  std::vector<double> start;
  std::vector<int> trial;
  double energy = Energy(choice);
  for (int round = 0; round < rounds; ++round) {
    bool improved = false;
    for (bool latest : {false, true}) {
      for (const std::vector<int>& chain : chains_) {
        Schedule(choice, deadline, latest, start);
        trial = choice;
        if (!OptimizeChain(chain, trial, start, deadline)) continue;
        double makespan = 0.0;
        Refine(trial, deadline, nullptr, &makespan);
        // The chain's effective energy fell, but the iteration may have grown (static energy):
        // kept only when the total falls.
        const double trial_energy = Energy(trial, makespan);
        if (trial_energy < energy * (1 - 1e-12)) {
          energy = trial_energy;
          choice.swap(trial);
          improved = true;
        }
      }
    }
    if (!improved) break;
  }
}

}  // namespace kareus::pipeline::internal
