// SPDX-License-Identifier: Apache-2.0
// The pipeline solver as it was before issue 17's speed work (src/pipeline/solver.cc at commit
// 3570b10, the public functions left out), kept unchanged as the benchmark's same-run baseline:
// pipeline_benchmark runs it on the same problems and prints the ratio of the two times.
// Not part of the library; do not fix or improve it (it is the reference). Its types are its own
// frozen copies (pipeline_reference_solver.h), so changes to kareus/pipeline/solver.h leave it
// as it is.
#include "pipeline_reference_solver.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "kareus/common/error.h"
#include "kareus/pareto/pareto.h"

namespace kareus::pipeline_reference {
namespace {

using schedule::Dag;
using schedule::DagEdge;
using schedule::Direction;
using schedule::Instruction;

constexpr double kInf = std::numeric_limits<double>::infinity();
// The exact dynamic program (ExactAt) runs at the fastest point with this budget (state
// comparisons), and at every other deadline of problems with at most kSmallOptions node-options
// (sum over nodes of their real front's size) with kSmallBudget; past its budget the same
// search runs as a beam within the same budget.
constexpr int64_t kFastestBudget = 5'000'000;
constexpr int64_t kSmallOptions = 160;
constexpr int64_t kSmallBudget = 5'000'000;

// Per node class (ClassOf): the real options' effective-energy front and its convex hull.
struct Spec {
  // Pareto front over (time, effective energy): time ascending, energy strictly descending.
  std::vector<double> time;
  std::vector<double> eff;
  std::vector<int> option;  // the option behind each front entry
  // Lower convex hull: vertex k at time hull_time[k] with energy hull_eff[k] (fastest first);
  // slope[k] > 0 is the cost per second of shortening along segment k (between vertex k and
  // k+1), strictly decreasing in k.
  std::vector<double> hull_time;
  std::vector<double> hull_eff;
  std::vector<double> slope;
  std::vector<double> option_time;  // every option's real time
  std::vector<double> option_eff;   // every option's effective energy (gpus * (E - P t))

  int last_vertex() const { return static_cast<int>(hull_time.size()) - 1; }
  // The cheapest front entry whose time is <= d (d >= the fastest time - tolerance).
  int Fit(double d) const {
    const auto it = std::upper_bound(time.begin(), time.end(), d);
    return it == time.begin() ? 0 : static_cast<int>(it - time.begin()) - 1;
  }
  // Convex cost at duration d.
  double Cost(double d) const {
    if (d >= hull_time.back()) return hull_eff.back();
    if (d <= hull_time.front()) return hull_eff.front();
    const auto it = std::upper_bound(hull_time.begin(), hull_time.end(), d);
    const auto k = static_cast<std::size_t>(it - hull_time.begin()) - 1;
    return hull_eff[k] - slope[k] * (d - hull_time[k]);
  }
};

// `merge_s`: option times closer than this count as equal (the cheaper one is kept, at the
// faster time, for the convex model only; the real front keeps both).
Spec BuildSpec(const std::vector<Option>& options, int gpus, double p_static_w, double merge_s) {
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

int SyncNodesPerStage(const Problem& problem) {
  switch (problem.gradient_sync) {
    case schedule::GradientSync::kNone:
      return 0;
    case schedule::GradientSync::kAtEnd:
      return 1;
    case schedule::GradientSync::kOverlapped:
      return problem.num_chunks;
  }
  return 0;
}

// Node classes: 2 per (stage, chunk) unit (forward, backward), then one last backward per
// stage, then the sync nodes ([stage * K + chunk]).
int ClassOf(const Problem& problem, const Dag& dag, int node) {
  const schedule::DagNode& n = dag.nodes[static_cast<std::size_t>(node)];
  const int units = problem.num_stages * problem.num_chunks;
  if (n.node == schedule::NodeKind::kGradientSync) {
    return 2 * units + problem.num_stages + n.stage * SyncNodesPerStage(problem) + n.chunk;
  }
  if (dag.LaunchesGradientSync(node)) return 2 * units + n.stage;
  const int u = n.stage * problem.num_chunks + n.chunk;
  return 2 * u + (n.kind == Direction::kForward ? 0 : 1);
}

const std::vector<Option>& ClassOptions(const Problem& problem, int cls) {
  const int units = problem.num_stages * problem.num_chunks;
  if (cls >= 2 * units + problem.num_stages) {
    return problem
        .gradient_sync_options[static_cast<std::size_t>(cls - 2 * units - problem.num_stages)];
  }
  if (cls >= 2 * units)
    return problem.last_backward_options[static_cast<std::size_t>(cls - 2 * units)];
  const std::size_t u = static_cast<std::size_t>(cls / 2);
  return cls % 2 == 0 ? problem.forward_options[u] : problem.backward_options[u];
}

int NumClasses(const Problem& problem) {
  return 2 * problem.num_stages * problem.num_chunks + problem.num_stages +
         problem.num_stages * SyncNodesPerStage(problem);
}

// The stage a class belongs to (for its GPU count).
int StageOfClass(const Problem& problem, int cls) {
  const int units = problem.num_stages * problem.num_chunks;
  if (cls >= 2 * units + problem.num_stages) {
    return (cls - 2 * units - problem.num_stages) / std::max(SyncNodesPerStage(problem), 1);
  }
  if (cls >= 2 * units) return cls - 2 * units;
  return cls / 2 / problem.num_chunks;
}

// Time (the longest path, schedule::StartTimes) and energy of `choice`.
Evaluation EvaluateWith(const Problem& problem, const Dag& dag, const std::vector<int>& choice,
                        double p_static_w) {
  Evaluation eval;
  double effective = 0.0;
  double gpus_total = 0.0;
  for (int s = 0; s < problem.num_stages; ++s) {
    gpus_total += problem.gpus_per_stage.empty() ? 1 : problem.gpus_per_stage[s];
  }
  std::vector<double> durations(dag.nodes.size());
  for (std::size_t v = 0; v < dag.nodes.size(); ++v) {
    const Instruction& inst = dag.nodes[v];
    const auto& list = ClassOptions(problem, ClassOf(problem, dag, static_cast<int>(v)));
    const Option& o = list[static_cast<std::size_t>(choice[v])];
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

// Compressed adjacency: the neighbours of v are [start[v], start[v+1]).
struct Adjacency {
  std::vector<int> start;
  std::vector<int> node;
  std::vector<double> lag;
};

class Engine {
 public:
  Engine(const Problem& problem, const Options& options, Dag dag)
      : problem_(problem), options_(options), dag_(std::move(dag)) {}

  Result Run();

 private:
  // ---- model
  const Spec& SpecOf(int v) const { return specs_[static_cast<std::size_t>(class_[v])]; }
  void BuildModel();

  // ---- convex trace (activity-on-arc graph; event 2v = start of node v, 2v+1 = its end)
  double Length(int a) const { return arc_act_[a] >= 0 ? dur_[arc_act_[a]] : arc_lag_[a]; }
  double Upper(int a) const;
  double Lower(int a) const;
  double ForwardPass();                // earliest_ from dur_; returns the makespan
  void BackwardPass(double makespan);  // latest_ and critical_ (needs earliest_)
  // Augments the flow to a maximum on the critical sub-DAG; false when it is unbounded (a
  // critical path cannot be shortened). Leaves side_ = the source side of a minimum cut.
  bool MaxFlow();
  // The longest path after moving `delta` along the cut: fills earliest_ and returns the
  // makespan, with the base length and net rate of one longest path.
  double MakespanAfter(double delta, double* base, double* rate);
  void ApplyMove(double delta);

  // ---- realization (real time, front indices per node)
  double RealMakespan(const std::vector<int>& front_choice) const;
  double Energy(const std::vector<int>& front_choice) const;
  void Repair(std::vector<int>& choice, double deadline) const;
  bool FillForward(std::vector<int>& choice, double deadline, const std::vector<double>* cap) const;
  bool FillBackward(std::vector<int>& choice, double deadline,
                    const std::vector<double>* cap) const;
  void Refine(std::vector<int>& choice, double deadline, const std::vector<double>* cap) const;
  void Exchange(std::vector<int>& choice, double deadline) const;
  // Chains: the maximal paths of same-stage edges (a stage's instructions in order); empty when
  // some node has two same-stage predecessors or successors.
  void BuildChains();
  // Start times of every node for `choice`: earliest (as soon as possible) or latest (as late as
  // `deadline` allows).
  void Schedule(const std::vector<int>& choice, double deadline, bool latest,
                std::vector<double>& start) const;
  // Re-optimizes the options of one chain exactly (Pareto dynamic program over (finish time,
  // energy)) with every other node's start fixed at `start`; true when the chain's energy fell.
  bool OptimizeChain(const std::vector<int>& chain, std::vector<int>& choice,
                     const std::vector<double>& start, double deadline) const;
  // OptimizeChain on every chain, against the earliest and then the latest schedule, until no
  // chain improves (at most `rounds` sweeps).
  void ChainSearch(std::vector<int>& choice, double deadline, int rounds) const;
  void RecordPoint(double deadline, int64_t k, double offset);
  // The least-energy plan with time <= deadline by dynamic programming over a topological
  // order (branch and bound): a state is the finish times of the placed instructions that still
  // have unplaced successors, the makespan so far and the effective energy; dominated states
  // and states whose completion bound reaches `choice`'s energy are dropped. Replaces `choice`
  // when a cheaper plan exists; false (choice kept, not proven) when the state comparisons
  // exceed `budget`.
  // With `beam` > 0 the same search keeps at most `beam` states per step (those with the best
  // completion bound): a heuristic that may improve `choice` and never proves (returns false).
  bool ExactAt(int64_t budget, double deadline, std::vector<int>& choice, std::size_t beam) const;

  const Problem& problem_;
  const Options& options_;
  Dag dag_;
  int n_ = 0;
  std::vector<Spec> specs_;
  std::vector<int> class_;    // per node: index into specs_
  bool small_ = false;        // few node-options: exact search at every deadline
  int64_t node_options_ = 0;  // sum over nodes of their real front's size
  double gpus_total_ = 0.0;
  double pg_ = 0.0;        // static power of all GPUs, W
  double time_tol_ = 0.0;  // times closer than this are equal
  double flow_tol_ = 0.0;  // residual capacities below this are zero
  Adjacency preds_;
  Adjacency succs_;
  std::vector<std::vector<int>> chains_;
  std::vector<int> chain_prev_;  // per node: its same-stage predecessor, or -1
  std::vector<int> chain_next_;  // per node: its same-stage successor, or -1

  int num_events_ = 0;
  int source_ = 0;
  int sink_ = 0;
  std::vector<int> arc_from_;
  std::vector<int> arc_to_;
  std::vector<int> arc_act_;
  std::vector<double> arc_lag_;
  std::vector<int> out_start_;
  std::vector<int> out_arcs_;
  std::vector<int> in_start_;
  std::vector<int> in_arcs_;
  std::vector<int> event_order_;
  std::vector<double> earliest_;
  std::vector<double> latest_;
  std::vector<double> dur_;  // per node: convex duration
  std::vector<int> pos_;     // per node: 2k = at hull vertex k, 2k+1 = inside segment k
  std::vector<double> flow_;
  std::vector<char> critical_;
  std::vector<char> side_;   // per event: on the source side of the current cut
  std::vector<int> parent_;  // BFS: arc into the event (+1), negated for a backward arc
  std::vector<int> queue_;
  std::vector<int> shorten_;
  std::vector<int> lengthen_;
  std::vector<int8_t> rate_;  // per node: -1 shortened, +1 lengthened, 0 otherwise
  std::vector<double> path_base_;
  std::vector<double> path_rate_;
  double flow_value_ = 0.0;

  std::vector<IterationPoint> raw_;
  int64_t steps_ = 0;
  int64_t augmentations_ = 0;
  int64_t critical_arcs_max_ = 0;
};

void Engine::BuildModel() {
  n_ = static_cast<int>(dag_.nodes.size());
  const int num_stages = problem_.num_stages;
  class_.resize(n_);
  for (int v = 0; v < n_; ++v) class_[v] = ClassOf(problem_, dag_, v);
  // Every time is compared against a tolerance relative to the slowest schedule's scale.
  double slowest_sum = 0.0;
  for (int v = 0; v < n_; ++v) {
    double t = 0.0;
    for (const Option& o : ClassOptions(problem_, class_[v])) t = std::max(t, o.time_s);
    slowest_sum += t;
  }
  time_tol_ = 1e-12 * (slowest_sum + problem_.p2p_time_s * 2 * num_stages * problem_.num_chunks);
  for (int s = 0; s < num_stages; ++s) {
    gpus_total_ += problem_.gpus_per_stage.empty() ? 1 : problem_.gpus_per_stage[s];
  }
  // One spec per node class some node has (empty for the others: e.g. the last-backward
  // classes without an overlapped gradient sync have no option list), with the GPUs of the
  // class's stage.
  std::vector<char> used(static_cast<std::size_t>(NumClasses(problem_)), 0);
  for (int v = 0; v < n_; ++v) used[static_cast<std::size_t>(class_[v])] = 1;
  specs_.resize(used.size());
  for (int cls = 0; cls < static_cast<int>(used.size()); ++cls) {
    if (!used[static_cast<std::size_t>(cls)]) continue;
    const int stage = StageOfClass(problem_, cls);
    const int gpus = problem_.gpus_per_stage.empty() ? 1 : problem_.gpus_per_stage[stage];
    specs_[static_cast<std::size_t>(cls)] =
        BuildSpec(ClassOptions(problem_, cls), gpus, options_.p_static_w, 100 * time_tol_);
  }
  pg_ = options_.p_static_w * gpus_total_;
  double slope_max = 0.0;
  for (const Spec& spec : specs_) {
    if (!spec.slope.empty()) slope_max = std::max(slope_max, spec.slope.front());
  }
  flow_tol_ = 1e-12 * std::max(1.0, slope_max) * std::max(1, n_);
  // AON adjacency with lags (real-time passes).
  std::vector<std::vector<std::pair<int, double>>> preds(n_);
  std::vector<std::vector<std::pair<int, double>>> succs(n_);
  for (const DagEdge& e : dag_.edges) {
    const double lag = e.cross_stage ? problem_.p2p_time_s : 0.0;
    preds[e.to].emplace_back(e.from, lag);
    succs[e.from].emplace_back(e.to, lag);
  }
  for (auto [lists, adjacency] : {std::pair{&preds, &preds_}, std::pair{&succs, &succs_}}) {
    adjacency->start.assign(1, 0);
    for (const auto& list : *lists) {
      for (auto [w, lag] : list) {
        adjacency->node.push_back(w);
        adjacency->lag.push_back(lag);
      }
      adjacency->start.push_back(static_cast<int>(adjacency->node.size()));
    }
  }
  // Activity-on-arc graph.
  num_events_ = 2 * n_ + 2;
  source_ = 2 * n_;
  sink_ = 2 * n_ + 1;
  auto add_arc = [&](int from, int to, int act, double lag) {
    arc_from_.push_back(from);
    arc_to_.push_back(to);
    arc_act_.push_back(act);
    arc_lag_.push_back(lag);
  };
  for (int v = 0; v < n_; ++v) add_arc(2 * v, 2 * v + 1, v, 0.0);
  for (const DagEdge& e : dag_.edges) {
    add_arc(2 * e.from + 1, 2 * e.to, -1, e.cross_stage ? problem_.p2p_time_s : 0.0);
  }
  for (int v = 0; v < n_; ++v) {
    if (preds[v].empty()) add_arc(source_, 2 * v, -1, 0.0);
    if (succs[v].empty()) add_arc(2 * v + 1, sink_, -1, 0.0);
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
  rate_.assign(n_, 0);
  dur_.resize(n_);
  pos_.resize(n_);
  for (int v = 0; v < n_; ++v) {
    dur_[v] = SpecOf(v).hull_time.back();
    pos_[v] = 2 * SpecOf(v).last_vertex();
  }
}

double Engine::Upper(int a) const {
  const int v = arc_act_[a];
  if (v < 0) return kInf;
  const int p = pos_[v];
  if (p % 2 == 1) return SpecOf(v).slope[static_cast<std::size_t>(p / 2)];
  return p == 0 ? kInf : SpecOf(v).slope[static_cast<std::size_t>(p / 2 - 1)];
}

double Engine::Lower(int a) const {
  const int v = arc_act_[a];
  if (v < 0) return 0.0;
  const int p = pos_[v];
  const Spec& spec = SpecOf(v);
  if (p % 2 == 1) return spec.slope[static_cast<std::size_t>(p / 2)];
  return p / 2 == spec.last_vertex() ? 0.0 : spec.slope[static_cast<std::size_t>(p / 2)];
}

double Engine::ForwardPass() {
  for (int u : event_order_) {
    double e = 0.0;
    for (int i = in_start_[u]; i < in_start_[u + 1]; ++i) {
      const int a = in_arcs_[i];
      e = std::max(e, earliest_[arc_from_[a]] + Length(a));
    }
    earliest_[u] = e;
  }
  return earliest_[sink_];
}

void Engine::BackwardPass(double makespan) {
  int64_t count = 0;
  for (auto it = event_order_.rbegin(); it != event_order_.rend(); ++it) {
    const int u = *it;
    // An arc is critical when its slack is zero; one carrying flow is critical in exact
    // arithmetic (every flow path is a critical path shortened by exactly the move).
    double l = makespan;
    for (int i = out_start_[u]; i < out_start_[u + 1]; ++i) {
      const int a = out_arcs_[i];
      const double start_by = latest_[arc_to_[a]] - Length(a);
      l = std::min(l, start_by);
      const bool critical = start_by - earliest_[u] <= time_tol_ || flow_[a] > flow_tol_;
      critical_[a] = critical ? 1 : 0;
      count += critical ? 1 : 0;
    }
    latest_[u] = l;
  }
  critical_arcs_max_ = std::max(critical_arcs_max_, count);
}

bool Engine::MaxFlow() {
  for (;;) {
    for (int u : queue_) side_[u] = 0;
    queue_.clear();
    queue_.push_back(source_);
    side_[source_] = 1;
    for (std::size_t head = 0; head < queue_.size() && !side_[sink_]; ++head) {
      const int u = queue_[head];
      for (int i = out_start_[u]; i < out_start_[u + 1]; ++i) {
        const int a = out_arcs_[i];
        const int w = arc_to_[a];
        if (side_[w] || !critical_[a] || Upper(a) - flow_[a] <= flow_tol_) continue;
        side_[w] = 1;
        parent_[w] = a + 1;
        queue_.push_back(w);
      }
      for (int i = in_start_[u]; i < in_start_[u + 1]; ++i) {
        const int a = in_arcs_[i];
        const int w = arc_from_[a];
        if (side_[w] || !critical_[a] || flow_[a] - Lower(a) <= flow_tol_) continue;
        side_[w] = 1;
        parent_[w] = -(a + 1);
        queue_.push_back(w);
      }
    }
    if (!side_[sink_]) return true;
    double bottleneck = kInf;
    for (int w = sink_; w != source_;) {
      const int p = parent_[w];
      const int a = std::abs(p) - 1;
      bottleneck = std::min(bottleneck, p > 0 ? Upper(a) - flow_[a] : flow_[a] - Lower(a));
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

double Engine::MakespanAfter(double delta, double* base, double* rate) {
  for (int u : event_order_) {
    double best = u == source_ ? 0.0 : -kInf;
    double best_base = 0.0;
    double best_rate = 0.0;
    for (int i = in_start_[u]; i < in_start_[u + 1]; ++i) {
      const int a = in_arcs_[i];
      const int f = arc_from_[a];
      const double d0 = Length(a);
      const double r = arc_act_[a] >= 0 ? rate_[arc_act_[a]] : 0.0;
      const double len = earliest_[f] + d0 + r * delta;
      if (len > best) {
        best = len;
        best_base = path_base_[f] + d0;
        best_rate = path_rate_[f] + r;
      }
    }
    earliest_[u] = best;
    path_base_[u] = best_base;
    path_rate_[u] = best_rate;
  }
  *base = path_base_[sink_];
  *rate = path_rate_[sink_];
  return earliest_[sink_];
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
}

double Engine::RealMakespan(const std::vector<int>& choice) const {
  // Nodes in topological order; finish times by the longest path.
  thread_local std::vector<double> finish;
  finish.assign(static_cast<std::size_t>(n_), 0.0);
  double makespan = 0.0;
  for (int v : dag_.topological_order) {
    double start = 0.0;
    for (int i = preds_.start[v]; i < preds_.start[v + 1]; ++i) {
      start = std::max(start, finish[preds_.node[i]] + preds_.lag[i]);
    }
    finish[v] = start + SpecOf(v).time[static_cast<std::size_t>(choice[v])];
    makespan = std::max(makespan, finish[v]);
  }
  return makespan;
}

double Engine::Energy(const std::vector<int>& choice) const {
  double effective = 0.0;
  for (int v = 0; v < n_; ++v) effective += SpecOf(v).eff[static_cast<std::size_t>(choice[v])];
  return effective + pg_ * RealMakespan(choice);
}

// Makes `choice` meet `deadline` by moving instructions that finish too late to their fastest
// option (the all-fastest plan meets any deadline >= the minimum time).
void Engine::Repair(std::vector<int>& choice, double deadline) const {
  std::vector<double> finish(n_, 0.0);
  std::vector<double> latest_start(n_, 0.0);
  for (int round = 0; round <= n_; ++round) {
    for (int v : dag_.topological_order) {
      double start = 0.0;
      for (int i = preds_.start[v]; i < preds_.start[v + 1]; ++i) {
        start = std::max(start, finish[preds_.node[i]] + preds_.lag[i]);
      }
      finish[v] = start + SpecOf(v).time[static_cast<std::size_t>(choice[v])];
    }
    bool late = false;
    for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
      const int v = *it;
      double lf = deadline;
      for (int i = succs_.start[v]; i < succs_.start[v + 1]; ++i) {
        lf = std::min(lf, latest_start[succs_.node[i]] - succs_.lag[i]);
      }
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
// its window (and `cap`, when given). True when anything changed.
bool Engine::FillForward(std::vector<int>& choice, double deadline,
                         const std::vector<double>* cap) const {
  thread_local std::vector<double> latest_finish;
  thread_local std::vector<double> finish;
  latest_finish.assign(static_cast<std::size_t>(n_), 0.0);
  finish.assign(static_cast<std::size_t>(n_), 0.0);
  for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
    const int v = *it;
    double lf = deadline;
    for (int i = succs_.start[v]; i < succs_.start[v + 1]; ++i) {
      const int w = succs_.node[i];
      lf = std::min(lf, latest_finish[w] - SpecOf(w).time[static_cast<std::size_t>(choice[w])] -
                            succs_.lag[i]);
    }
    latest_finish[v] = lf;
  }
  bool changed = false;
  for (int v : dag_.topological_order) {
    double es = 0.0;
    for (int i = preds_.start[v]; i < preds_.start[v + 1]; ++i) {
      es = std::max(es, finish[preds_.node[i]] + preds_.lag[i]);
    }
    double window = latest_finish[v] - es;
    if (cap != nullptr) window = std::min(window, (*cap)[v]);
    const Spec& spec = SpecOf(v);
    const int j = spec.Fit(window + time_tol_);
    if (j > choice[v] && spec.time[static_cast<std::size_t>(j)] <= window + time_tol_) {
      choice[v] = j;
      changed = true;
    }
    finish[v] = es + spec.time[static_cast<std::size_t>(choice[v])];
  }
  return changed;
}

// The mirror image: reverse topological order with earliest starts from the current durations.
bool Engine::FillBackward(std::vector<int>& choice, double deadline,
                          const std::vector<double>* cap) const {
  thread_local std::vector<double> earliest_start;
  thread_local std::vector<double> latest_start;
  earliest_start.assign(static_cast<std::size_t>(n_), 0.0);
  latest_start.assign(static_cast<std::size_t>(n_), 0.0);
  for (int v : dag_.topological_order) {
    double es = 0.0;
    for (int i = preds_.start[v]; i < preds_.start[v + 1]; ++i) {
      const int p = preds_.node[i];
      es = std::max(es, earliest_start[p] + SpecOf(p).time[static_cast<std::size_t>(choice[p])] +
                            preds_.lag[i]);
    }
    earliest_start[v] = es;
  }
  bool changed = false;
  for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
    const int v = *it;
    double lf = deadline;
    for (int i = succs_.start[v]; i < succs_.start[v + 1]; ++i) {
      lf = std::min(lf, latest_start[succs_.node[i]] - succs_.lag[i]);
    }
    double window = lf - earliest_start[v];
    if (cap != nullptr) window = std::min(window, (*cap)[v]);
    const Spec& spec = SpecOf(v);
    const int j = spec.Fit(window + time_tol_);
    if (j > choice[v] && spec.time[static_cast<std::size_t>(j)] <= window + time_tol_) {
      choice[v] = j;
      changed = true;
    }
    latest_start[v] = lf - spec.time[static_cast<std::size_t>(choice[v])];
  }
  return changed;
}

// Slack refinement within `deadline`: first each instruction may only move up to the slower end
// of its convex segment (`cap`: spreads the slack the way the convex optimum does), then
// freely, forward and backward until nothing changes.
void Engine::Refine(std::vector<int>& choice, double deadline,
                    const std::vector<double>* cap) const {
  if (cap != nullptr) {
    FillForward(choice, deadline, cap);
    FillBackward(choice, deadline, cap);
  }
  // A pass that changes nothing leaves a plan where no instruction's float fits a slower option:
  // the other direction would change nothing either.
  for (int round = 0; round < 8; ++round) {
    if (!FillForward(choice, deadline, nullptr)) break;
    if (!FillBackward(choice, deadline, nullptr)) break;
  }
}

// One-exchange local search: make one instruction faster (each faster front entry), let Refine
// hand the freed slack to the others, keep the result when the energy drops; until no exchange
// helps.
void Engine::Exchange(std::vector<int>& choice, double deadline) const {
  double best = Energy(choice);
  std::vector<int> trial;
  for (int round = 0; round < 4; ++round) {
    bool improved = false;
    for (int v : dag_.topological_order) {
      for (int j = 0; j < choice[v]; ++j) {
        trial = choice;
        trial[v] = j;
        Refine(trial, deadline, nullptr);
        const double energy = Energy(trial);
        if (energy < best * (1 - 1e-12)) {
          best = energy;
          choice.swap(trial);
          improved = true;
          break;
        }
      }
    }
    if (!improved) break;
  }
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
      double es = 0.0;
      for (int i = preds_.start[v]; i < preds_.start[v + 1]; ++i) {
        const int p = preds_.node[i];
        es = std::max(
            es, start[p] + SpecOf(p).time[static_cast<std::size_t>(choice[p])] + preds_.lag[i]);
      }
      start[v] = es;
    }
    return;
  }
  for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
    const int v = *it;
    double lf = deadline;
    for (int i = succs_.start[v]; i < succs_.start[v + 1]; ++i) {
      lf = std::min(lf, start[succs_.node[i]] - succs_.lag[i]);
    }
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
  struct State {
    double finish;
    double energy;
    int parent;
    int option;
  };
  thread_local std::vector<std::vector<State>> layers;
  thread_local std::vector<State> candidates;
  layers.resize(length + 1);
  layers[0].assign(1, {0.0, 0.0, -1, -1});
  constexpr std::size_t kMaxStates = 2048;
  for (std::size_t i = 0; i < length; ++i) {
    const Spec& spec = SpecOf(chain[i]);
    const std::vector<State>& from = layers[i];
    candidates.clear();
    for (std::size_t k = 0; k < from.size(); ++k) {
      // States finishing before the release all start at the release: only the cheapest
      // (the last of them) matters.
      if (k + 1 < from.size() && from[k + 1].finish <= release[i]) continue;
      const double begin = std::max(from[k].finish, release[i]);
      for (std::size_t j = 0; j < spec.time.size(); ++j) {
        const double finish = begin + spec.time[j];
        if (finish > due[i] + time_tol_) break;
        candidates.push_back(
            {finish, from[k].energy + spec.eff[j], static_cast<int>(k), static_cast<int>(j)});
      }
    }
    if (candidates.empty()) return false;  // the current choice is feasible; numerical trouble
    std::sort(candidates.begin(), candidates.end(), [](const State& a, const State& b) {
      return a.finish != b.finish ? a.finish < b.finish : a.energy < b.energy;
    });
    std::vector<State>& to = layers[i + 1];
    to.clear();
    for (const State& c : candidates) {
      if (to.empty() || c.energy < to.back().energy - 1e-12 * std::abs(c.energy)) to.push_back(c);
    }
    if (to.size() > kMaxStates) {
      // Keep an evenly spread subset (always the fastest and the cheapest).
      std::vector<State> kept;
      for (std::size_t q = 0; q < kMaxStates; ++q)
        kept.push_back(to[q * (to.size() - 1) / (kMaxStates - 1)]);
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
        Refine(trial, deadline, nullptr);
        // The chain's effective energy fell, but the iteration may have grown (static energy):
        // kept only when the total falls.
        const double trial_energy = Energy(trial);
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

void Engine::RecordPoint(double deadline, int64_t k, double offset) {
  // The convex durations `offset` into the current move, rounded down to real options.
  std::vector<int> choice(static_cast<std::size_t>(n_));
  std::vector<double> cap(static_cast<std::size_t>(n_));
  double model = 0.0;
  for (int v = 0; v < n_; ++v) {
    const Spec& spec = SpecOf(v);
    const double d = dur_[v] + rate_[v] * offset;
    choice[v] = spec.Fit(d + time_tol_);
    model += spec.Cost(d);
    // The slower end of the hull segment d lies on (d itself on a vertex).
    const auto it = std::lower_bound(spec.hull_time.begin(), spec.hull_time.end(), d - time_tol_);
    cap[v] = it == spec.hull_time.end() ? spec.hull_time.back() : *it;
  }
  if (RealMakespan(choice) > deadline + time_tol_) Repair(choice, deadline);
  bool exact = false;
  if (options_.reclaim_slack) {
    Refine(choice, deadline, &cap);
    if (k <= 0 || small_) {
      ChainSearch(choice, deadline, 8);
      Exchange(choice, deadline);
      ChainSearch(choice, deadline, 8);
      const int64_t budget = k <= 0 ? kFastestBudget : kSmallBudget;
      exact = ExactAt(budget, deadline, choice, 0);
      if (!exact) {
        // Out of budget: a beam as wide as the budget allows (states x options x kept states
        // per step), then the local searches again from its plan.
        const double per_step = static_cast<double>(node_options_) + 1.0;  // ~ n x options
        const auto beam = static_cast<std::size_t>(
            std::clamp(std::sqrt(static_cast<double>(budget) / per_step), 4.0, 4096.0));
        const std::vector<int> before = choice;
        ExactAt(budget, deadline, choice, beam);
        if (choice != before) {
          ChainSearch(choice, deadline, 8);
          Exchange(choice, deadline);
        }
      }
    }
  }
  IterationPoint point;
  point.choice.resize(static_cast<std::size_t>(n_));
  for (int v = 0; v < n_; ++v)
    point.choice[v] = SpecOf(v).option[static_cast<std::size_t>(choice[v])];
  point.cost = EvaluateWith(problem_, dag_, point.choice, options_.p_static_w);
  point.step = steps_;
  point.quanta = k;
  point.deadline_s = deadline;
  point.model_energy_j = exact ? point.cost.energy_j : model + pg_ * deadline;
  point.exact = exact;
  raw_.push_back(std::move(point));
}

bool Engine::ExactAt(int64_t budget, double deadline, std::vector<int>& choice,
                     std::size_t beam) const {
  const double incumbent = Energy(choice);
  int64_t work = 0;
  // Order: by earliest start with every instruction at its fastest (topological, since every
  // duration is positive), which keeps the set of open instructions narrow.
  std::vector<double> head(static_cast<std::size_t>(n_), 0.0);
  for (int v : dag_.topological_order) {
    for (int i = preds_.start[v]; i < preds_.start[v + 1]; ++i) {
      const int p = preds_.node[i];
      head[v] = std::max(head[v], head[p] + SpecOf(p).time.front() + preds_.lag[i]);
    }
  }
  std::vector<double> tail(static_cast<std::size_t>(n_), 0.0);  // after the node, at fastest
  for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
    const int v = *it;
    for (int i = succs_.start[v]; i < succs_.start[v + 1]; ++i) {
      const int w = succs_.node[i];
      tail[v] = std::max(tail[v], succs_.lag[i] + SpecOf(w).time.front() + tail[w]);
    }
  }
  std::vector<int> order(static_cast<std::size_t>(n_));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return head[a] < head[b]; });
  std::vector<int> position(static_cast<std::size_t>(n_));
  for (int k = 0; k < n_; ++k) position[order[k]] = k;
  std::vector<int> last_use(static_cast<std::size_t>(n_), -1);  // last successor's position
  for (int v = 0; v < n_; ++v) {
    for (int i = succs_.start[v]; i < succs_.start[v + 1]; ++i) {
      last_use[v] = std::max(last_use[v], position[succs_.node[i]]);
    }
  }
  // Completion bound, per chain (a stage's instructions in order): the least effective energy
  // of the chain's unplaced suffix when its durations must fit, one after another, between the
  // last placed one's finish and the deadline less the last one's tail -- a knapsack over
  // durations rounded down to a grid of `grid` seconds (a relaxation). Instructions in no
  // chain: each at its cheapest option that fits between its fastest head and tail.
  const std::size_t cells = 2049;
  const double grid = deadline / static_cast<double>(cells - 1);
  std::vector<int> chain_of(static_cast<std::size_t>(n_), -1);
  std::vector<int> index_in_chain(static_cast<std::size_t>(n_), -1);
  std::vector<std::vector<std::vector<double>>> table(chains_.size());
  for (std::size_t c = 0; c < chains_.size(); ++c) {
    const std::vector<int>& chain = chains_[c];
    auto& t = table[c];
    t.assign(chain.size() + 1, std::vector<double>(cells, 0.0));
    for (std::size_t i = chain.size(); i-- > 0;) {
      const int v = chain[i];
      chain_of[v] = static_cast<int>(c);
      index_in_chain[v] = static_cast<int>(i);
      const Spec& spec = SpecOf(v);
      std::vector<std::size_t> units(spec.time.size());
      for (std::size_t j = 0; j < spec.time.size(); ++j) {
        units[j] = static_cast<std::size_t>(std::floor(spec.time[j] / grid));
      }
      for (std::size_t b = 0; b < cells; ++b) {
        double best = kInf;
        for (std::size_t j = 0; j < spec.time.size(); ++j) {
          if (units[j] <= b) best = std::min(best, spec.eff[j] + t[i + 1][b - units[j]]);
        }
        t[i][b] = best;
      }
    }
  }
  // Nodes in no chain (gradient syncs), each at its cheapest option that fits between its
  // fastest head and tail: loose_after[k] sums those at order positions > k (the unplaced ones
  // once position k is placed; a placed node's energy is in the state's).
  std::vector<double> loose_after(static_cast<std::size_t>(n_), 0.0);
  for (int k = n_ - 1; k > 0; --k) {
    const int v = order[static_cast<std::size_t>(k)];
    double own = 0.0;
    if (chain_of[v] < 0) {
      const Spec& spec = SpecOf(v);
      own = spec.eff[static_cast<std::size_t>(spec.Fit(deadline - head[v] - tail[v] + time_tol_))];
    }
    loose_after[static_cast<std::size_t>(k) - 1] = loose_after[static_cast<std::size_t>(k)] + own;
  }
  auto chain_bound = [&](std::size_t c, int next, double free_from) {
    const std::vector<int>& chain = chains_[c];
    const double span = deadline - tail[chain.back()] - free_from;
    if (span < -time_tol_) return kInf;
    const double units = std::floor(std::max(0.0, span) / grid + 1e-9);
    const std::size_t b =
        units >= static_cast<double>(cells - 1) ? cells - 1 : static_cast<std::size_t>(units);
    return table[c][static_cast<std::size_t>(next)][b];
  };

  struct Layer {
    std::vector<int> open;       // instructions whose finish a state records
    std::vector<double> finish;  // states x open
    std::vector<double> makespan;
    std::vector<double> energy;
    std::vector<int> parent;
    std::vector<int> option;  // front index of the placed instruction
  };
  std::vector<Layer> layers(static_cast<std::size_t>(n_) + 1);
  layers[0].makespan = {0.0};
  layers[0].energy = {0.0};
  layers[0].parent = {-1};
  layers[0].option = {-1};
  struct Candidate {
    double energy;
    int parent;
    int option;
    double makespan;
    double finish;  // of the placed instruction
    double low;     // lower bound of every completion's total energy
  };
  std::vector<Candidate> candidates;
  std::vector<double> vec;
  std::vector<int> next(chains_.size(), 0);  // per chain: its first unplaced position
  for (int k = 0; k < n_; ++k) {
    const int v = order[k];
    const Layer& from = layers[k];
    Layer& to = layers[k + 1];
    // The new open set: the old one less the instructions whose last successor is v, plus v.
    std::vector<int> source;  // per slot of to.open: slot in from.open, or -1 for v
    for (std::size_t i = 0; i < from.open.size(); ++i) {
      if (last_use[from.open[i]] > k) {
        to.open.push_back(from.open[i]);
        source.push_back(static_cast<int>(i));
      }
    }
    if (last_use[v] > k) {
      to.open.push_back(v);
      source.push_back(-1);
    }
    std::vector<std::pair<int, double>> pred_slots;  // (slot in from.open, lag)
    for (int i = preds_.start[v]; i < preds_.start[v + 1]; ++i) {
      const auto it = std::find(from.open.begin(), from.open.end(), preds_.node[i]);
      pred_slots.emplace_back(static_cast<int>(it - from.open.begin()), preds_.lag[i]);
    }
    if (chain_of[v] >= 0) next[static_cast<std::size_t>(chain_of[v])] = index_in_chain[v] + 1;
    // Per chain with an unplaced suffix: where its last placed instruction's finish comes from
    // (-2: none placed yet, the suffix starts at its first instruction's fastest head; -1: v
    // itself; else a slot of from.open).
    std::vector<std::pair<std::size_t, int>> chain_sources;
    for (std::size_t c = 0; c < chains_.size(); ++c) {
      if (next[c] >= static_cast<int>(chains_[c].size())) continue;
      int src = -2;
      if (next[c] > 0) {
        const int last = chains_[c][static_cast<std::size_t>(next[c] - 1)];
        src = last == v ? -1
                        : static_cast<int>(std::find(from.open.begin(), from.open.end(), last) -
                                           from.open.begin());
      }
      chain_sources.emplace_back(c, src);
    }
    const std::size_t d_from = from.open.size();
    const std::size_t d_to = to.open.size();
    const std::size_t count = from.energy.size();
    const Spec& spec = SpecOf(v);
    candidates.clear();
    for (std::size_t s = 0; s < count; ++s) {
      double start = 0.0;
      for (auto [slot, lag] : pred_slots)
        start = std::max(start, from.finish[s * d_from + slot] + lag);
      double open_low = 0.0;  // the makespan is at least each open finish plus its tail
      for (std::size_t i = 0; i < d_from; ++i) {
        const int u = from.open[i];
        if (last_use[u] > k) open_low = std::max(open_low, from.finish[s * d_from + i] + tail[u]);
      }
      for (std::size_t j = 0; j < spec.time.size(); ++j) {
        const double finish = start + spec.time[j];
        const double makespan =
            last_use[v] < 0 ? std::max(from.makespan[s], finish) : from.makespan[s];
        const double makespan_low = std::max({makespan, finish + tail[v], open_low});
        if (makespan_low > deadline + time_tol_) continue;
        double low = from.energy[s] + spec.eff[j] + pg_ * makespan_low +
                     loose_after[static_cast<std::size_t>(k)];
        for (auto [c, src] : chain_sources) {
          const double free_from =
              src == -2
                  ? head[chains_[c][static_cast<std::size_t>(next[c])]]
                  : (src == -1 ? finish : from.finish[s * d_from + static_cast<std::size_t>(src)]);
          low += chain_bound(c, next[c], free_from);
        }
        if (low >= incumbent * (1 - 1e-12)) continue;
        candidates.push_back({from.energy[s] + spec.eff[j], static_cast<int>(s),
                              static_cast<int>(j), makespan, finish, low});
      }
    }
    // Exact: cheapest first (a kept state is then never more energetic than a later one). Beam:
    // the best completion bound first, and the layer stops at `beam` states.
    if (beam == 0) {
      std::sort(candidates.begin(), candidates.end(),
                [](const Candidate& a, const Candidate& b) { return a.energy < b.energy; });
    } else {
      std::sort(candidates.begin(), candidates.end(),
                [](const Candidate& a, const Candidate& b) { return a.low < b.low; });
    }
    vec.resize(d_to);
    for (const Candidate& c : candidates) {
      if (beam > 0 && to.energy.size() >= beam) break;
      for (std::size_t i = 0; i < d_to; ++i) {
        vec[i] = source[i] < 0 ? c.finish
                               : from.finish[static_cast<std::size_t>(c.parent) * d_from +
                                             static_cast<std::size_t>(source[i])];
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
  }
  // Every complete state beats the incumbent (its bound was below): the cheapest one.
  const Layer& last = layers[static_cast<std::size_t>(n_)];
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
      const Layer& layer = layers[static_cast<std::size_t>(k)];
      choice[order[k - 1]] = layer.option[static_cast<std::size_t>(best)];
      best = layer.parent[static_cast<std::size_t>(best)];
    }
  }
  return beam == 0;
}

Result Engine::Run() {
  Result result;
  Summary& summary = result.summary;
  BuildModel();
  BuildChains();
  for (int v = 0; v < n_; ++v) node_options_ += static_cast<int64_t>(SpecOf(v).time.size());
  small_ = node_options_ <= kSmallOptions;
  std::vector<int> fastest(static_cast<std::size_t>(n_), 0);
  std::vector<int> cheapest(static_cast<std::size_t>(n_));
  for (int v = 0; v < n_; ++v) cheapest[v] = static_cast<int>(SpecOf(v).time.size()) - 1;
  const double t_min = RealMakespan(fastest);
  const double t_max = RealMakespan(cheapest);
  summary.min_time_s = t_min;
  summary.max_time_s = t_max;
  const double unit = options_.unit_time_s;
  const bool one_deadline = options_.deadline_s > 0.0;
  if (one_deadline && options_.deadline_s < t_min - time_tol_) {
    summary.status = Status::kDeadlineInfeasible;
    summary.message = "deadline " + std::to_string(options_.deadline_s) +
                      " s is below the minimum iteration time " + std::to_string(t_min) + " s";
    result.dag = std::move(dag_);
    return result;
  }

  double makespan = ForwardPass();
  const double start_s = makespan;  // the progress callback's starting point
  BackwardPass(makespan);
  // Deadlines are realized as the descent passes them, slowest first (the first one is at or
  // above the cheapest plan's time).
  int64_t k_next =
      one_deadline ? -1 : static_cast<int64_t>(std::ceil((makespan - t_min) / unit - 1e-9));
  auto deadline_of = [&](int64_t k) {
    return k < 0 ? options_.deadline_s : t_min + static_cast<double>(k) * unit;
  };
  bool deadline_done = false;  // deadline_s mode: its deadline is realized
  // Realizes the deadlines reached `delta` into the current move.
  auto realize_passed = [&](double delta) {
    while (one_deadline ? !deadline_done : k_next >= 0) {
      const double deadline = deadline_of(k_next);
      if (deadline < makespan - delta - time_tol_) break;
      RecordPoint(deadline, k_next, std::clamp(makespan - deadline, 0.0, delta));
      if (one_deadline)
        deadline_done = true;
      else
        --k_next;
    }
  };
  realize_passed(0.0);
  // T*: where shortening starts to cost more effective energy than it saves static energy
  // (the cut's value reaches the static power of all GPUs). Below T* the relaxation's total
  // energy falls with time; a deadline above T* is bounded by the relaxation at T*.
  bool t_star_seen = false;
  double t_star = 0.0;
  double t_star_energy = kInf;
  Status status = Status::kReachedMinimumTime;
  std::string message;
  // deadline_s mode stops once its deadline is realized and T* is known (a deadline above T*
  // also gets the plan at T*, and the cheaper of the two is kept).
  auto done = [&] { return one_deadline ? deadline_done && t_star_seen : k_next < 0; };
  while (!done()) {
    const bool finite = MaxFlow();
    if (!t_star_seen && (!finite || flow_value_ >= pg_)) {
      t_star_seen = true;
      t_star = makespan;
      t_star_energy = pg_ * makespan;
      for (int v = 0; v < n_; ++v) t_star_energy += SpecOf(v).Cost(dur_[v]);
      if (one_deadline && deadline_done) {
        RecordPoint(makespan, -1, 0.0);
        break;
      }
    }
    if (!finite) break;
    if (options_.max_steps > 0 && steps_ >= options_.max_steps) {
      status = Status::kStepLimit;
      break;
    }
    // The cut (the source side is what the BFS reached), and how far to move along it.
    shorten_.clear();
    lengthen_.clear();
    double delta = kInf;
    for (int u : queue_) {
      for (int i = out_start_[u]; i < out_start_[u + 1]; ++i) {
        const int a = out_arcs_[i];
        const int v = arc_act_[a];
        if (v < 0 || !critical_[a] || side_[arc_to_[a]]) continue;
        const int p = pos_[v];
        const int target = p % 2 == 1 ? p / 2 : p / 2 - 1;
        shorten_.push_back(v);
        rate_[v] = -1;
        delta = std::min(delta, dur_[v] - SpecOf(v).hull_time[static_cast<std::size_t>(target)]);
      }
      for (int i = in_start_[u]; i < in_start_[u + 1]; ++i) {
        const int a = in_arcs_[i];
        const int v = arc_act_[a];
        if (v < 0 || !critical_[a] || side_[arc_from_[a]] || !(Lower(a) > 0.0)) continue;
        lengthen_.push_back(v);
        rate_[v] = 1;
        delta = std::min(delta,
                         SpecOf(v).hull_time[static_cast<std::size_t>(pos_[v] / 2 + 1)] - dur_[v]);
      }
    }
    if (shorten_.empty() || !(delta > 0.0)) {
      status = Status::kStalled;
      message = "the minimum cut shortens nothing above the fastest iteration time";
      break;
    }
    ++steps_;
    // ... and no path off the critical sub-DAG overtakes (each path's length is linear in the
    // move: Newton steps on the longest path reach the exact breakpoint). The last pass leaves
    // earliest_ at the moved durations.
    double base = 0.0;
    double rate = 0.0;
    double reached = 0.0;
    for (int iteration = 0;; ++iteration) {
      reached = MakespanAfter(delta, &base, &rate);
      if (reached <= makespan - delta + time_tol_ || iteration > 2 * n_) break;
      delta = (makespan - base) / (1.0 + rate);
    }
    if (options_.progress) {
      options_.progress({.step = steps_,
                         .time_now_s = reached,
                         .time_fastest_s = t_min,
                         .time_slowest_s = start_s});
    }
    realize_passed(delta);
    if (!one_deadline && k_next < 0) break;
    ApplyMove(delta);
    for (int v : shorten_) rate_[v] = 0;
    for (int v : lengthen_) rate_[v] = 0;
    if (std::abs(reached - (makespan - delta)) > 1e3 * time_tol_) {
      status = Status::kStalled;
      message = "a move did not shorten the iteration as computed";
      break;
    }
    makespan = reached;
    BackwardPass(makespan);
  }
  if (status != Status::kStepLimit) {
    // The descent reached the fastest schedule (or stalled: the remaining deadlines get the
    // current durations, repaired): the remaining deadlines.
    realize_passed(kInf);
  }
  if (t_star_seen) {
    // Deadlines above T*: the relaxation's least energy there is its energy at T*.
    for (IterationPoint& point : raw_) {
      if (point.deadline_s > t_star)
        point.model_energy_j = std::min(point.model_energy_j, t_star_energy);
    }
  }
  if (one_deadline && raw_.size() > 1) {
    const auto best = std::min_element(raw_.begin(), raw_.end(), [](const auto& a, const auto& b) {
      return a.cost.energy_j < b.cost.energy_j;
    });
    std::vector<IterationPoint> kept;
    kept.push_back(std::move(*best));
    kept.back().deadline_s = options_.deadline_s;
    raw_.swap(kept);
  }
  summary.status = status;
  summary.message = message;
  summary.steps = steps_;
  summary.augmentations = augmentations_;
  summary.critical_edges_max = critical_arcs_max_;
  summary.deadlines = static_cast<int64_t>(raw_.size());
  if (options_.keep_dominated) {
    result.points = std::move(raw_);
  } else {
    std::vector<pareto::Point> points;
    for (std::size_t i = 0; i < raw_.size(); ++i) {
      points.push_back({.time_s = raw_[i].cost.time_s,
                        .energy_j = raw_[i].cost.energy_j,
                        .payload = static_cast<int64_t>(i)});
    }
    const auto front = pareto::Filter(points);
    for (auto it = front.rbegin(); it != front.rend(); ++it) {
      result.points.push_back(std::move(raw_[static_cast<std::size_t>(it->payload)]));
    }
    summary.points_dominated = static_cast<int64_t>(raw_.size() - front.size());
  }
  result.dag = std::move(dag_);
  return result;
}

// `where` names the unit ("stage 1", "stage 1 chunk 0"), `kind` the list ("backward").
std::string CheckOptions(const std::vector<Option>& list, const std::string& where,
                         const std::string& kind, const Options& options) {
  const std::string what = where + " " + kind;
  if (list.empty()) return where + " has no " + kind + " options";
  double t_min = kInf;
  double t_max = 0.0;
  for (const Option& o : list) {
    if (!(o.time_s > 0.0) || !std::isfinite(o.time_s) || !std::isfinite(o.energy_j) ||
        o.energy_j < 0.0) {
      return what + " option with time_s = " + std::to_string(o.time_s) +
             ", energy_j = " + std::to_string(o.energy_j) +
             ": time must be > 0 and energy >= 0, finite";
    }
    t_min = std::min(t_min, o.time_s);
    t_max = std::max(t_max, o.time_s);
  }
  if ((t_max - t_min) / options.unit_time_s > 5e7) {
    return "unit_time_s is too small for the options' time range (over 5e7 quanta)";
  }
  return "";
}

std::string Validate(const Problem& problem, const Options& options) {
  if (const auto error = options.Validate()) return error->Message();
  const int stages = problem.num_stages;
  if (stages < 1) return "num_stages must be >= 1";
  if (problem.num_microbatches < 1) return "num_microbatches must be >= 1";
  try {
    schedule::ValidateShape(problem.schedule, stages, problem.num_microbatches, problem.num_chunks);
  } catch (const InputError& e) {
    return e.what();
  }
  const int units = stages * problem.num_chunks;
  if (static_cast<int>(problem.forward_options.size()) != units ||
      static_cast<int>(problem.backward_options.size()) != units) {
    return "forward_options and backward_options need one list per (stage, chunk)";
  }
  const bool overlapped = problem.gradient_sync == schedule::GradientSync::kOverlapped;
  const int syncs = SyncNodesPerStage(problem);
  if (static_cast<int>(problem.last_backward_options.size()) != (overlapped ? stages : 0)) {
    return overlapped ? "an overlapped gradient sync needs last_backward_options per stage"
                      : "last_backward_options are for an overlapped gradient sync only";
  }
  if (static_cast<int>(problem.gradient_sync_options.size()) != stages * syncs) {
    return "gradient_sync_options need " + std::to_string(syncs) +
           " list(s) per stage for this "
           "gradient sync (" +
           std::to_string(stages * syncs) + " in all)";
  }
  if (!problem.gpus_per_stage.empty() &&
      static_cast<int>(problem.gpus_per_stage.size()) != stages) {
    return "gpus_per_stage needs one entry per stage (or none)";
  }
  for (int g : problem.gpus_per_stage) {
    if (g < 1) return "gpus_per_stage entries must be >= 1";
  }
  if (!(problem.p2p_time_s >= 0.0) || !std::isfinite(problem.p2p_time_s)) {
    return "p2p_time_s must be >= 0";
  }
  for (int u = 0; u < units; ++u) {
    const std::string where = problem.num_chunks == 1
                                  ? "stage " + std::to_string(u)
                                  : "stage " + std::to_string(u / problem.num_chunks) + " chunk " +
                                        std::to_string(u % problem.num_chunks);
    if (std::string error = CheckOptions(problem.forward_options[u], where, "forward", options);
        !error.empty())
      return error;
    if (std::string error = CheckOptions(problem.backward_options[u], where, "backward", options);
        !error.empty())
      return error;
  }
  for (int s = 0; s < static_cast<int>(problem.last_backward_options.size()); ++s) {
    if (std::string error = CheckOptions(problem.last_backward_options[s],
                                         "stage " + std::to_string(s), "last backward", options);
        !error.empty()) {
      return error;
    }
  }
  for (int i = 0; i < static_cast<int>(problem.gradient_sync_options.size()); ++i) {
    const std::string where =
        "stage " + std::to_string(i / std::max(syncs, 1)) +
        (i % std::max(syncs, 1) == 0 ? std::string() : " chunk " + std::to_string(i % syncs));
    if (std::string error =
            CheckOptions(problem.gradient_sync_options[i], where, "gradient sync", options);
        !error.empty()) {
      return error;
    }
  }
  // Every path is at most the sum of all slowest durations: the frontier's deadlines stay
  // countable. (Per node class: its slowest option times the nodes it has at most.)
  const auto slowest = [](const std::vector<Option>& list) {
    double t = 0.0;
    for (const Option& o : list) t = std::max(t, o.time_s);
    return t;
  };
  double slowest_sum = problem.p2p_time_s * 2 * units;
  for (int u = 0; u < units; ++u) {
    slowest_sum += (slowest(problem.forward_options[u]) + slowest(problem.backward_options[u])) *
                   problem.num_microbatches;
  }
  for (const auto* lists : {&problem.last_backward_options, &problem.gradient_sync_options}) {
    for (const auto& list : *lists) slowest_sum += slowest(list);
  }
  if (slowest_sum / options.unit_time_s > 1e7) {
    return "unit_time_s is too small for the options' times (over 1e7 deadlines)";
  }
  return "";
}

}  // namespace

std::optional<OptionError> Options::Validate() const {
  if (!(unit_time_s > 0.0) || !std::isfinite(unit_time_s)) {
    return OptionError{"unit_time_s", Describe(unit_time_s), "must be a finite number > 0"};
  }
  if (!(p_static_w >= 0.0) || !std::isfinite(p_static_w)) {
    return OptionError{"p_static_w", Describe(p_static_w), "must be a finite number >= 0"};
  }
  if (max_steps < 0)
    return OptionError{"max_steps", Describe(max_steps), "must be >= 0 (0: no limit)"};
  if (!(deadline_s >= 0.0) || !std::isfinite(deadline_s)) {
    return OptionError{"deadline_s", Describe(deadline_s),
                       "must be a finite number >= 0 (0: the whole frontier)"};
  }
  return std::nullopt;
}

Result Solve(const Problem& problem, const Options& options) {
  if (const std::string error = Validate(problem, options); !error.empty()) {
    Result result;
    result.summary.status = Status::kInvalidInput;
    result.summary.message = error;
    return result;
  }
  schedule::Dag dag =
      schedule::BuildDag(problem.schedule, problem.num_stages, problem.num_microbatches,
                         problem.num_chunks, problem.gradient_sync);
  Engine engine(problem, options, std::move(dag));
  return engine.Run();
}

}  // namespace kareus::pipeline_reference
