// SPDX-License-Identifier: Apache-2.0
// Phillips-Dessouky on an activity-on-arc graph (reference/perseus-lowtime-zeus.md §A2), traced
// exactly: start with every instruction at its cheapest (slowest useful) duration; at each step
// find the minimum cut of the critical sub-DAG (an arc's upper capacity is the marginal cost of
// shortening it, its lower bound the marginal saving of lengthening it; arcs crossing the cut
// backwards are lengthened) and move along that cut as far as it stays optimal: until a moved
// instruction reaches a vertex of its convex cost, or a path off the critical sub-DAG becomes
// critical. Costs are convex, so the cost along one move is linear with the cut's value as its
// slope, which by convexity of the optimal-cost curve is the least possible: every time on the
// way is optimal for the convex model. Deadlines on the frontier's grid are realized as the
// descent passes them (realize.h).
#include "kareus/pipeline/solver.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

// Boost.Graph's edge iterators trip GCC's -Wmaybe-uninitialized after inlining (a known false
// positive); keep warnings-as-errors builds clean.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/boykov_kolmogorov_max_flow.hpp>

#include "kareus/common/error.h"
#include "kareus/pareto/pareto.h"

namespace kareus::pipeline {
namespace internal {
namespace {

using schedule::Dag;
using schedule::DagEdge;
using schedule::Direction;
using schedule::Instruction;

constexpr double kInf = std::numeric_limits<double>::infinity();

int64_t ToTicks(double time_s, double tick_s) {
  // Round up so the model never promises less time than the real options take; the tolerance
  // keeps exact multiples from gaining a tick through representation error.
  return static_cast<int64_t>(std::ceil(time_s / tick_s - 1e-9));
}

// Per (stage, kind): the convex cost model on ticks and the real options.
struct Spec {
  // Front over tick times: ticks ascending, effective energy strictly descending.
  std::vector<int64_t> ticks;
  std::vector<double> eff;
  std::vector<int> option;
  // Vertices of the lower convex hull of the front (indices into the front), and the slope of
  // each hull segment j (between vertex j and j+1) in J per tick (positive: shorter costs more).
  std::vector<int> hull;
  std::vector<int64_t> hull_ticks;
  std::vector<double> slope;
  // Real-time front (time ascending, effective energy strictly descending) for refinement.
  std::vector<double> real_time;
  std::vector<double> real_eff;
  std::vector<int> real_option;
  std::vector<double> option_eff;   // gpus * (E - P t) of every option
  std::vector<double> option_time;  // real time of every option
  int fastest_option = 0;           // the fastest option (first of the real front)
  int cheapest_option = 0;          // the cheapest option (last of the real front)

  int64_t t_min() const { return hull_ticks.front(); }
  int64_t t_max() const { return hull_ticks.back(); }
  // Hull segment with hull_ticks[j] < d <= hull_ticks[j+1] (shortening from d moves along j).
  std::size_t LeftSegment(int64_t d) const {
    const auto it = std::lower_bound(hull_ticks.begin(), hull_ticks.end(), d);
    return static_cast<std::size_t>(it - hull_ticks.begin()) - 1;
  }
  // Hull segment with hull_ticks[j] <= d < hull_ticks[j+1] (lengthening from d moves along j).
  std::size_t RightSegment(int64_t d) const {
    const auto it = std::upper_bound(hull_ticks.begin(), hull_ticks.end(), d);
    return static_cast<std::size_t>(it - hull_ticks.begin()) - 1;
  }
  double Cost(int64_t d) const {
    if (d >= t_max()) return eff[static_cast<std::size_t>(hull.back())];
    const std::size_t j = RightSegment(d);
    return eff[static_cast<std::size_t>(hull[j])] -
           slope[j] * static_cast<double>(d - hull_ticks[j]);
  }
  // The cheapest option whose tick time fits d (d >= t_min).
  int Realize(int64_t d) const {
    const auto it = std::upper_bound(ticks.begin(), ticks.end(), d);
    return option[static_cast<std::size_t>(it - ticks.begin()) - 1];
  }
  // Real time of the slower end of the hull segment d lies on (d itself when on a vertex).
  double SegmentCap(int64_t d) const {
    if (d >= t_max()) return real_time_of_vertex.back();
    const std::size_t j = RightSegment(d);
    return hull_ticks[j] == d ? real_time_of_vertex[j] : real_time_of_vertex[j + 1];
  }
  std::vector<double> real_time_of_vertex;  // real time of each hull vertex's option
};

Spec BuildSpec(const std::vector<Option>& options, int gpus, double p_static_w, double tick_s) {
  Spec spec;
  std::vector<pareto::Point> quantized;
  std::vector<pareto::Point> real;
  for (std::size_t i = 0; i < options.size(); ++i) {
    const double eff = gpus * (options[i].energy_j - p_static_w * options[i].time_s);
    spec.option_eff.push_back(eff);
    spec.option_time.push_back(options[i].time_s);
    quantized.push_back({.time_s = static_cast<double>(ToTicks(options[i].time_s, tick_s)),
                         .energy_j = eff,
                         .payload = static_cast<int64_t>(i)});
    real.push_back({.time_s = options[i].time_s, .energy_j = eff, .payload = static_cast<int64_t>(i)});
  }
  const auto front = pareto::Filter(quantized);
  for (const pareto::Point& p : front) {
    spec.ticks.push_back(static_cast<int64_t>(p.time_s));
    spec.eff.push_back(p.energy_j);
    spec.option.push_back(static_cast<int>(p.payload));
  }
  for (std::size_t h : pareto::LowerConvexHull(front)) {
    spec.hull.push_back(static_cast<int>(h));
    spec.hull_ticks.push_back(spec.ticks[h]);
    spec.real_time_of_vertex.push_back(options[static_cast<std::size_t>(front[h].payload)].time_s);
  }
  for (std::size_t j = 0; j + 1 < spec.hull.size(); ++j) {
    const auto a = static_cast<std::size_t>(spec.hull[j]);
    const auto b = static_cast<std::size_t>(spec.hull[j + 1]);
    spec.slope.push_back((spec.eff[a] - spec.eff[b]) /
                         static_cast<double>(spec.ticks[b] - spec.ticks[a]));
  }
  for (const pareto::Point& p : pareto::Filter(real)) {
    spec.real_time.push_back(p.time_s);
    spec.real_eff.push_back(p.energy_j);
    spec.real_option.push_back(static_cast<int>(p.payload));
  }
  spec.fastest_option = spec.real_option.front();
  spec.cheapest_option = spec.real_option.back();
  return spec;
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
    const auto& list = inst.kind == Direction::kForward ? problem.forward_options[inst.stage]
                                                        : problem.backward_options[inst.stage];
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

using FlowTraits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
using FlowGraph = boost::adjacency_list<
    boost::vecS, boost::vecS, boost::directedS, boost::no_property,
    boost::property<boost::edge_capacity_t, double,
                    boost::property<boost::edge_residual_capacity_t, double,
                                    boost::property<boost::edge_reverse_t,
                                                    FlowTraits::edge_descriptor>>>>;
using FlowEdge = FlowTraits::edge_descriptor;

// Boykov-Kolmogorov max-flow (measured faster here than push-relabel on the critical
// sub-DAGs of bench/pipeline_benchmark.cc).
double MaxFlow(FlowGraph& g, int s, int t) {
  const std::size_t n = boost::num_vertices(g);
  std::vector<FlowEdge> predecessor(n);
  std::vector<boost::default_color_type> color(n);
  std::vector<long> distance(n);
  return boost::boykov_kolmogorov_max_flow(
      g, boost::get(boost::edge_capacity, g), boost::get(boost::edge_residual_capacity, g),
      boost::get(boost::edge_reverse, g), predecessor.data(), color.data(), distance.data(),
      boost::get(boost::vertex_index, g), s, t);
}

FlowEdge AddArc(FlowGraph& g, int u, int v, double capacity) {
  auto capacity_map = boost::get(boost::edge_capacity, g);
  auto reverse_map = boost::get(boost::edge_reverse, g);
  const FlowEdge e = boost::add_edge(u, v, g).first;
  const FlowEdge r = boost::add_edge(v, u, g).first;
  capacity_map[e] = capacity;
  capacity_map[r] = 0.0;
  reverse_map[e] = r;
  reverse_map[r] = e;
  return e;
}

class Engine {
 public:
  Engine(const Problem& problem, const Options& options, Dag dag)
      : problem_(problem), options_(options), dag_(std::move(dag)),
        tick_s_(options.unit_time_s / static_cast<double>(kTicksPerUnit)) {}

  Result Run();

 private:
  struct Arc {
    int from = 0;
    int to = 0;
    int64_t lag = 0;    // fixed duration (dependency arcs: the P2P time in ticks)
    int activity = -1;  // AON node, or -1 for a fixed arc (dependency, P2P, source, sink)
  };
  // One move of the descent: from makespan `start` down by `delta` ticks along a cut.
  struct Move {
    int64_t start = 0;
    int64_t delta = 0;
    std::vector<int> shorten;
    std::vector<int> lengthen;
  };

  const Spec& SpecOf(int node) const {
    const Instruction& inst = dag_.nodes[node];
    return specs_[2 * inst.stage + (inst.kind == Direction::kForward ? 0 : 1)];
  }
  double TimeOf(int node, int option) const {
    return SpecOf(node).option_time[static_cast<std::size_t>(option)];
  }

  void BuildArcs();
  int64_t ArcDuration(const Arc& arc) const {
    return arc.activity >= 0 ? duration_[arc.activity] : arc.lag;
  }
  int64_t ComputeEventTimes();  // earliest_/latest_ for duration_; returns the makespan
  // Longest path with the move's durations after `delta` ticks; returns the makespan and the
  // (length at delta 0, net rate) of one longest path.
  int64_t MakespanAfter(const Move& move, int64_t delta, int64_t* base, int64_t* rate);
  // One minimum cut on the sub-DAG of arcs with float <= threshold. False: no finite cut
  // (or a flow failure, with status_ set).
  bool Cut(int64_t threshold, Move* move);
  double ModelEnergy() const;

  // Realization and refinement (real time).
  std::vector<int> RealizeAt(int64_t offset, const Move* move) const;
  void Repair(std::vector<int>& choice, double deadline) const;
  bool FillForward(std::vector<int>& choice, double deadline, const std::vector<double>* cap) const;
  bool FillBackward(std::vector<int>& choice, double deadline, const std::vector<double>* cap) const;
  void Refine(std::vector<int>& choice, double deadline, const std::vector<double>* cap) const;
  void Exchange(std::vector<int>& choice, double deadline) const;
  double Energy(const std::vector<int>& choice) const;
  double RealMakespan(const std::vector<int>& choice) const;
  void RecordPoint(double deadline, int64_t k, int64_t offset, const Move* move);

  const Problem& problem_;
  const Options& options_;
  Dag dag_;
  double tick_s_;
  std::vector<Spec> specs_;
  int num_events_ = 0;
  int source_ = 0;
  int sink_ = 0;
  std::vector<Arc> arcs_;
  std::vector<std::vector<int>> out_arcs_;
  std::vector<std::vector<int>> in_arcs_;
  std::vector<int> event_order_;
  std::vector<int64_t> earliest_;
  std::vector<int64_t> latest_;
  std::vector<int64_t> duration_;  // per AON node, in ticks
  double gpus_total_ = 0.0;
  // AON adjacency with P2P lags, for real-time evaluation and refinement.
  std::vector<std::vector<std::pair<int, double>>> preds_;
  std::vector<std::vector<std::pair<int, double>>> succs_;
  // Scratch.
  std::vector<int> critical_;
  std::vector<int> vertex_of_;
  std::vector<double> lower_;
  std::vector<double> upper_;
  std::vector<int64_t> move_duration_;
  std::vector<int8_t> move_rate_;
  std::vector<int64_t> path_len_;
  std::vector<int64_t> path_base_;
  std::vector<int64_t> path_rate_;
  std::vector<IterationPoint> raw_;
  int64_t steps_ = 0;
  Status status_ = Status::kReachedMinimumTime;
  std::string message_;
  int64_t critical_edges_max_ = 0;
  int64_t near_critical_cuts_ = 0;
};

void Engine::BuildArcs() {
  const int n = static_cast<int>(dag_.nodes.size());
  num_events_ = 2 * n + 2;
  source_ = 2 * n;
  sink_ = 2 * n + 1;
  const int64_t p2p = problem_.p2p_time_s > 0 ? ToTicks(problem_.p2p_time_s, tick_s_) : 0;
  std::vector<int> indegree(n, 0);
  std::vector<int> outdegree(n, 0);
  preds_.assign(n, {});
  succs_.assign(n, {});
  for (int v = 0; v < n; ++v) arcs_.push_back({2 * v, 2 * v + 1, 0, v});
  for (const DagEdge& e : dag_.edges) {
    arcs_.push_back({2 * e.from + 1, 2 * e.to, e.cross_stage ? p2p : 0, -1});
    ++indegree[e.to];
    ++outdegree[e.from];
    const double lag = e.cross_stage ? problem_.p2p_time_s : 0.0;
    preds_[e.to].emplace_back(e.from, lag);
    succs_[e.from].emplace_back(e.to, lag);
  }
  for (int v = 0; v < n; ++v) {
    if (indegree[v] == 0) arcs_.push_back({source_, 2 * v, 0, -1});
    if (outdegree[v] == 0) arcs_.push_back({2 * v + 1, sink_, 0, -1});
  }
  out_arcs_.assign(num_events_, {});
  in_arcs_.assign(num_events_, {});
  for (int a = 0; a < static_cast<int>(arcs_.size()); ++a) {
    out_arcs_[arcs_[a].from].push_back(a);
    in_arcs_[arcs_[a].to].push_back(a);
  }
  event_order_.push_back(source_);
  for (int v : dag_.topological_order) {
    event_order_.push_back(2 * v);
    event_order_.push_back(2 * v + 1);
  }
  event_order_.push_back(sink_);
  earliest_.assign(num_events_, 0);
  latest_.assign(num_events_, 0);
  vertex_of_.assign(num_events_, -1);
  move_duration_.assign(n, 0);
  move_rate_.assign(n, 0);
  path_len_.assign(num_events_, 0);
  path_base_.assign(num_events_, 0);
  path_rate_.assign(num_events_, 0);
}

int64_t Engine::ComputeEventTimes() {
  for (int u : event_order_) {
    int64_t e = 0;
    for (int a : in_arcs_[u]) e = std::max(e, earliest_[arcs_[a].from] + ArcDuration(arcs_[a]));
    earliest_[u] = e;
  }
  const int64_t makespan = earliest_[sink_];
  for (auto it = event_order_.rbegin(); it != event_order_.rend(); ++it) {
    int64_t latest = makespan;
    for (int a : out_arcs_[*it]) latest = std::min(latest, latest_[arcs_[a].to] - ArcDuration(arcs_[a]));
    latest_[*it] = latest;
  }
  return makespan;
}

int64_t Engine::MakespanAfter(const Move& move, int64_t delta, int64_t* base, int64_t* rate) {
  for (int v : move.shorten) move_rate_[v] = -1;
  for (int v : move.lengthen) move_rate_[v] = 1;
  for (int u : event_order_) {
    int64_t best = std::numeric_limits<int64_t>::min();
    int64_t best_base = 0;
    int64_t best_rate = 0;
    for (int a : in_arcs_[u]) {
      const Arc& arc = arcs_[a];
      const int64_t d0 = ArcDuration(arc);
      const int64_t r = arc.activity >= 0 ? move_rate_[arc.activity] : 0;
      const int64_t len = path_len_[arc.from] + d0 + r * delta;
      if (len > best) {
        best = len;
        best_base = path_base_[arc.from] + d0;
        best_rate = path_rate_[arc.from] + r;
      }
    }
    if (in_arcs_[u].empty()) best = 0;
    path_len_[u] = best;
    path_base_[u] = best_base;
    path_rate_[u] = best_rate;
  }
  for (int v : move.shorten) move_rate_[v] = 0;
  for (int v : move.lengthen) move_rate_[v] = 0;
  *base = path_base_[sink_];
  *rate = path_rate_[sink_];
  return path_len_[sink_];
}

bool Engine::Cut(int64_t threshold, Move* move) {
  critical_.clear();
  for (int a = 0; a < static_cast<int>(arcs_.size()); ++a) {
    const Arc& arc = arcs_[a];
    if (latest_[arc.to] - earliest_[arc.from] - ArcDuration(arc) <= threshold) critical_.push_back(a);
  }
  critical_edges_max_ = std::max<int64_t>(critical_edges_max_, static_cast<int64_t>(critical_.size()));
  int num_vertices = 0;
  for (int a : critical_) {
    for (int u : {arcs_[a].from, arcs_[a].to}) {
      if (vertex_of_[u] < 0) vertex_of_[u] = num_vertices++;
    }
  }
  auto release = [&]() {
    for (int a : critical_) {
      vertex_of_[arcs_[a].from] = -1;
      vertex_of_[arcs_[a].to] = -1;
    }
  };
  // Capacities in J per tick: upper = cost of shortening by one tick (inf at the minimum or
  // for fixed arcs), lower = saving of lengthening by one tick (0 at the maximum or fixed).
  lower_.assign(critical_.size(), 0.0);
  upper_.assign(critical_.size(), kInf);
  double finite_sum = 1e-12;
  for (std::size_t i = 0; i < critical_.size(); ++i) {
    const Arc& arc = arcs_[critical_[i]];
    if (arc.activity < 0) continue;
    const Spec& spec = SpecOf(arc.activity);
    const int64_t d = duration_[arc.activity];
    if (d > spec.t_min()) upper_[i] = spec.slope[spec.LeftSegment(d)];
    if (d < spec.t_max()) lower_[i] = spec.slope[spec.RightSegment(d)];
    upper_[i] = std::max(upper_[i], lower_[i]);  // convex in exact arithmetic; guard rounding
    finite_sum += lower_[i] + (std::isfinite(upper_[i]) ? upper_[i] : 0.0);
  }
  // Boost's max-flow needs finite capacities: an infinite arc gets a capacity larger than
  // every finite cut, so a cut through it is recognized as infinite below.
  const double big = 4.0 * finite_sum;
  const double tolerance = 1e-9 * finite_sum;
  const int s = vertex_of_[source_];
  const int t = vertex_of_[sink_];

  // Phase 1: a feasible flow within [lower, upper] (circulation with t -> s of infinite
  // capacity, demands from the lower bounds routed between a super source and super sink).
  std::vector<double> base_flow(critical_.size(), 0.0);
  {
    std::vector<double> excess(num_vertices, 0.0);
    double demand = 0.0;
    for (std::size_t i = 0; i < critical_.size(); ++i) {
      excess[vertex_of_[arcs_[critical_[i]].to]] += lower_[i];
      excess[vertex_of_[arcs_[critical_[i]].from]] -= lower_[i];
    }
    for (double x : excess) demand += std::max(0.0, x);
    if (demand > 0.0) {
      FlowGraph g(num_vertices + 2);
      const int ss = num_vertices;
      const int tt = num_vertices + 1;
      std::vector<FlowEdge> handle(critical_.size());
      for (std::size_t i = 0; i < critical_.size(); ++i) {
        const double cap = std::isfinite(upper_[i]) ? upper_[i] - lower_[i] : big;
        handle[i] = AddArc(g, vertex_of_[arcs_[critical_[i]].from],
                           vertex_of_[arcs_[critical_[i]].to], cap);
      }
      AddArc(g, t, s, big);
      for (int v = 0; v < num_vertices; ++v) {
        if (excess[v] > 0) AddArc(g, ss, v, excess[v]);
        if (excess[v] < 0) AddArc(g, v, tt, -excess[v]);
      }
      const double flow = MaxFlow(g, ss, tt);
      if (flow < demand - tolerance) {
        status_ = Status::kInfeasibleFlow;
        message_ = "no flow satisfies the lower bounds (demand " + std::to_string(demand) +
                   ", routed " + std::to_string(flow) + ")";
        release();
        return false;
      }
      auto capacity = boost::get(boost::edge_capacity, g);
      auto residual = boost::get(boost::edge_residual_capacity, g);
      for (std::size_t i = 0; i < critical_.size(); ++i) {
        base_flow[i] = std::max(0.0, capacity[handle[i]] - residual[handle[i]]);
      }
    }
  }

  // Phase 2: maximum s-t flow in the residual network of that feasible flow; the source side
  // of its minimum cut is what the residual network reaches from s.
  FlowGraph g(num_vertices);
  for (std::size_t i = 0; i < critical_.size(); ++i) {
    const int u = vertex_of_[arcs_[critical_[i]].from];
    const int v = vertex_of_[arcs_[critical_[i]].to];
    const double forward =
        std::isfinite(upper_[i]) ? std::max(0.0, upper_[i] - lower_[i] - base_flow[i]) : big;
    AddArc(g, u, v, forward);
    if (base_flow[i] > 0.0) AddArc(g, v, u, base_flow[i]);
  }
  MaxFlow(g, s, t);
  auto residual = boost::get(boost::edge_residual_capacity, g);
  std::vector<char> source_side(num_vertices, 0);
  std::vector<int> stack{s};
  source_side[s] = 1;
  while (!stack.empty()) {
    const int u = stack.back();
    stack.pop_back();
    for (auto [it, end] = boost::out_edges(u, g); it != end; ++it) {
      const int v = static_cast<int>(boost::target(*it, g));
      if (!source_side[v] && residual[*it] > tolerance) {
        source_side[v] = 1;
        stack.push_back(v);
      }
    }
  }
  move->shorten.clear();
  move->lengthen.clear();
  bool finite = !source_side[t];
  for (std::size_t i = 0; i < critical_.size() && finite; ++i) {
    const Arc& arc = arcs_[critical_[i]];
    const bool from_s = source_side[vertex_of_[arc.from]];
    const bool to_s = source_side[vertex_of_[arc.to]];
    if (from_s && !to_s) {
      if (!std::isfinite(upper_[i])) finite = false;
      move->shorten.push_back(arc.activity);
    } else if (!from_s && to_s && arc.activity >= 0 && lower_[i] > 0.0) {
      move->lengthen.push_back(arc.activity);
    }
  }
  release();
  return finite;
}

double Engine::ModelEnergy() const {
  double model = 0.0;
  for (std::size_t v = 0; v < duration_.size(); ++v) model += SpecOf(static_cast<int>(v)).Cost(duration_[v]);
  return model;
}

// The convex durations `offset` ticks into `move` (none: the current durations), each realized
// as the cheapest option whose tick time fits.
std::vector<int> Engine::RealizeAt(int64_t offset, const Move* move) const {
  std::vector<int> choice(dag_.nodes.size());
  for (std::size_t v = 0; v < choice.size(); ++v) {
    choice[v] = SpecOf(static_cast<int>(v)).Realize(duration_[v]);
  }
  if (move != nullptr && offset > 0) {
    for (int v : move->shorten) choice[v] = SpecOf(v).Realize(duration_[v] - offset);
    for (int v : move->lengthen) choice[v] = SpecOf(v).Realize(duration_[v] + offset);
  }
  return choice;
}

double Engine::RealMakespan(const std::vector<int>& choice) const {
  std::vector<double> durations(dag_.nodes.size());
  for (std::size_t v = 0; v < durations.size(); ++v) {
    durations[v] = TimeOf(static_cast<int>(v), choice[v]);
  }
  return schedule::StartTimes(dag_, durations, problem_.p2p_time_s).makespan;
}

// Makes `choice` meet `deadline` (real time) by moving the instructions on late paths to their
// fastest option (the all-fastest plan meets any deadline >= the minimum time).
void Engine::Repair(std::vector<int>& choice, double deadline) const {
  const std::size_t n = dag_.nodes.size();
  const double tolerance = 1e-12 * std::max(1.0, deadline);
  std::vector<double> finish(n, 0.0);
  std::vector<double> latest_start(n, 0.0);
  for (int round = 0; round < static_cast<int>(n) + 1; ++round) {
    for (int v : dag_.topological_order) {
      double start = 0.0;
      for (auto [p, lag] : preds_[v]) start = std::max(start, finish[p] + lag);
      finish[v] = start + TimeOf(v, choice[v]);
    }
    bool late = false;
    for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
      const int v = *it;
      double lf = deadline;
      for (auto [w, lag] : succs_[v]) lf = std::min(lf, latest_start[w] - lag);
      latest_start[v] = lf - TimeOf(v, choice[v]);
      if (finish[v] > lf + tolerance && choice[v] != SpecOf(v).fastest_option) {
        choice[v] = SpecOf(v).fastest_option;
        latest_start[v] = lf - TimeOf(v, choice[v]);
        late = true;
      }
    }
    if (!late) return;
  }
}

// Forward pass in topological order with latest finishes computed from the current durations
// (successors are still unchanged when a node is visited): each node takes the cheapest real
// option that fits its window (and `cap`, when given). True when anything changed.
bool Engine::FillForward(std::vector<int>& choice, double deadline,
                         const std::vector<double>* cap) const {
  const std::size_t n = dag_.nodes.size();
  const double slack_tolerance = 1e-12 * std::max(1.0, deadline);
  std::vector<double> latest_finish(n, 0.0);
  for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
    double latest = deadline;
    for (auto [w, lag] : succs_[*it]) {
      latest = std::min(latest, latest_finish[w] - TimeOf(w, choice[w]) - lag);
    }
    latest_finish[*it] = latest;
  }
  bool changed = false;
  std::vector<double> finish(n, 0.0);
  for (int v : dag_.topological_order) {
    double es = 0.0;
    for (auto [p, lag] : preds_[v]) es = std::max(es, finish[p] + lag);
    double window = latest_finish[v] - es;
    if (cap != nullptr) window = std::min(window, (*cap)[v]);
    const Spec& spec = SpecOf(v);
    const auto pos = std::upper_bound(spec.real_time.begin(), spec.real_time.end(),
                                      window + slack_tolerance);
    if (pos != spec.real_time.begin()) {
      const std::size_t j = static_cast<std::size_t>(pos - spec.real_time.begin()) - 1;
      if (spec.real_eff[j] < spec.option_eff[static_cast<std::size_t>(choice[v])]) {
        choice[v] = spec.real_option[j];
        changed = true;
      }
    }
    finish[v] = es + TimeOf(v, choice[v]);
  }
  return changed;
}

// The mirror image: reverse topological order with earliest starts from the current durations.
bool Engine::FillBackward(std::vector<int>& choice, double deadline,
                          const std::vector<double>* cap) const {
  const std::size_t n = dag_.nodes.size();
  const double slack_tolerance = 1e-12 * std::max(1.0, deadline);
  std::vector<double> earliest_start(n, 0.0);
  for (int v : dag_.topological_order) {
    double es = 0.0;
    for (auto [p, lag] : preds_[v]) es = std::max(es, earliest_start[p] + TimeOf(p, choice[p]) + lag);
    earliest_start[v] = es;
  }
  bool changed = false;
  std::vector<double> latest_start(n, 0.0);
  for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
    const int v = *it;
    double lf = deadline;
    for (auto [w, lag] : succs_[v]) lf = std::min(lf, latest_start[w] - lag);
    double window = lf - earliest_start[v];
    if (cap != nullptr) window = std::min(window, (*cap)[v]);
    const Spec& spec = SpecOf(v);
    const auto pos = std::upper_bound(spec.real_time.begin(), spec.real_time.end(),
                                      window + slack_tolerance);
    if (pos != spec.real_time.begin()) {
      const std::size_t j = static_cast<std::size_t>(pos - spec.real_time.begin()) - 1;
      if (spec.real_eff[j] < spec.option_eff[static_cast<std::size_t>(choice[v])]) {
        choice[v] = spec.real_option[j];
        changed = true;
      }
    }
    latest_start[v] = lf - TimeOf(v, choice[v]);
  }
  return changed;
}

// Slack refinement within `deadline`: first each instruction may only move up to the slower
// end of its convex segment (`cap`: spreads the slack the way the convex optimum does), then
// freely, forward and backward until nothing changes.
void Engine::Refine(std::vector<int>& choice, double deadline,
                    const std::vector<double>* cap) const {
  if (cap != nullptr) {
    FillForward(choice, deadline, cap);
    FillBackward(choice, deadline, cap);
  }
  for (int round = 0; round < 8; ++round) {
    const bool forward = FillForward(choice, deadline, nullptr);
    const bool backward = FillBackward(choice, deadline, nullptr);
    if (!forward && !backward) break;
  }
}

double Engine::Energy(const std::vector<int>& choice) const {
  double effective = 0.0;
  for (std::size_t v = 0; v < choice.size(); ++v) {
    effective += SpecOf(static_cast<int>(v)).option_eff[static_cast<std::size_t>(choice[v])];
  }
  return effective + options_.p_static_w * gpus_total_ * RealMakespan(choice);
}

// One-exchange local search: give back the slack an instruction holds (each faster option on
// its real front), let Refine hand it to the others, keep the result when the iteration's
// energy drops; until no exchange helps.
void Engine::Exchange(std::vector<int>& choice, double deadline) const {
  double best = Energy(choice);
  std::vector<int> trial;
  for (int round = 0; round < 4; ++round) {
    bool improved = false;
    for (int v : dag_.topological_order) {
      const Spec& spec = SpecOf(v);
      const double current = spec.option_time[static_cast<std::size_t>(choice[v])];
      for (std::size_t j = 0; j < spec.real_time.size() && spec.real_time[j] < current; ++j) {
        trial = choice;
        trial[v] = spec.real_option[j];
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

void Engine::RecordPoint(double deadline, int64_t k, int64_t offset, const Move* move) {
  std::vector<int> choice = RealizeAt(offset, move);
  std::vector<double> cap(choice.size());
  for (std::size_t v = 0; v < choice.size(); ++v) {
    cap[v] = SpecOf(static_cast<int>(v)).SegmentCap(duration_[v]);
  }
  // Only the moved arcs differ from duration_.
  double model = ModelEnergy();
  if (move != nullptr && offset > 0) {
    for (int v : move->shorten) {
      const Spec& spec = SpecOf(v);
      cap[v] = spec.SegmentCap(duration_[v] - offset);
      model += spec.Cost(duration_[v] - offset) - spec.Cost(duration_[v]);
    }
    for (int v : move->lengthen) {
      const Spec& spec = SpecOf(v);
      cap[v] = spec.SegmentCap(duration_[v] + offset);
      model += spec.Cost(duration_[v] + offset) - spec.Cost(duration_[v]);
    }
  }
  if (RealMakespan(choice) > deadline * (1 + 1e-12)) Repair(choice, deadline);
  if (options_.reclaim_slack) {
    Refine(choice, deadline, &cap);
    // The exchange search costs O(n * options) refinements: on the fastest point (the
    // max-throughput plan) only.
    if (k == 0) Exchange(choice, deadline);
  }
  IterationPoint point;
  point.cost = EvaluateWith(problem_, dag_, choice, options_.p_static_w);
  point.step = steps_;
  point.quanta = k;
  point.deadline_s = deadline;
  point.model_energy_j = model + options_.p_static_w * gpus_total_ * deadline;
  point.choice = std::move(choice);
  raw_.push_back(std::move(point));
}

Result Engine::Run() {
  Result result;
  Summary& summary = result.summary;
  const int num_stages = problem_.num_stages;
  for (int s = 0; s < num_stages; ++s) {
    const int gpus = problem_.gpus_per_stage.empty() ? 1 : problem_.gpus_per_stage[s];
    gpus_total_ += gpus;
    specs_.push_back(BuildSpec(problem_.forward_options[s], gpus, options_.p_static_w, tick_s_));
    specs_.push_back(BuildSpec(problem_.backward_options[s], gpus, options_.p_static_w, tick_s_));
  }
  const int n = static_cast<int>(dag_.nodes.size());
  BuildArcs();
  std::vector<int> fastest(n);
  std::vector<int> cheapest(n);
  for (int v = 0; v < n; ++v) {
    fastest[v] = SpecOf(v).fastest_option;
    cheapest[v] = SpecOf(v).cheapest_option;
  }
  const double t_min = RealMakespan(fastest);
  const double t_max = RealMakespan(cheapest);
  summary.min_time_s = t_min;
  summary.max_time_s = t_max;
  const double unit = options_.unit_time_s;
  duration_.assign(n, 0);
  for (int v = 0; v < n; ++v) duration_[v] = SpecOf(v).t_min();
  const int64_t model_fastest = ComputeEventTimes();
  summary.quanta_fastest = static_cast<int64_t>(std::ceil(static_cast<double>(model_fastest) / kTicksPerUnit));
  for (int v = 0; v < n; ++v) duration_[v] = SpecOf(v).t_max();
  int64_t makespan = ComputeEventTimes();
  summary.quanta_slowest = static_cast<int64_t>(std::ceil(static_cast<double>(makespan) / kTicksPerUnit));

  // The deadlines to realize, slowest first: T_min + k * unit for k = K .. 0 (K: the first
  // that the cheapest plan meets), or the one deadline of deadline_s mode.
  struct Deadline {
    double time_s;
    int64_t k;
  };
  std::vector<Deadline> deadlines;
  if (options_.deadline_s > 0.0) {
    if (options_.deadline_s < t_min * (1 - 1e-12)) {
      summary.status = Status::kDeadlineInfeasible;
      summary.message = "deadline " + std::to_string(options_.deadline_s) +
                        " s is below the minimum iteration time " + std::to_string(t_min) + " s";
      result.dag = std::move(dag_);
      return result;
    }
    deadlines.push_back({std::min(options_.deadline_s, std::max(t_min, t_max)), -1});
  } else {
    const auto count = static_cast<int64_t>(std::ceil((t_max - t_min) / unit - 1e-9));
    for (int64_t k = std::max<int64_t>(count, 0); k >= 0; --k) {
      deadlines.push_back({k == count ? std::max(t_max, t_min) : t_min + static_cast<double>(k) * unit, k});
    }
  }
  std::size_t next = 0;  // next deadline to realize
  auto ticks_of = [&](double deadline) {
    return static_cast<int64_t>(std::floor(deadline / tick_s_ + 1e-9));
  };
  // Deadlines the current durations already meet.
  while (next < deadlines.size() && ticks_of(deadlines[next].time_s) >= makespan) {
    RecordPoint(deadlines[next].time_s, deadlines[next].k, 0, nullptr);
    ++next;
  }

  status_ = Status::kReachedMinimumTime;
  Move move;
  int64_t threshold = 0;
  bool one_tick = false;
  while (next < deadlines.size() && makespan > model_fastest) {
    if (options_.max_steps > 0 && steps_ >= options_.max_steps) {
      status_ = Status::kStepLimit;
      break;
    }
    bool finite = Cut(threshold, &move);
    if (!finite && threshold > 0 && status_ == Status::kReachedMinimumTime) {
      // The near-critical paths cannot all be shortened: cut the critical sub-DAG alone and
      // move one tick without lengthening anything (feasible: no path grows), until the
      // overtaking path is critical itself.
      threshold = 0;
      finite = Cut(0, &move);
      move.lengthen.clear();
      one_tick = true;
    }
    if (!finite) {
      if (status_ == Status::kReachedMinimumTime) {
        status_ = Status::kStalled;
        message_ = "no finite cut above the fastest iteration time";
      }
      break;
    }
    ++steps_;
    // As far as every moved arc stays on its hull segment...
    int64_t delta = std::numeric_limits<int64_t>::max();
    for (int v : move.shorten) {
      const Spec& spec = SpecOf(v);
      delta = std::min(delta, duration_[v] - spec.hull_ticks[spec.LeftSegment(duration_[v])]);
    }
    for (int v : move.lengthen) {
      const Spec& spec = SpecOf(v);
      delta = std::min(delta, spec.hull_ticks[spec.RightSegment(duration_[v]) + 1] - duration_[v]);
    }
    delta = std::min(delta, makespan - model_fastest);
    if (one_tick) delta = 1;
    one_tick = false;
    // ... and no other path overtakes the shortened critical ones (each path's length is
    // linear in delta: Newton steps on the longest path converge to the exact breakpoint).
    for (;;) {
      int64_t base = 0;
      int64_t rate = 0;
      const int64_t longest = MakespanAfter(move, delta, &base, &rate);
      if (longest <= makespan - delta) break;
      delta = (makespan - base) / (1 + rate);  // 1 + rate > 0 since longest > makespan - delta
    }
    if (delta <= 0) {
      // A path becomes critical before one tick: cut again with it in the critical sub-DAG.
      int64_t base = 0;
      int64_t rate = 0;
      MakespanAfter(move, 1, &base, &rate);
      threshold = std::max<int64_t>(threshold + 1, makespan - base);
      ++near_critical_cuts_;
      continue;
    }
    threshold = 0;
    move.start = makespan;
    move.delta = delta;
    // Deadlines passed on the way.
    while (next < deadlines.size() && ticks_of(deadlines[next].time_s) >= makespan - delta) {
      RecordPoint(deadlines[next].time_s, deadlines[next].k,
                  makespan - ticks_of(deadlines[next].time_s), &move);
      ++next;
    }
    for (int v : move.shorten) duration_[v] -= delta;
    for (int v : move.lengthen) duration_[v] += delta;
    const int64_t reached = ComputeEventTimes();
    if (reached != makespan - delta) {
      status_ = Status::kStalled;
      message_ = "a move did not shorten the iteration as computed";
      makespan = reached;
      break;
    }
    makespan = reached;
  }
  if (status_ == Status::kReachedMinimumTime || status_ == Status::kStalled) {
    // Deadlines below the convex model's minimum (its ticks round option times up): the
    // fastest convex durations, repaired to the real deadline.
    while (next < deadlines.size()) {
      RecordPoint(deadlines[next].time_s, deadlines[next].k, 0, nullptr);
      ++next;
    }
  }
  summary.status = status_;
  summary.message = message_;
  summary.steps = steps_;
  summary.critical_edges_max = critical_edges_max_;
  summary.near_critical_cuts = near_critical_cuts_;
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

std::string Validate(const Problem& problem, const Options& options) {
  if (const auto error = options.Validate()) return error->Message();
  const int stages = problem.num_stages;
  if (stages < 1) return "num_stages must be >= 1";
  if (problem.num_microbatches < 1) return "num_microbatches must be >= 1";
  if (static_cast<int>(problem.forward_options.size()) != stages ||
      static_cast<int>(problem.backward_options.size()) != stages) {
    return "forward_options and backward_options need one list per stage";
  }
  if (!problem.gpus_per_stage.empty() && static_cast<int>(problem.gpus_per_stage.size()) != stages) {
    return "gpus_per_stage needs one entry per stage (or none)";
  }
  for (int g : problem.gpus_per_stage) {
    if (g < 1) return "gpus_per_stage entries must be >= 1";
  }
  if (!(problem.p2p_time_s >= 0.0) || !std::isfinite(problem.p2p_time_s)) {
    return "p2p_time_s must be >= 0";
  }
  double slowest_sum = problem.p2p_time_s * 2 * stages;
  for (int s = 0; s < stages; ++s) {
    for (const auto* list : {&problem.forward_options[s], &problem.backward_options[s]}) {
      const char* kind = list == &problem.forward_options[s] ? "forward" : "backward";
      if (list->empty()) return "stage " + std::to_string(s) + " has no " + kind + " options";
      double t_max = 0.0;
      for (const Option& o : *list) {
        if (!(o.time_s > 0.0) || !std::isfinite(o.time_s) || !std::isfinite(o.energy_j) ||
            o.energy_j < 0.0) {
          return "stage " + std::to_string(s) + " " + kind +
                 " option with time_s = " + std::to_string(o.time_s) + ", energy_j = " +
                 std::to_string(o.energy_j) + ": time must be > 0 and energy >= 0, finite";
        }
        t_max = std::max(t_max, o.time_s);
      }
      slowest_sum += t_max * problem.num_microbatches;
    }
  }
  // Every path is at most the sum of all slowest durations: the frontier's deadlines and the
  // model's ticks stay countable.
  if (slowest_sum / options.unit_time_s > 1e7) {
    return "unit_time_s is too small for the options' times (over 1e7 deadlines)";
  }
  return "";
}

}  // namespace
}  // namespace internal

const char* ToString(Status status) {
  switch (status) {
    case Status::kReachedMinimumTime: return "reached_minimum_time";
    case Status::kStepLimit: return "step_limit";
    case Status::kInfeasibleFlow: return "infeasible_flow";
    case Status::kStalled: return "stalled";
    case Status::kInvalidInput: return "invalid_input";
    case Status::kDeadlineInfeasible: return "deadline_infeasible";
  }
  return "unknown";
}

std::optional<OptionError> Options::Validate() const {
  if (!(unit_time_s > 0.0) || !std::isfinite(unit_time_s)) {
    return OptionError{"unit_time_s", Describe(unit_time_s), "must be a finite number > 0"};
  }
  if (!(p_static_w >= 0.0) || !std::isfinite(p_static_w)) {
    return OptionError{"p_static_w", Describe(p_static_w), "must be a finite number >= 0"};
  }
  if (max_steps < 0) return OptionError{"max_steps", Describe(max_steps), "must be >= 0 (0: no limit)"};
  if (!(deadline_s >= 0.0) || !std::isfinite(deadline_s)) {
    return OptionError{"deadline_s", Describe(deadline_s),
                       "must be a finite number >= 0 (0: the whole frontier)"};
  }
  return std::nullopt;
}

Evaluation Evaluate(const Problem& problem, const schedule::Dag& dag, const std::vector<int>& choice,
                    double p_static_w) {
  KAREUS_CHECK(choice.size() == dag.nodes.size()) << "one option per DAG node";
  return internal::EvaluateWith(problem, dag, choice, p_static_w);
}

Result Solve(const Problem& problem, const Options& options) {
  if (const std::string error = internal::Validate(problem, options); !error.empty()) {
    Result result;
    result.summary.status = Status::kInvalidInput;
    result.summary.message = error;
    return result;
  }
  schedule::Dag dag = schedule::BuildDag(problem.schedule, problem.num_stages, problem.num_microbatches);
  internal::Engine engine(problem, options, std::move(dag));
  return engine.Run();
}

}  // namespace kareus::pipeline

#pragma GCC diagnostic pop
