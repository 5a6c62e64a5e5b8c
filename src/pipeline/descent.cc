// SPDX-License-Identifier: Apache-2.0
// The convex descent: the longest path after a move (MakespanAfter), the move itself
// (ApplyMove), the step loop along the minimum cuts (Run) and the realization of each deadline
// it passes (RecordPoint). See solver.cc, parts 1 and 2.
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

#include "kareus/pareto/pareto.h"
#include "pipeline/engine.h"

namespace kareus::pipeline::internal {

double Engine::MakespanAfter(double delta, double* base, double* rate) {
  // Nodes before the first one moved since the last pass (or moving now) keep their values:
  // none of their ancestors' durations or rates changed.
  std::size_t from = pass_from_;
  for (const std::vector<int>* moving : {&shorten_, &lengthen_}) {
    for (int v : *moving) from = std::min(from, static_cast<std::size_t>(topo_position_[v]));
  }
  pass_from_ = static_cast<std::size_t>(n_);
  for (std::size_t k = from; k < dag_.topological_order.size(); ++k) {
    const int v = dag_.topological_order[k];
    // The start: the latest predecessor's finish (the source's 0 without predecessors).
    double es = 0.0;
    double es_base = 0.0;
    double es_rate = 0.0;
    const int begin = preds_.start[v];
    const int end = preds_.start[v + 1];
    if (begin < end) {
      es = -kInf;
      for (int i = begin; i < end; ++i) {
        const int f = 2 * preds_.node[i] + 1;
        const double len = earliest_[f] + preds_.lag[i];
        if (len > es) {
          es = len;
          es_base = path_base_[f] + preds_.lag[i];
          es_rate = path_rate_[f];
        }
      }
    }
    earliest_[2 * v] = es;
    path_base_[2 * v] = es_base;
    path_rate_[2 * v] = es_rate;
    const double r = rate_[v];
    earliest_[2 * v + 1] = es + dur_[v] + r * delta;
    path_base_[2 * v + 1] = es_base + dur_[v];
    path_rate_[2 * v + 1] = es_rate + r;
  }
  double best = -kInf;
  for (int v : sink_nodes_) {
    if (earliest_[2 * v + 1] > best) {
      best = earliest_[2 * v + 1];
      path_base_[sink_] = path_base_[2 * v + 1];
      path_rate_[sink_] = path_rate_[2 * v + 1];
    }
  }
  earliest_[sink_] = best;
  *base = path_base_[sink_];
  *rate = path_rate_[sink_];
  return best;
}

void Engine::ApplyMove(double delta) {
  for (int v : shorten_) {
    const Spec& spec = SpecOf(v);
    const int p = pos_[v];
    const int target = p % 2 == 1 ? p / 2 : p / 2 - 1;  // the vertex it moves towards
    dur_[v] -= delta;
    if (dur_[v] - spec.hull_time[static_cast<std::size_t>(target)] <= time_tol_) {
      dur_[v] = spec.hull_time[static_cast<std::size_t>(target)];
      pos_[v] = 2 * target;
    } else {
      pos_[v] = 2 * target + 1;
    }
  }
  for (int v : lengthen_) {
    const Spec& spec = SpecOf(v);
    const int p = pos_[v];
    const int target = p / 2 + 1;
    dur_[v] += delta;
    if (spec.hull_time[static_cast<std::size_t>(target)] - dur_[v] <= time_tol_) {
      dur_[v] = spec.hull_time[static_cast<std::size_t>(target)];
      pos_[v] = 2 * target;
    } else {
      pos_[v] = 2 * (target - 1) + 1;
    }
  }
  for (const std::vector<int>* moved : {&shorten_, &lengthen_}) {
    for (int v : *moved)
      pass_from_ = std::min(pass_from_, static_cast<std::size_t>(topo_position_[v]));
  }
  for (int v : shorten_) {
    SetCapacity(v);
    rescan_.push_back(2 * v);  // its start is on the source side
  }
  for (int v : lengthen_) {
    SetCapacity(v);
    rescan_.push_back(2 * v + 1);  // its end is on the source side
  }
}

void Engine::RecordPoint(double deadline, int64_t k, double offset) {
  const auto started = std::chrono::steady_clock::now();
  // The convex durations `offset` into the current move, rounded down to real options.
  // Most nodes keep their convex duration from one deadline to the next: their rounding is
  // reused (the same double, the same results).
  Rounding& r = rounding_;
  if (r.duration.size() != static_cast<std::size_t>(n_)) {
    r.duration.assign(static_cast<std::size_t>(n_), std::numeric_limits<double>::quiet_NaN());
    r.fit.assign(static_cast<std::size_t>(n_), 0);
    r.cost.assign(static_cast<std::size_t>(n_), 0.0);
    r.cap.assign(static_cast<std::size_t>(n_), 0.0);
  }
  double model = 0.0;
  for (int v = 0; v < n_; ++v) {
    const double d = dur_[v] + rate_[v] * offset;
    if (!(d == r.duration[v])) {
      const Spec& spec = SpecOf(v);
      r.duration[v] = d;
      r.fit[v] = spec.Fit(d + time_tol_);
      r.cost[v] = spec.Cost(d);
      // The slower end of the hull segment d lies on (d itself on a vertex).
      const auto it = std::lower_bound(spec.hull_time.begin(), spec.hull_time.end(), d - time_tol_);
      r.cap[v] = it == spec.hull_time.end() ? spec.hull_time.back() : *it;
    }
    model += r.cost[v];
  }
  std::vector<int> choice = r.fit;
  const std::vector<double>& cap = r.cap;
  if (RealMakespan(choice) > deadline + time_tol_) Repair(choice, deadline);
  bool exact = false;
  double makespan = -1.0;  // unknown
  if (options_.reclaim_slack) {
    Refine(choice, deadline, &cap, &makespan);
    if (k <= 0 || small_) {
      makespan = -1.0;
      const auto searched = std::chrono::steady_clock::now();
      ChainSearch(choice, deadline, 8);
      Exchange(choice, deadline);
      ChainSearch(choice, deadline, 8);
      // Small problems search every deadline at once after the descent (ExactFrontier).
      if (k <= 0 || !defer_exact_)
        exact = SearchExactly(choice, deadline, k <= 0 ? kFastestBudget : kSmallBudget);
      if (k <= 0) fastest_wall_s_ += SecondsSince(searched);
    }
  }
  IterationPoint point;
  point.choice.resize(static_cast<std::size_t>(n_));
  for (int v = 0; v < n_; ++v)
    point.choice[v] = SpecOf(v).option[static_cast<std::size_t>(choice[v])];
  point.cost = EvaluateFront(choice, makespan);
  point.step = steps_;
  point.quanta = k;
  point.deadline_s = deadline;
  point.model_energy_j = exact ? point.cost.energy_j : model + pg_ * deadline;
  point.exact = exact;
  raw_.push_back(std::move(point));
  ++deadlines_realized_;
  if (!options_.keep_dominated && !(options_.deadline_s > 0.0) && !defer_exact_ &&
      raw_.size() >= compact_at_)
    CompactPoints();
  realize_wall_s_ += SecondsSince(started);
}

std::vector<pareto::Point> Engine::RawFront() const {
  std::vector<pareto::Point> points;
  points.reserve(raw_.size());
  for (std::size_t i = 0; i < raw_.size(); ++i) {
    points.push_back({.time_s = raw_[i].cost.time_s,
                      .energy_j = raw_[i].cost.energy_j,
                      .payload = static_cast<int64_t>(i)});
  }
  return pareto::Filter(std::move(points));
}

void Engine::CompactPoints() {
  // At most 1.5 x the survivors between compactions (the plans dominate the memory: one int per
  // node and point; 1,000 microbatches realize 226 k deadlines, of which 99 k survive).
  std::vector<std::size_t> keep;
  for (const pareto::Point& p : RawFront()) keep.push_back(static_cast<std::size_t>(p.payload));
  std::sort(keep.begin(), keep.end());
  std::vector<IterationPoint> kept;
  kept.reserve(keep.size());
  for (std::size_t i : keep) kept.push_back(std::move(raw_[i]));
  raw_.swap(kept);
  compact_at_ = std::max(kFirstCompaction, raw_.size() + raw_.size() / 2);
}

bool Engine::SearchExactly(std::vector<int>& choice, double deadline, int64_t budget) {
  if (n_ > kExactMaxNodes) return false;
  if (ExactAt(budget, deadline, choice, 0)) return true;
  // Out of budget: a beam as wide as the budget allows (states x options x kept states per
  // step), then the local searches again from its plan.
  const double per_step = static_cast<double>(node_options_) + 1.0;  // ~ n x options
  const auto beam = static_cast<std::size_t>(
      std::clamp(std::sqrt(static_cast<double>(budget) / per_step), 4.0, 4096.0));
  const std::vector<int> before = choice;
  ExactAt(budget, deadline, choice, beam);
  // The neighbourhood search on small problems only: at the fastest point of the 4 x 16
  // benchmark (128 nodes, 20 options) its 27 neighbourhoods cost 0.2 s and improved nothing
  // (no neighbourhood finished within its budget; the beams found no better plan).
  const bool moved = small_ && NeighborhoodSearch(choice, deadline, 4);
  if (choice != before || moved) {
    ChainSearch(choice, deadline, 8);
    Exchange(choice, deadline);
  }
  return false;
}

void Engine::SearchDeferred() {
  const auto started = std::chrono::steady_clock::now();
  exact_frontier_ = ExactFrontier(kFrontierBudget);
  if (!exact_frontier_) {
    // Past its budget: each deadline's own search.
    for (IterationPoint& point : raw_) {
      if (point.quanta <= 0) continue;  // the fastest point was searched when realized
      std::vector<int> choice = FrontChoice(point);
      const bool exact = SearchExactly(choice, point.deadline_s, kSmallBudget);
      SetPlan(point, choice, exact);
    }
  }
  realize_wall_s_ += SecondsSince(started);
}

void Engine::RealizePassed(Descent& d, double delta) {
  while (d.one_deadline ? !d.deadline_done : d.k_next >= 0) {
    const double deadline = d.k_next < 0
                                ? options_.deadline_s
                                : d.t_min + static_cast<double>(d.k_next) * options_.unit_time_s;
    if (deadline < d.makespan - delta - time_tol_) break;
    RecordPoint(deadline, d.k_next, std::clamp(d.makespan - deadline, 0.0, delta));
    if (d.one_deadline)
      d.deadline_done = true;
    else
      --d.k_next;
  }
}

double Engine::SelectCut() {
  shorten_.clear();
  lengthen_.clear();
  cut_back_fixed_ = 0;
  double delta = kInf;
  // Every critical activity arc across the cut was stopped by its residual capacity in some
  // Scan, so it is in boundary_; entries now inside the source side or off the critical
  // sub-DAG are dropped here.
  std::size_t kept = 0;
  for (int a : boundary_) {
    const bool from_side = side_[arc_from_[a]] != 0;
    const bool to_side = side_[arc_to_[a]] != 0;
    if (!critical_[a] || from_side == to_side) {
      in_boundary_[a] = 0;
      continue;
    }
    boundary_[kept++] = a;
    const int v = arc_act_[a];
    if (v < 0) {  // a lag edge (infinite capacity forwards): back across the cut, not moved
      cut_back_fixed_ += from_side ? 0 : 1;
      continue;
    }
    if (from_side) {  // source side to sink side: shortened
      const int p = pos_[v];
      const int target = p % 2 == 1 ? p / 2 : p / 2 - 1;
      shorten_.push_back(v);
      rate_[v] = -1;
      delta = std::min(delta, dur_[v] - SpecOf(v).hull_time[static_cast<std::size_t>(target)]);
    } else if (lo_[a] > 0.0) {  // backwards with a saving: lengthened
      lengthen_.push_back(v);
      rate_[v] = 1;
      delta =
          std::min(delta, SpecOf(v).hull_time[static_cast<std::size_t>(pos_[v] / 2 + 1)] - dur_[v]);
    } else {
      ++cut_back_fixed_;
    }
  }
  boundary_.resize(kept);
  return delta;
}

double Engine::ClampMove(double makespan, double& delta) {
  // No path off the critical sub-DAG may overtake (each path's length is linear in the move:
  // Newton steps on the longest path reach the exact breakpoint). The last pass leaves
  // earliest_ at the moved durations.
  double base = 0.0;
  double rate = 0.0;
  double reached = 0.0;
  for (int iteration = 0;; ++iteration) {
    reached = MakespanAfter(delta, &base, &rate);
    if (reached <= makespan - delta + time_tol_ || iteration > 2 * n_) break;
    delta = (makespan - base) / (1.0 + rate);
  }
  return reached;
}

bool Engine::DescentStep(Descent& d) {
  const bool finite = MaxFlow();
  if (!d.t_star_seen && (!finite || flow_value_ >= pg_)) {
    d.t_star_seen = true;
    d.t_star = d.makespan;
    d.t_star_energy = pg_ * d.makespan;
    for (int v = 0; v < n_; ++v) d.t_star_energy += SpecOf(v).Cost(dur_[v]);
    if (d.one_deadline && d.deadline_done) {
      RecordPoint(d.makespan, -1, 0.0);
      return false;
    }
  }
  if (!finite) return false;
  if (options_.max_steps > 0 && steps_ >= options_.max_steps) {
    d.status = Status::kStepLimit;
    return false;
  }
  // The cut (the source side is what the BFS reached), and how far to move along it ...
  double delta = SelectCut();
  if (shorten_.empty() || !(delta > 0.0)) {
    d.status = Status::kStalled;
    d.message = "the minimum cut shortens nothing above the fastest iteration time";
    return false;
  }
  ++steps_;
  // ... no further than where another path becomes critical: a move that fits in the float
  // budget cannot reach one, and leaves the critical sub-DAG as it is.
  const double used = (1.0 + static_cast<double>(lengthen_.size())) * delta;
  const bool full = cut_back_fixed_ > 0 || !(used < float_budget_ - time_tol_);
  const bool check = !full && options_.check_incremental_cuts;
  double reached = d.makespan - delta;
  if (full) {
    reached = ClampMove(d.makespan, delta);
    ++full_passes_;
  } else if (check) {
    const double planned = delta;
    reached = ClampMove(d.makespan, delta);
    if (delta < planned) ++pass_mismatches_;  // a path would have overtaken
  } else {
    float_budget_ -= used;
  }
  if (options_.progress) {
    options_.progress({.step = steps_,
                       .time_now_s = reached,
                       .time_fastest_s = d.t_min,
                       .time_slowest_s = d.start_s});
  }
  RealizePassed(d, delta);
  if (!d.one_deadline && d.k_next < 0) return false;
  ApplyMove(delta);
  for (int v : shorten_) rate_[v] = 0;
  for (int v : lengthen_) rate_[v] = 0;
  if (std::abs(reached - (d.makespan - delta)) > 1e3 * time_tol_) {
    d.status = Status::kStalled;
    d.message = "a move did not shorten the iteration as computed";
    return false;
  }
  d.makespan = reached;
  if (full || check) {
    const int64_t changed = BackwardPass(d.makespan);
    if (check && changed > 0) ++pass_mismatches_;
  }
  return true;
}

void Engine::FinishPoints(const Descent& d) {
  if (d.t_star_seen) {
    // Deadlines above T*: the relaxation's least energy there is its energy at T*.
    for (IterationPoint& point : raw_) {
      if (point.deadline_s > d.t_star)
        point.model_energy_j = std::min(point.model_energy_j, d.t_star_energy);
    }
  }
  if (d.one_deadline && raw_.size() > 1) {
    const auto best = std::min_element(raw_.begin(), raw_.end(), [](const auto& a, const auto& b) {
      return a.cost.energy_j < b.cost.energy_j;
    });
    std::vector<IterationPoint> kept;
    kept.push_back(std::move(*best));
    kept.back().deadline_s = options_.deadline_s;
    raw_.swap(kept);
  }
}

void Engine::FillResult(const Descent& d, std::chrono::steady_clock::time_point started,
                        Result& result) {
  Summary& summary = result.summary;
  summary.status = d.status;
  summary.message = d.message;
  summary.steps = steps_;
  summary.augmentations = augmentations_;
  summary.incremental_cut_mismatches = cut_mismatches_;
  summary.incremental_cuts_checked = cuts_checked_;
  summary.critical_edges_max = critical_arcs_max_;
  summary.realize_wall_s = realize_wall_s_;
  summary.fastest_point_wall_s = fastest_wall_s_;
  summary.exact_search_work = exact_work_;
  summary.full_passes = full_passes_;
  summary.exact_frontier = exact_frontier_;
  summary.skipped_pass_mismatches = pass_mismatches_;
  summary.descent_wall_s = SecondsSince(started) - realize_wall_s_;
  summary.deadlines = deadlines_realized_;
  if (options_.keep_dominated) {
    result.points = std::move(raw_);
  } else {
    const std::vector<pareto::Point> front = RawFront();
    for (auto it = front.rbegin(); it != front.rend(); ++it) {
      result.points.push_back(std::move(raw_[static_cast<std::size_t>(it->payload)]));
    }
    summary.points_dominated = deadlines_realized_ - static_cast<int64_t>(front.size());
  }
  result.dag = std::move(dag_);
}

Result Engine::Run() {
  const auto started = std::chrono::steady_clock::now();
  Result result;
  BuildModel();
  BuildChains();
  for (int v = 0; v < n_; ++v) node_options_ += static_cast<int64_t>(SpecOf(v).time.size());
  small_ = node_options_ <= kSmallOptions;
  defer_exact_ = small_ && options_.reclaim_slack && !(options_.deadline_s > 0.0);
  std::vector<int> fastest(static_cast<std::size_t>(n_), 0);
  std::vector<int> cheapest(static_cast<std::size_t>(n_));
  for (int v = 0; v < n_; ++v) cheapest[v] = static_cast<int>(SpecOf(v).time.size()) - 1;
  Descent d;
  d.t_min = RealMakespan(fastest);
  result.summary.min_time_s = d.t_min;
  result.summary.max_time_s = RealMakespan(cheapest);
  d.one_deadline = options_.deadline_s > 0.0;
  if (d.one_deadline && options_.deadline_s < d.t_min - time_tol_) {
    result.summary.status = Status::kDeadlineInfeasible;
    result.summary.message = "deadline " + std::to_string(options_.deadline_s) +
                             " s is below the minimum iteration time " + std::to_string(d.t_min) +
                             " s";
    result.dag = std::move(dag_);
    return result;
  }
  d.makespan = ForwardPass();
  d.start_s = d.makespan;
  BackwardPass(d.makespan);
  // Deadlines are realized as the descent passes them, slowest first (the first one is at or
  // above the cheapest plan's time).
  d.k_next =
      d.one_deadline
          ? -1
          : static_cast<int64_t>(std::ceil((d.makespan - d.t_min) / options_.unit_time_s - 1e-9));
  RealizePassed(d, 0.0);
  // deadline_s mode stops once its deadline is realized and T* is known (a deadline above T*
  // also gets the plan at T*, and the cheaper of the two is kept).
  while (d.one_deadline ? !(d.deadline_done && d.t_star_seen) : d.k_next >= 0) {
    if (!DescentStep(d)) break;
  }
  if (d.status != Status::kStepLimit) {
    // The descent reached the fastest schedule (or stalled: the remaining deadlines get the
    // current durations, repaired): the remaining deadlines.
    RealizePassed(d, kInf);
  }
  if (defer_exact_) SearchDeferred();
  FinishPoints(d);
  FillResult(d, started, result);
  return result;
}

}  // namespace kareus::pipeline::internal
