// SPDX-License-Identifier: Apache-2.0
// Phillips-Dessouky on an activity-on-arc graph (reference/perseus-lowtime-zeus.md §A2):
// start with every instruction at its slowest useful duration, and per step shorten the
// iteration by one time quantum at the least marginal cost: the minimum cut of the critical
// sub-DAG where an arc's upper capacity is the cost of shortening it by one quantum and its
// lower bound is the saving of lengthening it by one quantum (arcs crossing the cut backwards
// are lengthened). Costs are convex, so each step stays optimal for the convex model.
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

// Per (stage, kind): the quantized convex cost model and the real options.
struct Spec {
  int64_t q_min = 0;
  int64_t q_max = 0;
  std::vector<double> cost;   // cost[q - q_min]: lower convex hull, gpus * effective energy
  std::vector<int> realized;  // realized[q - q_min]: cheapest option whose quantum fits q
  std::vector<double> option_eff;  // gpus * (E - P t) of every option
  // Real-time front (time ascending, effective energy strictly descending) for reclaiming.
  std::vector<double> front_time;
  std::vector<double> front_eff;
  std::vector<int> front_option;
  double Cost(int64_t q) const { return cost[static_cast<std::size_t>(q - q_min)]; }
};

int64_t Quantize(double time_s, double unit_s) {
  // Round up so the quantized schedule never promises less time than the real options take;
  // the tolerance keeps 0.005 / 0.001 from becoming 6 quanta through representation error.
  return static_cast<int64_t>(std::ceil(time_s / unit_s - 1e-9));
}

Spec BuildSpec(const std::vector<Option>& options, int gpus, const Options& opts) {
  Spec spec;
  std::vector<pareto::Point> quantized;
  std::vector<pareto::Point> real;
  for (std::size_t i = 0; i < options.size(); ++i) {
    const double eff = gpus * (options[i].energy_j - opts.p_static_w * options[i].time_s);
    spec.option_eff.push_back(eff);
    quantized.push_back({.time_s = static_cast<double>(Quantize(options[i].time_s,
                                                                opts.unit_time_s)),
                         .energy_j = eff,
                         .payload = static_cast<int64_t>(i)});
    real.push_back({.time_s = options[i].time_s, .energy_j = eff, .payload = static_cast<int64_t>(i)});
  }
  const auto front = pareto::Filter(quantized);
  const auto hull = pareto::LowerConvexHull(front);
  spec.q_min = static_cast<int64_t>(front.front().time_s);
  spec.q_max = static_cast<int64_t>(front.back().time_s);
  const std::size_t range = static_cast<std::size_t>(spec.q_max - spec.q_min + 1);
  spec.cost.resize(range);
  spec.realized.resize(range);
  std::size_t segment = 0;
  std::size_t next_front = 0;
  int current_option = static_cast<int>(front.front().payload);
  for (int64_t q = spec.q_min; q <= spec.q_max; ++q) {
    while (segment + 1 < hull.size() - 1 && front[hull[segment + 1]].time_s <= q) ++segment;
    const pareto::Point& left = front[hull[segment]];
    if (hull.size() == 1) {
      spec.cost[q - spec.q_min] = left.energy_j;
    } else {
      const pareto::Point& right = front[hull[segment + 1]];
      const double w = (q - left.time_s) / (right.time_s - left.time_s);
      spec.cost[q - spec.q_min] = left.energy_j + w * (right.energy_j - left.energy_j);
    }
    while (next_front < front.size() && front[next_front].time_s <= q) {
      current_option = static_cast<int>(front[next_front].payload);
      ++next_front;
    }
    spec.realized[q - spec.q_min] = current_option;
  }
  for (const pareto::Point& p : pareto::Filter(real)) {
    spec.front_time.push_back(p.time_s);
    spec.front_eff.push_back(p.energy_j);
    spec.front_option.push_back(static_cast<int>(p.payload));
  }
  return spec;
}

int SyncNodesPerStage(const Problem& problem) {
  switch (problem.gradient_sync) {
    case schedule::GradientSync::kNone: return 0;
    case schedule::GradientSync::kAtEnd: return 1;
    case schedule::GradientSync::kOverlapped: return problem.num_chunks;
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
    return problem.gradient_sync_options[static_cast<std::size_t>(cls - 2 * units - problem.num_stages)];
  }
  if (cls >= 2 * units) return problem.last_backward_options[static_cast<std::size_t>(cls - 2 * units)];
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
      : problem_(problem), options_(options), dag_(std::move(dag)) {}

  Result Run();

 private:
  struct Arc {
    int from = 0;
    int to = 0;
    int64_t duration = 0;
    int activity = -1;  // AON node, or -1 for a fixed arc (dependency, P2P, source, sink)
  };

  const Spec& SpecOf(int node) const { return specs_[static_cast<std::size_t>(class_[node])]; }
  const Option& OptionOf(int node, int index) const {
    return ClassOptions(problem_, class_[node])[static_cast<std::size_t>(index)];
  }

  void BuildArcs();
  int64_t ComputeEventTimes();  // returns the makespan in quanta
  // One Phillips-Dessouky step. Returns false (with status_) when it cannot shorten.
  bool Step(int64_t makespan);
  std::vector<int> Realize() const;
  double RealMakespan(const std::vector<int>& choice) const;
  void Reclaim(std::vector<int>& choice, double deadline) const;
  IterationPoint MakePoint(std::vector<int> choice, int64_t step, int64_t quanta) const;

  const Problem& problem_;
  const Options& options_;
  Dag dag_;
  std::vector<Spec> specs_;   // per node class (empty for a class no node has)
  std::vector<int> class_;    // per node
  int num_events_ = 0;
  int source_ = 0;
  int sink_ = 0;
  std::vector<Arc> arcs_;
  std::vector<std::vector<int>> out_arcs_;
  std::vector<int> event_order_;
  std::vector<int64_t> earliest_;
  std::vector<int64_t> latest_;
  std::vector<int64_t> duration_;  // per AON node, in quanta
  // AON adjacency with P2P lags, for real-time evaluation and slack reclaiming.
  std::vector<std::vector<std::pair<int, double>>> preds_;
  std::vector<std::vector<std::pair<int, double>>> succs_;
  // Reused per step.
  std::vector<int> critical_;
  std::vector<int> vertex_of_;
  std::vector<double> lower_;
  std::vector<double> upper_;
  Status status_ = Status::kReachedMinimumTime;
  std::string message_;
  int64_t critical_edges_max_ = 0;
};

void Engine::BuildArcs() {
  const int n = static_cast<int>(dag_.nodes.size());
  num_events_ = 2 * n + 2;
  source_ = 2 * n;
  sink_ = 2 * n + 1;
  const int64_t p2p_q = problem_.p2p_time_s > 0 ? Quantize(problem_.p2p_time_s,
                                                           options_.unit_time_s)
                                                : 0;
  std::vector<int> indegree(n, 0);
  std::vector<int> outdegree(n, 0);
  preds_.assign(n, {});
  succs_.assign(n, {});
  for (int v = 0; v < n; ++v) arcs_.push_back({2 * v, 2 * v + 1, duration_[v], v});
  for (const DagEdge& e : dag_.edges) {
    arcs_.push_back({2 * e.from + 1, 2 * e.to, e.cross_stage ? p2p_q : 0, -1});
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
  for (int a = 0; a < static_cast<int>(arcs_.size()); ++a) out_arcs_[arcs_[a].from].push_back(a);
  event_order_.push_back(source_);
  for (int v : dag_.topological_order) {
    event_order_.push_back(2 * v);
    event_order_.push_back(2 * v + 1);
  }
  event_order_.push_back(sink_);
  earliest_.assign(num_events_, 0);
  latest_.assign(num_events_, 0);
  vertex_of_.assign(num_events_, -1);
}

int64_t Engine::ComputeEventTimes() {
  for (Arc& arc : arcs_) {
    if (arc.activity >= 0) arc.duration = duration_[arc.activity];
  }
  std::fill(earliest_.begin(), earliest_.end(), 0);
  for (int u : event_order_) {
    for (int a : out_arcs_[u]) {
      const Arc& arc = arcs_[a];
      earliest_[arc.to] = std::max(earliest_[arc.to], earliest_[u] + arc.duration);
    }
  }
  const int64_t makespan = earliest_[sink_];
  for (auto it = event_order_.rbegin(); it != event_order_.rend(); ++it) {
    int64_t latest = makespan;
    for (int a : out_arcs_[*it]) latest = std::min(latest, latest_[arcs_[a].to] - arcs_[a].duration);
    latest_[*it] = latest;
  }
  return makespan;
}

bool Engine::Step(int64_t makespan) {
  (void)makespan;
  // Critical sub-DAG: arcs with zero total float (exact integer test).
  critical_.clear();
  for (int a = 0; a < static_cast<int>(arcs_.size()); ++a) {
    const Arc& arc = arcs_[a];
    if (latest_[arc.to] - earliest_[arc.from] == arc.duration) critical_.push_back(a);
  }
  critical_edges_max_ = std::max<int64_t>(critical_edges_max_, critical_.size());
  int num_vertices = 0;
  for (int a : critical_) {
    for (int u : {arcs_[a].from, arcs_[a].to}) {
      if (vertex_of_[u] < 0) vertex_of_[u] = num_vertices++;
    }
  }
  // Capacities: upper = cost of shortening by one quantum (inf at the minimum or for fixed
  // arcs), lower = saving of lengthening by one quantum (0 at the maximum or for fixed arcs).
  lower_.assign(critical_.size(), 0.0);
  upper_.assign(critical_.size(), kInf);
  double finite_sum = 1.0;
  for (std::size_t i = 0; i < critical_.size(); ++i) {
    const Arc& arc = arcs_[critical_[i]];
    if (arc.activity < 0) continue;
    const Spec& spec = SpecOf(arc.activity);
    const int64_t d = arc.duration;
    if (d > spec.q_min) upper_[i] = spec.Cost(d - 1) - spec.Cost(d);
    if (d < spec.q_max) lower_[i] = spec.Cost(d) - spec.Cost(d + 1);
    lower_[i] = std::max(0.0, lower_[i]);
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
  std::vector<int> shorten;
  std::vector<int> lengthen;
  bool finite = !source_side[t];
  for (std::size_t i = 0; i < critical_.size() && finite; ++i) {
    const Arc& arc = arcs_[critical_[i]];
    const bool from_s = source_side[vertex_of_[arc.from]];
    const bool to_s = source_side[vertex_of_[arc.to]];
    if (from_s && !to_s) {
      if (!std::isfinite(upper_[i])) finite = false;
      shorten.push_back(arc.activity);
    } else if (!from_s && to_s && arc.activity >= 0 &&
               arc.duration < SpecOf(arc.activity).q_max) {
      lengthen.push_back(arc.activity);
    }
  }
  for (int a : critical_) {
    vertex_of_[arcs_[a].from] = -1;
    vertex_of_[arcs_[a].to] = -1;
  }
  if (!finite) {
    status_ = Status::kReachedMinimumTime;
    return false;
  }
  for (int v : shorten) --duration_[v];
  for (int v : lengthen) ++duration_[v];
  return true;
}

std::vector<int> Engine::Realize() const {
  std::vector<int> choice(dag_.nodes.size());
  for (std::size_t v = 0; v < choice.size(); ++v) {
    const Spec& spec = SpecOf(static_cast<int>(v));
    choice[v] = spec.realized[static_cast<std::size_t>(duration_[v] - spec.q_min)];
  }
  return choice;
}

double Engine::RealMakespan(const std::vector<int>& choice) const {
  std::vector<double> durations(dag_.nodes.size());
  for (std::size_t v = 0; v < durations.size(); ++v) durations[v] = OptionOf(static_cast<int>(v), choice[v]).time_s;
  return schedule::StartTimes(dag_, durations, problem_.p2p_time_s).makespan;
}

// Two passes that each keep the iteration within `deadline`: forward in topological order with
// latest finishes computed from the current durations (successors are still unchanged when a
// node is visited), then backward with earliest starts likewise. Each node takes the cheapest
// real option that fits its window.
void Engine::Reclaim(std::vector<int>& choice, double deadline) const {
  const std::size_t n = dag_.nodes.size();
  const double slack_tolerance = 1e-12 * std::max(1.0, deadline);
  auto cheapest_fitting = [&](int v, double window) {
    const Spec& spec = SpecOf(v);
    const auto it = std::upper_bound(spec.front_time.begin(), spec.front_time.end(),
                                     window + slack_tolerance);
    if (it == spec.front_time.begin()) return;
    const std::size_t j = static_cast<std::size_t>(it - spec.front_time.begin()) - 1;
    if (spec.front_eff[j] < spec.option_eff[choice[v]]) choice[v] = spec.front_option[j];
  };
  std::vector<double> start(n, 0.0);
  std::vector<double> finish(n, 0.0);
  // Forward pass.
  for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
    double latest = deadline;
    for (auto [w, lag] : succs_[*it]) latest = std::min(latest, finish[w] - OptionOf(w, choice[w]).time_s - lag);
    finish[*it] = latest;  // latest finish
  }
  std::vector<double> latest_finish = finish;
  for (int v : dag_.topological_order) {
    double es = 0.0;
    for (auto [p, lag] : preds_[v]) es = std::max(es, finish[p] + lag);
    cheapest_fitting(v, latest_finish[v] - es);
    finish[v] = es + OptionOf(v, choice[v]).time_s;
  }
  // Backward pass.
  for (int v : dag_.topological_order) {
    double es = 0.0;
    for (auto [p, lag] : preds_[v]) es = std::max(es, start[p] + OptionOf(p, choice[p]).time_s + lag);
    start[v] = es;  // earliest start
  }
  std::vector<double> latest_start(n, 0.0);
  for (auto it = dag_.topological_order.rbegin(); it != dag_.topological_order.rend(); ++it) {
    const int v = *it;
    double lf = deadline;
    for (auto [w, lag] : succs_[v]) lf = std::min(lf, latest_start[w] - lag);
    cheapest_fitting(v, lf - start[v]);
    latest_start[v] = lf - OptionOf(v, choice[v]).time_s;
  }
}

IterationPoint Engine::MakePoint(std::vector<int> choice, int64_t step, int64_t quanta) const {
  if (options_.reclaim_slack) Reclaim(choice, RealMakespan(choice));
  IterationPoint point;
  point.cost = EvaluateWith(problem_, dag_, choice, options_.p_static_w);
  point.step = step;
  point.quanta = quanta;
  point.choice = std::move(choice);
  return point;
}

Result Engine::Run() {
  Result result;
  Summary& summary = result.summary;
  const int num_stages = problem_.num_stages;
  const int n = static_cast<int>(dag_.nodes.size());
  class_.resize(n);
  std::vector<char> used(static_cast<std::size_t>(NumClasses(problem_)), 0);
  for (int v = 0; v < n; ++v) {
    class_[v] = ClassOf(problem_, dag_, v);
    used[static_cast<std::size_t>(class_[v])] = 1;
  }
  specs_.resize(used.size());
  for (int cls = 0; cls < static_cast<int>(used.size()); ++cls) {
    if (!used[static_cast<std::size_t>(cls)]) continue;
    const int stage = StageOfClass(problem_, cls);
    const int gpus = problem_.gpus_per_stage.empty() ? 1 : problem_.gpus_per_stage[stage];
    specs_[static_cast<std::size_t>(cls)] = BuildSpec(ClassOptions(problem_, cls), gpus, options_);
  }
  // Bounds: every instruction at its fastest, then at its slowest useful (cheapest) duration.
  duration_.assign(n, 0);
  for (int v = 0; v < n; ++v) duration_[v] = SpecOf(v).q_min;
  BuildArcs();
  summary.quanta_fastest = ComputeEventTimes();
  std::vector<int> fastest(n);
  for (int v = 0; v < n; ++v) fastest[v] = SpecOf(v).front_option.front();
  summary.min_time_s = RealMakespan(fastest);
  for (int v = 0; v < n; ++v) duration_[v] = SpecOf(v).q_max;
  int64_t makespan = ComputeEventTimes();
  summary.quanta_slowest = makespan;

  double model = 0.0;
  for (int v = 0; v < n; ++v) model += SpecOf(v).Cost(duration_[v]);
  std::vector<IterationPoint> raw;
  auto record = [&](int64_t step) {
    double model_energy = 0.0;
    for (int v = 0; v < n; ++v) model_energy += SpecOf(v).Cost(duration_[v]);
    IterationPoint point = MakePoint(Realize(), step, makespan);
    double gpus_total = 0.0;
    for (int s = 0; s < num_stages; ++s) {
      gpus_total += problem_.gpus_per_stage.empty() ? 1 : problem_.gpus_per_stage[s];
    }
    point.model_energy_j =
        model_energy + options_.p_static_w * gpus_total * makespan * options_.unit_time_s;
    raw.push_back(std::move(point));
  };
  record(0);
  status_ = Status::kReachedMinimumTime;
  int64_t step = 0;
  while (makespan > summary.quanta_fastest) {
    if (options_.max_steps > 0 && step >= options_.max_steps) {
      status_ = Status::kStepLimit;
      break;
    }
    if (!Step(makespan)) {
      if (status_ == Status::kReachedMinimumTime) {
        status_ = Status::kStalled;
        message_ = "no finite cut above the fastest iteration time";
      }
      break;
    }
    const int64_t next = ComputeEventTimes();
    ++step;
    if (next >= makespan) {
      status_ = Status::kStalled;
      message_ = "step " + std::to_string(step) + " did not shorten the iteration";
      break;
    }
    makespan = next;
    record(step);
  }
  summary.status = status_;
  summary.message = message_;
  summary.steps = step;
  summary.critical_edges_max = critical_edges_max_;
  // The fastest schedule, reached directly (quantization can leave the last step's realized
  // options above the true minimum), with its slack reclaimed.
  raw.push_back(MakePoint(fastest, -1, summary.quanta_fastest));
  raw.back().model_energy_j = raw.back().cost.energy_j;

  if (options_.keep_dominated) {
    result.points = std::move(raw);
  } else {
    std::vector<pareto::Point> points;
    for (std::size_t i = 0; i < raw.size(); ++i) {
      points.push_back({.time_s = raw[i].cost.time_s,
                        .energy_j = raw[i].cost.energy_j,
                        .payload = static_cast<int64_t>(i)});
    }
    const auto front = pareto::Filter(points);
    for (auto it = front.rbegin(); it != front.rend(); ++it) {
      result.points.push_back(std::move(raw[static_cast<std::size_t>(it->payload)]));
    }
    summary.points_dominated = static_cast<int64_t>(raw.size() - front.size());
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
      return what + " option with time_s = " + std::to_string(o.time_s) + ", energy_j = " +
             std::to_string(o.energy_j) + ": time must be > 0 and energy >= 0, finite";
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
    return "gradient_sync_options need " + std::to_string(syncs) + " list(s) per stage for this "
           "gradient sync (" + std::to_string(stages * syncs) + " in all)";
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
  for (int u = 0; u < units; ++u) {
    const std::string where = problem.num_chunks == 1
                                  ? "stage " + std::to_string(u)
                                  : "stage " + std::to_string(u / problem.num_chunks) + " chunk " +
                                        std::to_string(u % problem.num_chunks);
    if (std::string error = CheckOptions(problem.forward_options[u], where, "forward", options); !error.empty()) return error;
    if (std::string error = CheckOptions(problem.backward_options[u], where, "backward", options); !error.empty()) return error;
  }
  for (int s = 0; s < static_cast<int>(problem.last_backward_options.size()); ++s) {
    if (std::string error = CheckOptions(problem.last_backward_options[s], "stage " + std::to_string(s),
                                         "last backward", options);
        !error.empty()) {
      return error;
    }
  }
  for (int i = 0; i < static_cast<int>(problem.gradient_sync_options.size()); ++i) {
    const std::string where = "stage " + std::to_string(i / std::max(syncs, 1)) +
                              (i % std::max(syncs, 1) == 0 ? std::string() : " chunk " + std::to_string(i % syncs));
    if (std::string error = CheckOptions(problem.gradient_sync_options[i], where, "gradient sync", options);
        !error.empty()) {
      return error;
    }
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
  return std::nullopt;
}

const std::vector<Option>& OptionsOf(const Problem& problem, const schedule::Dag& dag, int node) {
  return internal::ClassOptions(problem, internal::ClassOf(problem, dag, node));
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
  schedule::Dag dag = schedule::BuildDag(problem.schedule, problem.num_stages, problem.num_microbatches,
                                         problem.num_chunks, problem.gradient_sync);
  internal::Engine engine(problem, options, std::move(dag));
  return engine.Run();
}

}  // namespace kareus::pipeline

#pragma GCC diagnostic pop
