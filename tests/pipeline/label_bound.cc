// SPDX-License-Identifier: Apache-2.0
#include "pipeline/label_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "pipeline/dag_paths.h"

namespace kareus::pipeline::testing {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Rounded down to the grid (1e-9 of a step absorbs floating-point error of on-grid values).
int64_t Units(double time_s, double delta) {
  return std::max<int64_t>(0, static_cast<int64_t>(std::floor(time_s / delta + 1e-9)));
}

struct NodeOption {
  int index = 0;      // into OptionsOf
  int64_t units = 0;  // duration on the grid (rounded down)
  double time_s = 0.0;
  double cost_j = 0.0;  // effective energy, all the stage's GPUs
};

// One layer of labels (after the first k nodes): frontier finish times (stride = frontier size),
// energy so far, and how each label was made (its parent in the previous layer, the option).
struct Layer {
  std::vector<int> frontier;
  std::vector<int64_t> finish;
  std::vector<double> cost;
  std::vector<int> parent;
  std::vector<int> option;
  std::size_t size() const { return option.size(); }
};

// Which inserted points finish no later than a point in every compared slot: a k-d tree over
// all of a layer's candidates (built once), with per-subtree counts of inserted points and
// bounding boxes, so a query skips subtrees that are empty or lie beyond the point.
class DominanceIndex {
 public:
  DominanceIndex(const std::vector<int64_t>& finish, std::size_t count, std::size_t width,
                 const std::vector<std::size_t>& slots)
      : finish_(finish), width_(width), slots_(slots), dims_(slots.size()) {
    perm_.resize(count);
    std::iota(perm_.begin(), perm_.end(), 0);
    leaf_of_.assign(count, -1);
    inserted_.assign(count, 0);
    if (count > 0 && dims_ > 0) Build(0, count, -1);
  }

  bool Dominated(std::size_t point) {
    if (nodes_.empty()) return false;
    for (std::size_t i = 0; i < dims_; ++i) query_[i] = At(point, i);
    stack_.assign(1, 0);
    while (!stack_.empty()) {
      const auto id = static_cast<std::size_t>(stack_.back());
      stack_.pop_back();
      const Node& node = nodes_[id];
      if (node.inserted == 0) continue;
      const int64_t* low = box_.data() + 2 * id * dims_;
      const int64_t* high = low + dims_;
      bool reachable = true;  // some point of the box could be <= the query
      bool inside = true;     // every point of the box is <= the query
      for (std::size_t i = 0; i < dims_; ++i) {
        reachable = reachable && low[i] <= query_[i];
        inside = inside && high[i] <= query_[i];
      }
      if (!reachable) continue;
      if (inside) return true;
      if (node.left < 0) {
        for (std::size_t k = node.begin; k < node.end; ++k) {
          const std::size_t q = perm_[k];
          if (inserted_[q] == 0) continue;
          bool le = true;
          for (std::size_t i = 0; i < dims_ && le; ++i) le = At(q, i) <= query_[i];
          if (le) return true;
        }
        continue;
      }
      stack_.push_back(node.right);
      stack_.push_back(node.left);  // the earlier half first: more likely to hold a dominator
    }
    return false;
  }

  void Insert(std::size_t point) {
    inserted_[point] = 1;
    for (int node = leaf_of_[point]; node >= 0;
         node = nodes_[static_cast<std::size_t>(node)].parent) {
      ++nodes_[static_cast<std::size_t>(node)].inserted;
    }
  }

 private:
  struct Node {
    std::size_t begin = 0;
    std::size_t end = 0;
    int left = -1;
    int right = -1;
    int parent = -1;
    int64_t inserted = 0;
  };

  int64_t At(std::size_t point, std::size_t i) const { return finish_[point * width_ + slots_[i]]; }

  int Build(std::size_t begin, std::size_t end, int parent) {
    const int id = static_cast<int>(nodes_.size());
    nodes_.push_back({.begin = begin, .end = end, .parent = parent});
    const std::size_t at = box_.size();
    box_.resize(at + 2 * dims_);
    int64_t* low = box_.data() + at;
    int64_t* high = low + dims_;
    std::fill(low, low + dims_, std::numeric_limits<int64_t>::max());
    std::fill(high, high + dims_, std::numeric_limits<int64_t>::min());
    for (std::size_t k = begin; k < end; ++k) {
      for (std::size_t i = 0; i < dims_; ++i) {
        low[i] = std::min(low[i], At(perm_[k], i));
        high[i] = std::max(high[i], At(perm_[k], i));
      }
    }
    std::size_t split = 0;
    for (std::size_t i = 1; i < dims_; ++i) {
      if (high[i] - low[i] > high[split] - low[split]) split = i;
    }
    if (end - begin <= 8 || high[split] == low[split]) {
      for (std::size_t k = begin; k < end; ++k) leaf_of_[perm_[k]] = id;
      return id;
    }
    const std::size_t mid = begin + (end - begin) / 2;
    std::nth_element(perm_.begin() + static_cast<std::ptrdiff_t>(begin),
                     perm_.begin() + static_cast<std::ptrdiff_t>(mid),
                     perm_.begin() + static_cast<std::ptrdiff_t>(end),
                     [&](std::size_t a, std::size_t b) { return At(a, split) < At(b, split); });
    const int left = Build(begin, mid, id);
    const int right = Build(mid, end, id);
    nodes_[static_cast<std::size_t>(id)].left = left;
    nodes_[static_cast<std::size_t>(id)].right = right;
    return id;
  }

  const std::vector<int64_t>& finish_;
  std::size_t width_;
  const std::vector<std::size_t>& slots_;
  std::size_t dims_;
  std::vector<std::size_t> perm_;
  std::vector<int> leaf_of_;
  std::vector<char> inserted_;
  std::vector<Node> nodes_;
  std::vector<int64_t> box_;  // per node: low corner, then high corner (dims_ each)
  std::vector<int64_t> query_ = std::vector<int64_t>(dims_);
  std::vector<int> stack_;
};

}  // namespace

std::optional<LabelBound> LabelSettingBound(const Problem& problem, const schedule::Dag& dag,
                                            double deadline_s, double p_static_w,
                                            const LabelBoundOptions& options) {
  const int n = static_cast<int>(dag.nodes.size());
  const double delta = options.resolution_s;
  auto gpus = [&](int stage) {
    return problem.gpus_per_stage.empty() ? 1
                                          : problem.gpus_per_stage[static_cast<std::size_t>(stage)];
  };
  double gpus_total = 0.0;
  for (int s = 0; s < problem.num_stages; ++s) gpus_total += gpus(s);
  const double static_j = p_static_w * deadline_s * gpus_total;
  const double budget = options.threshold_j - static_j;  // effective energy to stay under
  const int64_t p2p = Units(problem.p2p_time_s, delta);
  const int64_t deadline = Units(deadline_s, delta);

  // Options: the front of (time, effective energy); a slower and costlier option is never needed
  // (the faster, cheaper one keeps every schedule feasible).
  std::vector<std::vector<NodeOption>> opts(static_cast<std::size_t>(n));
  std::vector<int64_t> fastest(static_cast<std::size_t>(n), std::numeric_limits<int64_t>::max());
  for (int v = 0; v < n; ++v) {
    const auto& list = OptionsOf(problem, dag, v);
    const int g = gpus(dag.nodes[static_cast<std::size_t>(v)].stage);
    auto& out = opts[static_cast<std::size_t>(v)];
    for (std::size_t j = 0; j < list.size(); ++j) {
      const double cost = g * (list[j].energy_j - p_static_w * list[j].time_s);
      bool dominated = false;
      for (std::size_t k = 0; k < list.size() && !dominated; ++k) {
        const double other = g * (list[k].energy_j - p_static_w * list[k].time_s);
        const bool no_worse = list[k].time_s <= list[j].time_s && other <= cost;
        const bool better = list[k].time_s < list[j].time_s || other < cost;
        dominated = no_worse && (better || k < j);  // equal options: keep the first
      }
      if (dominated) continue;
      out.push_back({.index = static_cast<int>(j),
                     .units = Units(list[j].time_s, delta),
                     .time_s = list[j].time_s,
                     .cost_j = cost});
      fastest[static_cast<std::size_t>(v)] =
          std::min(fastest[static_cast<std::size_t>(v)], out.back().units);
    }
  }
  std::vector<std::vector<std::pair<int, int64_t>>> pred(static_cast<std::size_t>(n));
  std::vector<std::vector<std::pair<int, int64_t>>> succ(static_cast<std::size_t>(n));
  for (const schedule::DagEdge& e : dag.edges) {
    const int64_t lag = e.cross_stage ? p2p : 0;
    pred[static_cast<std::size_t>(e.to)].push_back({e.from, lag});
    succ[static_cast<std::size_t>(e.from)].push_back({e.to, lag});
  }
  // Windows of the grid program: earliest start (all fastest), latest finish.
  std::vector<int64_t> earliest(static_cast<std::size_t>(n), 0);
  for (int v : dag.topological_order) {
    for (const auto& [u, lag] : pred[static_cast<std::size_t>(v)]) {
      earliest[static_cast<std::size_t>(v)] = std::max(
          earliest[static_cast<std::size_t>(v)],
          earliest[static_cast<std::size_t>(u)] + fastest[static_cast<std::size_t>(u)] + lag);
    }
  }
  const std::vector<int64_t> tail = LongestTails(dag, fastest, p2p);
  std::vector<int64_t> latest(static_cast<std::size_t>(n));
  for (int v = 0; v < n; ++v) {
    const auto i = static_cast<std::size_t>(v);
    latest[i] = deadline - tail[i];
    if (earliest[i] + fastest[i] > latest[i]) return std::nullopt;
  }

  // Processing order: by earliest start, then stage (a topological order: an edge's head starts
  // after its tail's earliest finish, and zero-duration nodes keep the DAG's order).
  std::vector<int> topo_pos(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k)
    topo_pos[static_cast<std::size_t>(dag.topological_order[static_cast<std::size_t>(k)])] = k;
  std::vector<int> order = dag.topological_order;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const auto ia = static_cast<std::size_t>(a), ib = static_cast<std::size_t>(b);
    if (earliest[ia] != earliest[ib]) return earliest[ia] < earliest[ib];
    return topo_pos[ia] < topo_pos[ib];
  });
  std::vector<int> pos(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k) pos[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])] = k;
  for (const schedule::DagEdge& e : dag.edges) {
    if (pos[static_cast<std::size_t>(e.from)] >= pos[static_cast<std::size_t>(e.to)])
      return std::nullopt;
  }
  std::vector<int> last_use(static_cast<std::size_t>(n), -1);
  for (int v = 0; v < n; ++v) {
    for (const auto& [w, lag] : succ[static_cast<std::size_t>(v)])
      last_use[static_cast<std::size_t>(v)] =
          std::max(last_use[static_cast<std::size_t>(v)], pos[static_cast<std::size_t>(w)]);
  }

  // Stage chains (same-stage edges), heads in processing order.
  auto found_chains = SameStageChains(dag, order);
  if (!found_chains) return std::nullopt;
  const std::vector<std::vector<int>> chains = std::move(*found_chains);
  std::vector<int> chain_of(static_cast<std::size_t>(n)),
      index_in_chain(static_cast<std::size_t>(n));
  for (std::size_t ci = 0; ci < chains.size(); ++ci) {
    for (std::size_t k = 0; k < chains[ci].size(); ++k) {
      chain_of[static_cast<std::size_t>(chains[ci][k])] = static_cast<int>(ci);
      index_in_chain[static_cast<std::size_t>(chains[ci][k])] = static_cast<int>(k);
    }
  }

  // Lagrangian coefficients of the cross-stage edges: mu_e * delta * (S_u + U_u + p - S_w) <= 0.
  std::vector<double> mu(dag.edges.size(), 0.0);
  std::vector<double> c(static_cast<std::size_t>(n), 0.0);  // per unit of start time
  std::vector<double> d(static_cast<std::size_t>(n), 0.0);  // per unit of duration
  for (std::size_t e = 0; e < dag.edges.size(); ++e) {
    if (!dag.edges[e].cross_stage || options.multipliers.empty()) continue;
    mu[e] = std::max(0.0, options.multipliers[e]) * delta;
    c[static_cast<std::size_t>(dag.edges[e].from)] += mu[e];
    d[static_cast<std::size_t>(dag.edges[e].from)] += mu[e];
    c[static_cast<std::size_t>(dag.edges[e].to)] -= mu[e];
  }
  // rest[k][t - earliest]: least Lagrangian cost of chain nodes k.. of a chain when node k starts
  // no earlier than t (t within node k's window; earlier t = its earliest start).
  std::vector<std::vector<std::vector<double>>> rest(chains.size());
  for (std::size_t ci = 0; ci < chains.size(); ++ci) {
    const std::vector<int>& chain = chains[ci];
    rest[ci].resize(chain.size());
    for (std::size_t k = chain.size(); k-- > 0;) {
      const auto v = static_cast<std::size_t>(chain[k]);
      const int64_t lo = earliest[v], hi = latest[v];
      std::vector<double> g(static_cast<std::size_t>(hi - lo + 1), kInf);
      for (int64_t t = hi; t >= lo; --t) {
        double best = t < hi ? g[static_cast<std::size_t>(t + 1 - lo)] : kInf;
        for (const NodeOption& o : opts[v]) {
          const int64_t f = t + o.units;
          if (f > hi) continue;
          double after = 0.0;
          if (k + 1 < chain.size()) {
            const auto w = static_cast<std::size_t>(chain[k + 1]);
            if (f > latest[w]) continue;
            after =
                rest[ci][k + 1][static_cast<std::size_t>(std::max(f, earliest[w]) - earliest[w])];
          }
          best = std::min(best, o.cost_j + d[v] * static_cast<double>(o.units) +
                                    c[v] * static_cast<double>(t) + after);
        }
        g[static_cast<std::size_t>(t - lo)] = best;
      }
      rest[ci][k] = std::move(g);
    }
  }
  auto chain_rest = [&](std::size_t ci, std::size_t k, int64_t t) {
    if (k >= chains[ci].size()) return 0.0;
    const auto v = static_cast<std::size_t>(chains[ci][k]);
    if (t > latest[v]) return kInf;
    return rest[ci][k][static_cast<std::size_t>(std::max(t, earliest[v]) - earliest[v])];
  };
  double p2p_terms = 0.0;  // mu * p of the edges not yet satisfied (all, at the root)
  for (std::size_t e = 0; e < dag.edges.size(); ++e) p2p_terms += mu[e] * static_cast<double>(p2p);

  LabelBound answer;
  answer.root_bound_j = static_j + p2p_terms;
  for (std::size_t ci = 0; ci < chains.size(); ++ci) answer.root_bound_j += chain_rest(ci, 0, 0);

  std::vector<Layer> layers(1);
  layers[0].cost.push_back(0.0);
  layers[0].parent.push_back(-1);
  layers[0].option.push_back(-1);
  std::vector<int> next_in_chain(chains.size(), 0);  // chain position of the next unprocessed node
  for (int k = 0; k < n; ++k) {
    const int v = order[static_cast<std::size_t>(k)];
    const auto vi = static_cast<std::size_t>(v);
    const Layer& from = layers.back();
    const std::size_t width = from.frontier.size();
    Layer to;
    std::vector<std::size_t> kept_slots;  // frontier slots of `from` that stay
    for (std::size_t i = 0; i < width; ++i) {
      if (last_use[static_cast<std::size_t>(from.frontier[i])] > k) {
        to.frontier.push_back(from.frontier[i]);
        kept_slots.push_back(i);
      }
    }
    const bool stays = last_use[vi] > k;
    if (stays) to.frontier.push_back(v);
    const std::size_t out_width = to.frontier.size();
    std::vector<std::pair<std::size_t, int64_t>> pred_slots;
    for (const auto& [u, lag] : pred[vi]) {
      const auto it = std::find(from.frontier.begin(), from.frontier.end(), u);
      if (it == from.frontier.end()) return std::nullopt;  // unreachable: u precedes v and feeds it
      pred_slots.push_back({static_cast<std::size_t>(it - from.frontier.begin()), lag});
    }
    ++next_in_chain[static_cast<std::size_t>(chain_of[vi])];
    // The bound's label-dependent part: each chain's rest from its last processed node's finish
    // (a frontier slot, or time 0 when none is processed) and mu * finish of the relaxed edges
    // leaving the frontier.
    std::vector<int> chain_slot(chains.size(), -1);
    std::vector<double> slot_mu(out_width, 0.0);
    p2p_terms = 0.0;
    for (std::size_t i = 0; i < out_width; ++i) {
      const auto u = static_cast<std::size_t>(to.frontier[i]);
      const auto ci = static_cast<std::size_t>(chain_of[u]);
      if (next_in_chain[ci] > 0 &&
          chains[ci][static_cast<std::size_t>(next_in_chain[ci] - 1)] == static_cast<int>(u))
        chain_slot[ci] = static_cast<int>(i);
    }
    for (std::size_t e = 0; e < dag.edges.size(); ++e) {
      const schedule::DagEdge& edge = dag.edges[e];
      if (mu[e] == 0.0 || pos[static_cast<std::size_t>(edge.to)] <= k) continue;
      p2p_terms += mu[e] * static_cast<double>(p2p);
      if (pos[static_cast<std::size_t>(edge.from)] > k) continue;
      const auto it = std::find(to.frontier.begin(), to.frontier.end(), edge.from);
      slot_mu[static_cast<std::size_t>(it - to.frontier.begin())] += mu[e];
    }
    // Normalized finishes: a frontier node's finish matters only through its unprocessed
    // successors' starts, which are at least their earliest starts and at least the finish (+ lag)
    // of their other processed predecessors; a finish below all that is raised to it (every
    // successor's start, hence every completion, stays the same, and every relaxed edge term
    // stays <= 0). Labels that differ only below those levels then dominate one another.
    struct Lift {
      int64_t floor = 0;  // earliest start - lag
      std::vector<std::pair<std::size_t, int64_t>> other =
          {};  // other processed predecessors: slot, lag - own lag
    };
    std::vector<std::vector<Lift>> lifts(out_width);
    for (std::size_t i = 0; i < out_width; ++i) {
      const auto u = static_cast<std::size_t>(to.frontier[i]);
      for (const auto& [w, lag] : succ[u]) {
        if (pos[static_cast<std::size_t>(w)] <= k) continue;
        Lift lift{.floor = earliest[static_cast<std::size_t>(w)] - lag};
        for (const auto& [x, lag_x] : pred[static_cast<std::size_t>(w)]) {
          if (x == static_cast<int>(u) || pos[static_cast<std::size_t>(x)] > k) continue;
          const auto it = std::find(to.frontier.begin(), to.frontier.end(), x);
          lift.other.push_back({static_cast<std::size_t>(it - to.frontier.begin()), lag_x - lag});
        }
        lifts[i].push_back(std::move(lift));
      }
    }
    std::vector<int64_t> raw(out_width);
    // Candidates.
    std::vector<int64_t> cand_finish;
    std::vector<double> cand_cost;
    std::vector<int> cand_parent, cand_option;
    std::vector<int64_t> row(out_width);
    for (std::size_t l = 0; l < from.size(); ++l) {
      const int64_t* f = from.finish.data() + l * width;
      int64_t start = 0;
      for (const auto& [slot, lag] : pred_slots) start = std::max(start, f[slot] + lag);
      for (std::size_t j = 0; j < opts[vi].size(); ++j) {
        const NodeOption& o = opts[vi][j];
        const int64_t finish = start + o.units;
        if (finish > latest[vi]) continue;
        const double cost = from.cost[l] + o.cost_j;
        for (std::size_t i = 0; i < kept_slots.size(); ++i) raw[i] = f[kept_slots[i]];
        if (stays) raw[out_width - 1] = finish;
        for (std::size_t i = 0; i < out_width; ++i) {
          int64_t level = std::numeric_limits<int64_t>::max();
          for (const Lift& lift : lifts[i]) {
            int64_t at = lift.floor;
            for (const auto& [slot, lag] : lift.other) at = std::max(at, raw[slot] + lag);
            level = std::min(level, at);
          }
          row[i] = std::max(raw[i], level);
        }
        double bound = cost + p2p_terms;
        for (std::size_t ci = 0; ci < chains.size() && bound < kInf; ++ci) {
          const int slot = chain_slot[ci];
          bound += chain_rest(ci, static_cast<std::size_t>(next_in_chain[ci]),
                              slot < 0 ? 0 : row[static_cast<std::size_t>(slot)]);
        }
        for (std::size_t i = 0; i < out_width; ++i)
          bound += slot_mu[i] * static_cast<double>(row[i]);
        if (!(bound < budget)) continue;
        cand_finish.insert(cand_finish.end(), row.begin(), row.end());
        cand_cost.push_back(cost);
        cand_parent.push_back(static_cast<int>(l));
        cand_option.push_back(o.index);
      }
    }
    answer.labels_created += static_cast<int64_t>(cand_cost.size());
    if (answer.labels_created > options.max_labels) return std::nullopt;
    // Dominance: cheapest first; a candidate is dropped when a kept label finishes every frontier
    // node no later. Only the slots that differ between candidates are compared.
    std::vector<std::size_t> idx(cand_cost.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::vector<std::size_t> varying;
    for (std::size_t i = 0; i < out_width; ++i) {
      for (std::size_t a = 1; a < idx.size(); ++a) {
        if (cand_finish[a * out_width + i] != cand_finish[i]) {
          varying.push_back(i);
          break;
        }
      }
    }
    std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
      if (cand_cost[a] != cand_cost[b]) return cand_cost[a] < cand_cost[b];
      return a < b;
    });
    DominanceIndex index(cand_finish, cand_cost.size(), out_width, varying);
    for (std::size_t a : idx) {
      if (index.Dominated(a)) continue;
      index.Insert(a);
      const int64_t* f = cand_finish.data() + a * out_width;
      to.finish.insert(to.finish.end(), f, f + out_width);
      to.cost.push_back(cand_cost[a]);
      to.parent.push_back(cand_parent[a]);
      to.option.push_back(cand_option[a]);
      if (varying.empty()) break;  // every candidate has the same finishes: the cheapest is enough
    }
    answer.labels_max = std::max<int64_t>(answer.labels_max, static_cast<int64_t>(to.size()));
    layers.push_back(std::move(to));
    // Only the parents and options of earlier layers are needed (to rebuild the plan).
    Layer& spent = layers[layers.size() - 2];
    std::vector<int64_t>().swap(spent.finish);
    std::vector<double>().swap(spent.cost);
    if (layers.back().size() == 0) {
      answer.energy_j = options.threshold_j;
      answer.below_threshold = false;
      return answer;
    }
  }
  // Every node processed: the cheapest label is the grid program's least energy.
  const Layer& done = layers.back();
  const auto best = static_cast<std::size_t>(std::min_element(done.cost.begin(), done.cost.end()) -
                                             done.cost.begin());
  answer.energy_j = static_j + done.cost[best];
  answer.below_threshold = true;
  answer.choice.assign(static_cast<std::size_t>(n), 0);
  int label = static_cast<int>(best);
  for (int k = n; k-- > 0;) {
    const Layer& layer = layers[static_cast<std::size_t>(k + 1)];
    answer.choice[static_cast<std::size_t>(order[static_cast<std::size_t>(k)])] =
        layer.option[static_cast<std::size_t>(label)];
    label = layer.parent[static_cast<std::size_t>(label)];
  }
  return answer;
}

}  // namespace kareus::pipeline::testing
