// SPDX-License-Identifier: Apache-2.0
// The solver's model: specs per node class (the real options' effective-energy front and its
// convex hull), the node classes' option lists, evaluation of a plan, and the model's state
// (BuildModel). See solver.cc for the method.
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

Spec BuildSpec(const std::vector<Alternative>& options, int gpus, double p_static_w,
               double merge_s) {
  Spec spec;
  std::vector<pareto::Point> points;
  for (std::size_t i = 0; i < options.size(); ++i) {
    const double eff = gpus * (options[i].energy_j - p_static_w * options[i].time_s);
    spec.option_time.push_back(options[i].time_s);
    spec.option_eff.push_back(eff);
    points.push_back(
        {.time_s = options[i].time_s, .energy_j = eff, .payload = static_cast<int64_t>(i)});
  }
  const std::vector<pareto::Point> front = pareto::Filter(points);
  for (const pareto::Point& p : front) {
    spec.time.push_back(p.time_s);
    spec.eff.push_back(p.energy_j);
    spec.option.push_back(static_cast<int>(p.payload));
  }
  // The model: the front with near-equal times merged (optimistic: a lower bound still).
  std::vector<pareto::Point> model;
  for (const pareto::Point& p : front) {
    if (!model.empty() && p.time_s - model.back().time_s < merge_s) {
      model.back().energy_j = p.energy_j;  // cheaper, keeps the faster time
    } else {
      model.push_back(p);
    }
  }
  for (std::size_t h : pareto::LowerConvexHull(model)) {
    spec.hull_time.push_back(model[h].time_s);
    spec.hull_eff.push_back(model[h].energy_j);
  }
  for (std::size_t k = 0; k + 1 < spec.hull_time.size(); ++k) {
    spec.slope.push_back((spec.hull_eff[k] - spec.hull_eff[k + 1]) /
                         (spec.hull_time[k + 1] - spec.hull_time[k]));
  }
  return spec;
}

schedule::NodeClasses ClassesOf(const Problem& problem) {
  return schedule::NodeClasses(problem.num_stages, problem.num_chunks, problem.gradient_sync);
}

const std::vector<Alternative>& ClassOptions(const Problem& problem,
                                             const schedule::NodeClasses& classes, int cls) {
  return schedule::NodeClasses::Select(classes.Get(cls), problem.forward_options,
                                       problem.backward_options, problem.last_backward_options,
                                       problem.gradient_sync_options);
}

Evaluation EvaluateWith(const Problem& problem, const Dag& dag, const std::vector<int>& choice,
                        double p_static_w) {
  Evaluation eval;
  double effective = 0.0;
  double gpus_total = 0.0;
  for (int s = 0; s < problem.num_stages; ++s) {
    gpus_total += problem.gpus_per_stage.empty() ? 1 : problem.gpus_per_stage[s];
  }
  const schedule::NodeClasses classes = ClassesOf(problem);
  std::vector<double> durations(dag.nodes.size());
  for (std::size_t v = 0; v < dag.nodes.size(); ++v) {
    const Instruction& inst = dag.nodes[v];
    const auto& list = ClassOptions(problem, classes, classes.Of(dag, static_cast<int>(v)));
    const Alternative& o = list[static_cast<std::size_t>(choice[v])];
    durations[v] = o.time_s;
    const int gpus = problem.gpus_per_stage.empty() ? 1 : problem.gpus_per_stage[inst.stage];
    effective += gpus * (o.energy_j - p_static_w * o.time_s);
  }
  eval.time_s = schedule::StartTimes(dag, durations, problem.p2p_time_s).makespan;
  eval.static_energy_j = p_static_w * eval.time_s * gpus_total;
  eval.energy_j = effective + eval.static_energy_j;
  eval.dynamic_energy_j = eval.energy_j - eval.static_energy_j;
  return eval;
}

Evaluation Engine::EvaluateFront(const std::vector<int>& front_choice, double makespan) const {
  // EvaluateWith's arithmetic in its order: each node's effective energy is the same double
  // (BuildSpec), RealMakespan the same longest path.
  const double effective = Effective(front_choice);
  Evaluation eval;
  eval.time_s = makespan >= 0.0 ? makespan : RealMakespan(front_choice);
  eval.static_energy_j = options_.p_static_w * eval.time_s * gpus_total_;
  eval.energy_j = effective + eval.static_energy_j;
  eval.dynamic_energy_j = eval.energy_j - eval.static_energy_j;
  return eval;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Engine::BuildModel() {
  BuildSpecs();
  BuildAdjacency();
  BuildArcNetwork();
  InitTraceState();
}

void Engine::BuildSpecs() {
  n_ = static_cast<int>(dag_.nodes.size());
  const int num_stages = problem_.num_stages;
  const schedule::NodeClasses classes = ClassesOf(problem_);
  class_.resize(n_);
  for (int v = 0; v < n_; ++v) class_[v] = classes.Of(dag_, v);
  // Every time is compared against a tolerance relative to the slowest schedule's scale.
  double slowest_sum = 0.0;
  for (int v = 0; v < n_; ++v) {
    double t = 0.0;
    for (const Alternative& o : ClassOptions(problem_, classes, class_[v]))
      t = std::max(t, o.time_s);
    slowest_sum += t;
  }
  time_tol_ = 1e-12 * (slowest_sum + problem_.p2p_time_s * 2 * num_stages * problem_.num_chunks);
  for (int s = 0; s < num_stages; ++s) {
    gpus_total_ += problem_.gpus_per_stage.empty() ? 1 : problem_.gpus_per_stage[s];
  }
  // One spec per node class some node has (empty for the others: e.g. the last-backward
  // classes without an overlapped gradient sync have no option list), with the GPUs of the
  // class's stage.
  std::vector<char> used(static_cast<std::size_t>(classes.Count()), 0);
  for (int v = 0; v < n_; ++v) used[static_cast<std::size_t>(class_[v])] = 1;
  specs_.resize(used.size());
  for (int cls = 0; cls < static_cast<int>(used.size()); ++cls) {
    if (!used[static_cast<std::size_t>(cls)]) continue;
    const int stage = classes.StageOf(cls);
    const int gpus = problem_.gpus_per_stage.empty() ? 1 : problem_.gpus_per_stage[stage];
    specs_[static_cast<std::size_t>(cls)] =
        BuildSpec(ClassOptions(problem_, classes, cls), gpus, options_.p_static_w, 100 * time_tol_);
  }
  pg_ = options_.p_static_w * gpus_total_;
  double slope_max = 0.0;
  for (const Spec& spec : specs_) {
    if (!spec.slope.empty()) slope_max = std::max(slope_max, spec.slope.front());
  }
  flow_tol_ = 1e-12 * std::max(1.0, slope_max) * std::max(1, n_);
}

void Engine::BuildAdjacency() {
  // AON adjacency with lags (real-time passes).
  // (The arc of DAG edge e is n + e: the activity arcs come first, then the edges' arcs.)
  std::vector<std::vector<std::tuple<int, double, int>>> preds(n_);
  std::vector<std::vector<std::tuple<int, double, int>>> succs(n_);
  for (std::size_t e = 0; e < dag_.edges.size(); ++e) {
    const DagEdge& edge = dag_.edges[e];
    const double lag = edge.cross_stage ? problem_.p2p_time_s : 0.0;
    const int arc = n_ + static_cast<int>(e);
    preds[edge.to].emplace_back(edge.from, lag, arc);
    succs[edge.from].emplace_back(edge.to, lag, arc);
  }
  for (auto [lists, adjacency, arcs] :
       {std::tuple{&preds, &preds_, &pred_arc_}, std::tuple{&succs, &succs_, &succ_arc_}}) {
    adjacency->start.assign(1, 0);
    for (const auto& list : *lists) {
      for (auto [w, lag, arc] : list) {
        adjacency->node.push_back(w);
        adjacency->lag.push_back(lag);
        arcs->push_back(arc);
      }
      adjacency->start.push_back(static_cast<int>(adjacency->node.size()));
    }
  }
}

void Engine::BuildArcNetwork() {
  // Activity-on-arc graph.
  num_events_ = 2 * n_ + 2;
  source_ = 2 * n_;
  sink_ = 2 * n_ + 1;
  auto add_arc = [&](int from, int to, int act) {
    arc_from_.push_back(from);
    arc_to_.push_back(to);
    arc_act_.push_back(act);
  };
  for (int v = 0; v < n_; ++v) add_arc(2 * v, 2 * v + 1, v);
  for (const DagEdge& e : dag_.edges) {
    add_arc(2 * e.from + 1, 2 * e.to, -1);
  }
  source_arc_.assign(n_, -1);
  sink_arc_.assign(n_, -1);
  for (int v = 0; v < n_; ++v) {
    if (preds_.start[v] == preds_.start[v + 1]) {
      source_arc_[v] = static_cast<int>(arc_from_.size());
      add_arc(source_, 2 * v, -1);
    }
    if (succs_.start[v] == succs_.start[v + 1]) {
      sink_arc_[v] = static_cast<int>(arc_from_.size());
      sink_nodes_.push_back(v);
      add_arc(2 * v + 1, sink_, -1);
    }
  }
  const int m = static_cast<int>(arc_from_.size());
  out_start_.assign(num_events_ + 1, 0);
  in_start_.assign(num_events_ + 1, 0);
  for (int a = 0; a < m; ++a) {
    ++out_start_[arc_from_[a] + 1];
    ++in_start_[arc_to_[a] + 1];
  }
  for (int u = 0; u < num_events_; ++u) {
    out_start_[u + 1] += out_start_[u];
    in_start_[u + 1] += in_start_[u];
  }
  out_arcs_.resize(m);
  in_arcs_.resize(m);
  {
    std::vector<int> out_fill(out_start_.begin(), out_start_.end() - 1);
    std::vector<int> in_fill(in_start_.begin(), in_start_.end() - 1);
    for (int a = 0; a < m; ++a) {
      out_arcs_[out_fill[arc_from_[a]]++] = a;
      in_arcs_[in_fill[arc_to_[a]]++] = a;
    }
  }
  out_to_.resize(m);
  in_from_.resize(m);
  for (int i = 0; i < m; ++i) {
    out_to_[i] = arc_to_[out_arcs_[i]];
    in_from_[i] = arc_from_[in_arcs_[i]];
  }
}

void Engine::InitTraceState() {
  const auto m = arc_from_.size();
  up_.assign(m, kInf);
  lo_.assign(m, 0.0);
  event_order_.push_back(source_);
  for (int v : dag_.topological_order) {
    event_order_.push_back(2 * v);
    event_order_.push_back(2 * v + 1);
  }
  event_order_.push_back(sink_);
  earliest_.assign(num_events_, 0.0);
  latest_.assign(num_events_, 0.0);
  side_.assign(num_events_, 0);
  parent_.assign(num_events_, 0);
  path_base_.assign(num_events_, 0.0);
  path_rate_.assign(num_events_, 0.0);
  flow_.assign(m, 0.0);
  critical_.assign(m, 0);
  in_boundary_.assign(m, 0);
  rate_.assign(n_, 0);
  topo_position_.resize(n_);
  for (int k = 0; k < n_; ++k) topo_position_[dag_.topological_order[k]] = k;
  pass_from_ = 0;
  dur_.resize(n_);
  pos_.resize(n_);
  for (int v = 0; v < n_; ++v) {
    dur_[v] = SpecOf(v).hull_time.back();
    pos_[v] = 2 * SpecOf(v).last_vertex();
    SetCapacity(v);
  }
}

}  // namespace kareus::pipeline::internal
