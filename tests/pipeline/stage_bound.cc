// SPDX-License-Identifier: Apache-2.0
#include "pipeline/stage_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kareus/pareto/pareto.h"
#include "pipeline/dag_paths.h"

namespace kareus::pipeline::testing {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One option of a node on the grid: `units` = its duration rounded DOWN to the grid (a plan's
// real schedule, its start times rounded down too, stays feasible in the grid's program).
struct GridOption {
  double time_s = 0.0;
  double cost_j = 0.0;  // effective energy, all the stage's GPUs: gpus * (E - P t)
  int units = 0;
};

struct Relaxation {
  int n = 0;
  double delta = 0.0;
  std::vector<std::vector<GridOption>> options;  // per node: its Pareto front (time, cost)
  std::vector<int> earliest_units;       // per node: earliest start (all fastest), rounded down
  std::vector<int> latest_units;         // per node: latest finish (all fastest), rounded up-safe
  std::vector<std::vector<int>> chains;  // same-stage chains, in order
  std::vector<int> cross;                // indices of the cross-stage edges in dag.edges
  double static_j = 0.0;                 // P * T * GPUs
  bool on_grid = true;  // every duration, the P2P time and the deadline on the grid
};

// True when `time_s` is a whole number of grid steps (to 1e-9 of a step).
bool OnGrid(double time_s, double delta) {
  const double units = time_s / delta;
  return std::abs(units - std::round(units)) <= 1e-9 * std::max(1.0, units);
}

// The chain program of one stage for per-node coefficients: node v pays cost_j + d[v] * time_s
// for its option and c[v] * delta * start_units for its start. Returns the least total and
// writes every node's option (index into options[v]) and start (units).
double SolveChain(const Relaxation& r, const std::vector<int>& chain, const std::vector<double>& c,
                  const std::vector<double>& d, std::vector<int>& option, std::vector<int>& start) {
  struct Layer {
    int lo = 0;                    // finish of the first entry
    std::vector<double> best;      // least cost with finish <= lo + i (prefix minimum)
    std::vector<int> best_finish;  // the finish achieving it
    std::vector<int> arg_option;   // per exact finish: the option and start achieving f
    std::vector<int> arg_start;
  };
  std::vector<Layer> layers(chain.size());
  for (std::size_t k = 0; k < chain.size(); ++k) {
    const int v = chain[k];
    const Layer* prev = k == 0 ? nullptr : &layers[k - 1];
    Layer& layer = layers[k];
    int min_units = std::numeric_limits<int>::max();
    for (const GridOption& o : r.options[v]) min_units = std::min(min_units, o.units);
    const int s_lo = std::max(r.earliest_units[v], prev == nullptr ? 0 : prev->lo);
    layer.lo = s_lo + min_units;
    const int hi = r.latest_units[v];
    if (hi < layer.lo) return kInf;
    const std::size_t width = static_cast<std::size_t>(hi - layer.lo + 1);
    std::vector<double> f(width, kInf);
    layer.arg_option.assign(width, -1);
    layer.arg_start.assign(width, -1);
    const double slope = c[v] * r.delta;
    for (std::size_t j = 0; j < r.options[v].size(); ++j) {
      const GridOption& o = r.options[v][j];
      const double base = o.cost_j + d[v] * o.time_s;
      for (int s = s_lo; s + o.units <= hi; ++s) {
        double g = 0.0;
        if (prev != nullptr) {
          const int idx = std::min(s - prev->lo, static_cast<int>(prev->best.size()) - 1);
          g = prev->best[static_cast<std::size_t>(idx)];
        }
        const double value = g + base + slope * s;
        const std::size_t at = static_cast<std::size_t>(s + o.units - layer.lo);
        if (value < f[at]) {
          f[at] = value;
          layer.arg_option[at] = static_cast<int>(j);
          layer.arg_start[at] = s;
        }
      }
    }
    layer.best.resize(width);
    layer.best_finish.resize(width);
    double run = kInf;
    int run_at = -1;
    for (std::size_t i = 0; i < width; ++i) {
      if (f[i] < run) {
        run = f[i];
        run_at = layer.lo + static_cast<int>(i);
      }
      layer.best[i] = run;
      layer.best_finish[i] = run_at;
    }
  }
  const Layer& last = layers.back();
  const double total = last.best.back();
  if (!std::isfinite(total)) return kInf;
  int finish = last.best_finish.back();
  for (std::size_t k = chain.size(); k-- > 0;) {
    const Layer& layer = layers[k];
    const std::size_t at = static_cast<std::size_t>(finish - layer.lo);
    const int v = chain[k];
    option[v] = layer.arg_option[at];
    start[v] = layer.arg_start[at];
    if (k > 0) {
      const Layer& prev = layers[k - 1];
      const int idx = std::min(start[v] - prev.lo, static_cast<int>(prev.best.size()) - 1);
      finish = prev.best_finish[static_cast<std::size_t>(idx)];
    }
  }
  return total;
}

}  // namespace

std::optional<StageBound> StageLagrangianBound(const Problem& problem, const schedule::Dag& dag,
                                               double deadline_s, double p_static_w,
                                               const StageBoundOptions& options) {
  Relaxation r;
  r.n = static_cast<int>(dag.nodes.size());
  r.delta = options.resolution_s;
  const double p2p = problem.p2p_time_s;
  auto gpus = [&](int stage) {
    return problem.gpus_per_stage.empty() ? 1
                                          : problem.gpus_per_stage[static_cast<std::size_t>(stage)];
  };
  double gpus_total = 0.0;
  for (int s = 0; s < problem.num_stages; ++s) gpus_total += gpus(s);
  r.static_j = p_static_w * deadline_s * gpus_total;
  r.on_grid = OnGrid(p2p, r.delta) && OnGrid(deadline_s, r.delta);

  // Options: the Pareto front of (time, effective energy); a slower and costlier option never
  // helps (it only lengthens the chain and costs more under any multipliers).
  r.options.resize(static_cast<std::size_t>(r.n));
  std::vector<double> fastest(static_cast<std::size_t>(r.n));
  for (int v = 0; v < r.n; ++v) {
    const auto& list = OptionsOf(problem, dag, v);
    const int g = gpus(dag.nodes[static_cast<std::size_t>(v)].stage);
    std::vector<pareto::Point> points;
    for (const Alternative& o : list)
      points.push_back({.time_s = o.time_s, .energy_j = g * (o.energy_j - p_static_w * o.time_s)});
    for (const pareto::Point& p : pareto::Filter(points)) {
      // Rounded down (a duration on the grid keeps its units; 1e-9 units of floating error).
      const int units = std::max(0, static_cast<int>(std::floor(p.time_s / r.delta + 1e-9)));
      r.on_grid = r.on_grid && OnGrid(p.time_s, r.delta);
      r.options[static_cast<std::size_t>(v)].push_back(
          {.time_s = p.time_s, .cost_j = p.energy_j, .units = units});
    }
    fastest[static_cast<std::size_t>(v)] =
        std::min_element(list.begin(), list.end(), [](const Alternative& a, const Alternative& b) {
          return a.time_s < b.time_s;
        })->time_s;
  }
  // Windows every plan within the deadline respects: a node starts no earlier than the longest
  // all-fastest path into it and finishes no later than the deadline minus the longest
  // all-fastest path out of it.
  const schedule::Timing timing = schedule::StartTimes(dag, fastest, p2p);
  const std::vector<double> tail = LongestTails(dag, fastest, p2p);
  r.earliest_units.resize(static_cast<std::size_t>(r.n));
  r.latest_units.resize(static_cast<std::size_t>(r.n));
  const double slack_tol = 1e-9 * deadline_s;
  for (int v = 0; v < r.n; ++v) {
    const auto i = static_cast<std::size_t>(v);
    const double latest = deadline_s - tail[i];
    if (timing.start[i] + fastest[i] > latest + slack_tol) return std::nullopt;
    r.earliest_units[i] =
        std::max(0, static_cast<int>(std::floor(timing.start[i] / r.delta + 1e-9)));
    r.latest_units[i] = static_cast<int>(std::floor(latest / r.delta + 1e-9));
  }
  // Chains of same-stage edges (heads in node order), and the cross-stage edges.
  std::vector<int> nodes(static_cast<std::size_t>(r.n));
  std::iota(nodes.begin(), nodes.end(), 0);
  auto chains = SameStageChains(dag, nodes);
  if (!chains) return std::nullopt;
  r.chains = std::move(*chains);
  for (std::size_t e = 0; e < dag.edges.size(); ++e) {
    if (dag.edges[e].cross_stage) r.cross.push_back(static_cast<int>(e));
  }

  // Multipliers on the cross-stage edges; the Lagrangian of `mu` and its subgradient.
  std::vector<double> mu(r.cross.size(), 0.0);
  if (!options.multipliers.empty()) {
    for (std::size_t i = 0; i < r.cross.size(); ++i)
      mu[i] = std::max(0.0, options.multipliers[static_cast<std::size_t>(r.cross[i])]);
  }
  std::vector<double> c(static_cast<std::size_t>(r.n));
  std::vector<double> d(static_cast<std::size_t>(r.n));
  std::vector<int> option(static_cast<std::size_t>(r.n));
  std::vector<int> start(static_cast<std::size_t>(r.n));
  std::vector<double> grad(r.cross.size());
  auto evaluate = [&](const std::vector<double>& m) {
    std::fill(c.begin(), c.end(), 0.0);
    std::fill(d.begin(), d.end(), 0.0);
    double value = r.static_j;
    for (std::size_t i = 0; i < r.cross.size(); ++i) {
      const schedule::DagEdge& e = dag.edges[static_cast<std::size_t>(r.cross[i])];
      // mu * (S_from + t_from + p2p - S_to) <= 0 for every feasible plan.
      c[static_cast<std::size_t>(e.from)] += m[i];
      d[static_cast<std::size_t>(e.from)] += m[i];
      c[static_cast<std::size_t>(e.to)] -= m[i];
      value += m[i] * p2p;
    }
    for (const std::vector<int>& chain : r.chains)
      value += SolveChain(r, chain, c, d, option, start);
    // Rounding starts down changes c * S by at most delta * |c| where c < 0. With every time on
    // the grid nothing is rounded: for fixed options the best real starts solve a difference-
    // constraint LP (totally unimodular) with grid data, so some best starts are on the grid.
    if (!r.on_grid) {
      for (int v = 0; v < r.n; ++v)
        value += std::min(0.0, c[static_cast<std::size_t>(v)]) * r.delta;
    }
    if (!std::isfinite(value)) return value;
    for (std::size_t i = 0; i < r.cross.size(); ++i) {
      const schedule::DagEdge& e = dag.edges[static_cast<std::size_t>(r.cross[i])];
      const auto u = static_cast<std::size_t>(e.from);
      const auto w = static_cast<std::size_t>(e.to);
      grad[i] = r.delta * start[u] + r.options[u][static_cast<std::size_t>(option[u])].time_s +
                p2p - r.delta * start[w];
    }
    return value;
  };

  StageBound bound;
  bound.start_energy_j = evaluate(mu);
  if (!std::isfinite(bound.start_energy_j)) return std::nullopt;
  bound.energy_j = bound.start_energy_j;
  double theta = 1.0;
  int since_best = 0;
  for (int it = 0; it < options.iterations; ++it) {
    double norm2 = 0.0;
    for (std::size_t i = 0; i < grad.size(); ++i) {
      if (mu[i] <= 0.0 && grad[i] < 0.0) continue;  // the projection keeps it at zero
      norm2 += grad[i] * grad[i];
    }
    if (norm2 <= 0.0) break;  // the relaxed plan meets every cross-stage edge: optimal
    // Polyak's step towards a target a twentieth of the way to the known plan: the dual optimum
    // lies far below that plan (a full step overshoots and the bound never rises).
    const double target = 0.05 * (options.upper_bound_j - bound.energy_j);
    const double step = theta * std::max(target, 1e-9 * bound.energy_j) / norm2;
    for (std::size_t i = 0; i < mu.size(); ++i) mu[i] = std::max(0.0, mu[i] + step * grad[i]);
    const double value = evaluate(mu);
    ++bound.iterations;
    if (value > bound.energy_j) {
      bound.energy_j = value;
      since_best = 0;
    } else if (++since_best >= 10) {
      theta *= 0.5;
      since_best = 0;
    }
  }
  return bound;
}

}  // namespace kareus::pipeline::testing
