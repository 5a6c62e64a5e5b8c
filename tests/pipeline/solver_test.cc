// SPDX-License-Identifier: Apache-2.0
#include "kareus/pipeline/solver.h"

#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <unordered_map>

#include <gtest/gtest.h>

#include "kareus/pareto/pareto.h"

namespace kareus::pipeline {
namespace {

using schedule::Dag;
using schedule::DagEdge;
using schedule::Instruction;
using schedule::ScheduleKind;

constexpr double kStaticW = 80.0;
constexpr double kGrid = 4096.0;  // option times are multiples of 1/kGrid s

// Options of one instruction type: clocks r in (0.6, 1], time ~ t0 / r^0.9, power =
// static + dynamic * r^2.5, with a few percent noise so hulls are not always convex.
std::vector<Option> RandomOptions(std::mt19937_64& rng, double t0, int count) {
  std::uniform_real_distribution<double> ratio(0.6, 1.0);
  std::uniform_real_distribution<double> noise(0.97, 1.03);
  std::vector<Option> options;
  for (int i = 0; i < count; ++i) {
    const double r = i == 0 ? 1.0 : ratio(rng);
    // Times on a binary grid of 2^-12 s (0.24 ms): sums stay exact, so the exact search can
    // merge equal partial schedules; the solver's 1 ms quanta still do not divide them.
    const double time_s = std::round(t0 / std::pow(r, 0.9) * noise(rng) * kGrid) / kGrid;
    const double power_w = kStaticW + 250.0 * std::pow(r, 2.5) * noise(rng);
    options.push_back({.time_s = time_s, .energy_j = power_w * time_s});
  }
  return options;
}

Problem RandomProblem(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> stages(2, 3);
  std::uniform_int_distribution<int> microbatches(2, 4);
  std::uniform_int_distribution<int> count(2, 5);
  std::uniform_real_distribution<double> base(0.008, 0.020);
  std::uniform_int_distribution<int> coin(0, 3);
  Problem problem;
  problem.num_stages = stages(rng);
  problem.num_microbatches = microbatches(rng);
  for (int s = 0; s < problem.num_stages; ++s) {
    const double t0 = base(rng);
    problem.forward_options.push_back(RandomOptions(rng, t0, count(rng)));
    problem.backward_options.push_back(RandomOptions(rng, 2.0 * t0, count(rng)));
  }
  if (coin(rng) == 0) {
    for (int s = 0; s < problem.num_stages; ++s) problem.gpus_per_stage.push_back(1 + coin(rng) % 2);
  }
  if (coin(rng) == 0) problem.p2p_time_s = 0.0015;
  return problem;
}

const std::vector<Option>& OptionsOf(const Problem& p, const Instruction& inst) {
  return inst.kind == schedule::Direction::kForward ? p.forward_options[inst.stage]
                                                : p.backward_options[inst.stage];
}

// Exact discrete optimum by branch and bound: the least total energy over every assignment
// whose iteration time is <= deadline. `incumbent` is a known feasible energy (pruning only).
// Branch and bound; nodes are placed in topological order, cheapest option first.
class Exact {
 public:
  Exact(const Problem& problem, const Dag& dag) : p_(problem), dag_(dag) {
    const std::size_t n = dag.nodes.size();
    preds_.resize(n);
    succs_.resize(n);
    for (const DagEdge& e : dag.edges) {
      const double lag = e.cross_stage ? problem.p2p_time_s : 0.0;
      preds_[e.to].emplace_back(e.from, lag);
      succs_[e.from].emplace_back(e.to, lag);
    }
    gpus_total_ = 0;
    for (int s = 0; s < problem.num_stages; ++s) gpus_total_ += Gpus(s);
    tail_.assign(n, 0.0);  // longest path after the node's end, every node at its fastest
    for (auto it = dag.topological_order.rbegin(); it != dag.topological_order.rend(); ++it) {
      for (auto [w, lag] : succs_[*it]) {
        tail_[*it] = std::max(tail_[*it], lag + Fastest(w) + tail_[w]);
      }
    }
    const int per_stage = 2 * problem.num_microbatches;
    for (int s = 0; s < problem.num_stages; ++s) {
      last_tail_.push_back(tail_[s * per_stage + per_stage - 1]);
    }
    for (std::size_t v = 0; v < n; ++v) {
      std::vector<pareto::Point> points;
      for (const Option& o : OptionsOf(problem, dag.nodes[v])) {
        points.push_back({o.time_s, Eff(static_cast<int>(v), o)});
      }
      fronts_.push_back(pareto::Filter(points));
      fastest_.push_back(fronts_.back().front().time_s);
    }
  }

  // The least total energy over every assignment whose iteration time is <= deadline.
  // `incumbent`: a feasible energy (for pruning). When the search needs more than
  // `node_budget` nodes, the subtrees left unexplored contribute their bound instead, so the
  // value is then a proven LOWER bound of the optimum (it can only overstate a gap) and
  // `exact` is false.
  struct Answer {
    double energy_j = 0.0;
    bool exact = true;
  };
  Answer MinEnergy(double deadline, double incumbent, long node_budget) {
    deadline_ = deadline + 1e-12;
    best_ = incumbent;
    budget_ = node_budget;
    visited_ = 0;
    unexplored_ = std::numeric_limits<double>::infinity();
    finish_.assign(dag_.nodes.size(), 0.0);
    placed_.assign(dag_.nodes.size(), 0);
    memo_.clear();
    Search(0, 0.0, 0.0);
    return {std::min(best_, unexplored_), visited_ <= budget_};
  }


 private:
  int Gpus(int s) const { return p_.gpus_per_stage.empty() ? 1 : p_.gpus_per_stage[s]; }
  double Fastest(int v) const {
    double t = std::numeric_limits<double>::infinity();
    for (const Option& o : OptionsOf(p_, dag_.nodes[v])) t = std::min(t, o.time_s);
    return t;
  }
  double Eff(int v, const Option& o) const {
    return Gpus(dag_.nodes[v].stage) * (o.energy_j - kStaticW * o.time_s);
  }

  // Lower bound on the total energy of any completion: each stage's remaining chain solved
  // exactly on its own (a 2-D Pareto DP over (finish time, effective energy)) with every other
  // stage's unplaced instruction at its fastest -- a relaxation -- then combined over the
  // iteration time m: sum_s min{energy_s : finish_s + tail_s <= m} + static power * m.
  double CompletionBound(double effective, double makespan_bound) {
    for (int v : dag_.topological_order) {
      if (placed_[v]) continue;
      double es = 0.0;
      for (auto [u, lag] : preds_[v]) es = std::max(es, finish_[u] + lag);
      finish_[v] = es + fastest_[v];  // optimistic finish of an unplaced node
    }
    const int per_stage = 2 * p_.num_microbatches;
    stage_states_.resize(p_.num_stages);
    std::vector<double> candidates{makespan_bound};
    for (int s = 0; s < p_.num_stages; ++s) {
      std::vector<pareto::Point>& states = stage_states_[s];
      states.assign(1, {0.0, 0.0});
      for (int k = 0; k < per_stage; ++k) {
        const int v = s * per_stage + k;
        if (placed_[v]) {
          states.assign(1, {finish_[v], 0.0});
          continue;
        }
        double release = 0.0;
        for (auto [u, lag] : preds_[v]) {
          if (dag_.nodes[u].stage != s) release = std::max(release, finish_[u] + lag);
        }
        const double latest = deadline_ - tail_[v];
        next_.clear();
        for (const pareto::Point& state : states) {
          const double start = std::max(state.time_s, release);
          for (const pareto::Point& o : fronts_[v]) {
            if (start + o.time_s <= latest) {
              next_.push_back({start + o.time_s, state.energy_j + o.energy_j});
            }
          }
        }
        if (next_.empty()) return std::numeric_limits<double>::infinity();
        states = pareto::Filter(next_);
      }
      for (pareto::Point& state : states) {
        state.time_s += last_tail_[s];
        candidates.push_back(state.time_s);
      }
    }
    std::sort(candidates.begin(), candidates.end());
    double best = std::numeric_limits<double>::infinity();
    for (double m : candidates) {
      if (m < makespan_bound) continue;
      double total = effective + kStaticW * gpus_total_ * m;
      for (const auto& states : stage_states_) {
        // States are sorted by time with energy descending: the last one that fits is cheapest.
        auto it = std::upper_bound(states.begin(), states.end(), m,
                                   [](double x, const pareto::Point& p) { return x < p.time_s; });
        if (it == states.begin()) {
          total = std::numeric_limits<double>::infinity();
          break;
        }
        total += std::prev(it)->energy_j;
      }
      best = std::min(best, total);
    }
    return best;
  }

  void Search(std::size_t k, double effective, double makespan_bound) {
    ++visited_;
    if (k == dag_.nodes.size()) {
      best_ = std::min(best_, effective + kStaticW * gpus_total_ * makespan_bound);
      return;
    }
    // Two partial schedules that placed the same nodes with the same finish times of the nodes
    // that still have unplaced successors (and the same makespan bound) have the same futures:
    // keep only the cheaper one.
    key_.assign({static_cast<int64_t>(k), std::llround(makespan_bound * kGrid)});
    for (std::size_t i = 0; i < k; ++i) {
      const int u = dag_.topological_order[i];
      for (auto [w, lag] : succs_[u]) {
        if (!placed_[w]) {
          key_.push_back(u);
          key_.push_back(std::llround(finish_[u] * kGrid));
          break;
        }
      }
    }
    auto [slot, inserted] = memo_.try_emplace(key_, effective);
    if (!inserted) {
      if (slot->second <= effective) return;
      slot->second = effective;
    }
    const double bound = CompletionBound(effective, makespan_bound);
    if (bound >= best_) return;
    if (visited_ > budget_) {
      unexplored_ = std::min(unexplored_, bound);
      return;
    }
    const int v = dag_.topological_order[k];
    double start = 0.0;
    for (auto [u, lag] : preds_[v]) start = std::max(start, finish_[u] + lag);
    placed_[v] = 1;
    // Cheapest first; a dominated option never helps (no faster, no cheaper).
    const auto& front = fronts_[v];
    for (auto it = front.rbegin(); it != front.rend(); ++it) {
      const double end = start + it->time_s;
      if (end + tail_[v] > deadline_) continue;
      finish_[v] = end;
      // When every node is placed, the bound is the exact makespan (the max finish).
      Search(k + 1, effective + it->energy_j, std::max(makespan_bound, end + tail_[v]));
    }
    placed_[v] = 0;
  }

  const Problem& p_;
  const Dag& dag_;
  std::vector<std::vector<std::pair<int, double>>> preds_, succs_;
  std::vector<double> tail_, last_tail_, finish_;
  std::vector<char> placed_;
  std::vector<std::vector<pareto::Point>> fronts_;  // per node: (time, effective energy) front
  std::vector<double> fastest_;
  std::vector<std::vector<pareto::Point>> stage_states_;
  std::vector<pareto::Point> next_;
  double deadline_ = 0.0;
  double best_ = 0.0;
  long budget_ = 0;
  struct KeyHash {
    std::size_t operator()(const std::vector<int64_t>& key) const {
      std::size_t h = 1469598103934665603ull;
      for (int64_t x : key) h = (h ^ static_cast<std::size_t>(x)) * 1099511628211ull;
      return h;
    }
  };
  std::unordered_map<std::vector<int64_t>, double, KeyHash> memo_;
  std::vector<int64_t> key_;
  double unexplored_ = 0.0;

 public:
  long visited_ = 0;

 private:
  int gpus_total_ = 0;
};

// A lower bound of the discrete optimum from the convex relaxation (every instruction may run
// any convex combination of its options, durations continuous): the solver itself is exact
// for the convex model on integer quanta, so run it with a fine quantum u on options made 2u
// faster (energies shifted so effective energies are unchanged). Each shifted hull then lies
// below the real hull one quantum later, so rounding a relaxed schedule down to quanta costs
// no more than the relaxation: model(floor(D/u)) <= relaxation(D) <= discrete optimum(D).
class ConvexBound {
 public:
  explicit ConvexBound(const Problem& problem) {
    Problem shifted = problem;
    for (auto* lists : {&shifted.forward_options, &shifted.backward_options}) {
      for (auto& list : *lists) {
        for (Option& o : list) {
          o.time_s -= 2 * kFineUnit;
          o.energy_j -= 2 * kFineUnit * kStaticW;
        }
      }
    }
    const Result model = Solve(shifted, {.unit_time_s = kFineUnit, .p_static_w = kStaticW,
                                         .reclaim_slack = false, .keep_dominated = true});
    for (const IterationPoint& point : model.points) {
      if (point.step >= 0) steps_.push_back({point.quanta, point.model_energy_j});
    }
  }

  double AtDeadline(double deadline_s) const {
    const auto limit = static_cast<int64_t>(std::floor(deadline_s / kFineUnit + 1e-9));
    double best = std::numeric_limits<double>::infinity();
    for (auto [quanta, energy] : steps_) {
      if (quanta <= limit) best = std::min(best, energy);
    }
    return best;
  }

 private:
  static constexpr double kFineUnit = 1e-4;
  std::vector<std::pair<int64_t, double>> steps_;
};

double LongestPathAllFastest(const Problem& problem, const Dag& dag) {
  std::vector<int> choice(dag.nodes.size());
  for (std::size_t v = 0; v < choice.size(); ++v) {
    const auto& list = OptionsOf(problem, dag.nodes[v]);
    choice[v] = static_cast<int>(std::min_element(list.begin(), list.end(),
                                                   [](const Option& a, const Option& b) {
                                                     return a.time_s < b.time_s;
                                                   }) -
                                 list.begin());
  }
  return Evaluate(problem, dag, choice, kStaticW).time_s;
}

TEST(Solver, MatchesExactOptimumOnRandomSmallDags) {
  std::mt19937_64 rng(20261129);
  std::vector<double> gaps;
  std::vector<double> exact_gaps;  // the points whose search completed
  int unverified = 0;
  double worst = 0.0;
  int worst_instance = -1;
  const char* env = std::getenv("KAREUS_SOLVER_TEST_INSTANCES");
  const int instances = env != nullptr ? std::atoi(env) : 200;
  for (int instance = 0; instance < instances; ++instance) {
    const Problem problem = RandomProblem(rng);
    const Result result = Solve(problem, {.unit_time_s = 1e-3, .p_static_w = kStaticW});
    ASSERT_EQ(result.summary.status, Status::kReachedMinimumTime) << result.summary.message;
    ASSERT_FALSE(result.points.empty());
    // The fastest point is the minimum makespan.
    EXPECT_NEAR(result.points.back().cost.time_s, LongestPathAllFastest(problem, result.dag),
                1e-12);
    EXPECT_NEAR(result.summary.min_time_s, result.points.back().cost.time_s, 1e-12);
    Exact exact(problem, result.dag);
    const ConvexBound convex(problem);
    if (std::getenv("KAREUS_SOLVER_TEST_VERBOSE") != nullptr) {
      std::printf("instance %d: S=%d M=%d points=%zu\n", instance, problem.num_stages,
                  problem.num_microbatches, result.points.size());
      std::fflush(stdout);
    }
    for (std::size_t i = 0; i < result.points.size(); ++i) {
      const IterationPoint& point = result.points[i];
      // Feasible and honest: re-evaluating the realized choice gives the reported numbers.
      const Evaluation again = Evaluate(problem, result.dag, point.choice, kStaticW);
      ASSERT_DOUBLE_EQ(again.time_s, point.cost.time_s);
      ASSERT_DOUBLE_EQ(again.energy_j, point.cost.energy_j);
      if (i > 0) {  // iteration order: slower and cheaper first
        EXPECT_LT(point.cost.time_s, result.points[i - 1].cost.time_s);
        EXPECT_GT(point.cost.energy_j, result.points[i - 1].cost.energy_j);
      }
      // Escalate the search budget only while an inexact bound leaves the gap above 1 %
      // (a bound can only overstate the gap, so a small bounded gap is already proven).
      auto answer = exact.MinEnergy(point.cost.time_s, point.cost.energy_j * (1 + 1e-12), 500);
      for (long budget = 5000; !answer.exact && budget <= 5000 &&
                                point.cost.energy_j > answer.energy_j * 1.01;
           budget *= 10) {
        answer = exact.MinEnergy(point.cost.time_s, point.cost.energy_j * (1 + 1e-12), budget);
      }
      unverified += answer.exact ? 0 : 1;
      if (answer.exact) {  // the relaxation really bounds the discrete optimum
        EXPECT_LE(convex.AtDeadline(point.cost.time_s), answer.energy_j * (1 + 1e-9));
      }
      // A bound-only answer is strengthened by the convex relaxation's bound.
      const double optimum =
          answer.exact ? answer.energy_j
                       : std::min(point.cost.energy_j,
                                  std::max(answer.energy_j, convex.AtDeadline(point.cost.time_s)));
      ASSERT_LE(optimum, point.cost.energy_j * (1 + 1e-12));
      const double gap = (point.cost.energy_j - optimum) / optimum;
      if (std::getenv("KAREUS_SOLVER_TEST_VERBOSE") != nullptr) {
        std::printf("  T=%.4f E=%.3f opt=%.3f gap=%.4f%% nodes=%ld\n", point.cost.time_s,
                    point.cost.energy_j, optimum, 100 * gap, exact.visited_);
        std::fflush(stdout);
      }
      gaps.push_back(std::max(0.0, gap));
      if (answer.exact) exact_gaps.push_back(std::max(0.0, gap));
      if (gap > worst) {
        worst = gap;
        worst_instance = instance;
      }
    }
  }
  std::sort(gaps.begin(), gaps.end());
  const double median = gaps[gaps.size() / 2];
  const double p95 = gaps[static_cast<std::size_t>(0.95 * (gaps.size() - 1))];
  std::printf("solver vs exact over %zu points (%d of them against a proven lower bound, the "
              "search budget spent): median gap %.4f %%, p95 %.4f %%, worst %.4f %% "
              "(instance %d)\n",
              gaps.size(), unverified, 100 * median, 100 * p95, 100 * worst, worst_instance);
  std::sort(exact_gaps.begin(), exact_gaps.end());
  if (!exact_gaps.empty()) {
    std::printf("  exact searches only (%zu points): median %.4f %%, p95 %.4f %%, max %.4f %%\n",
                exact_gaps.size(), 100 * exact_gaps[exact_gaps.size() / 2],
                100 * exact_gaps[static_cast<std::size_t>(0.95 * (exact_gaps.size() - 1))],
                100 * exact_gaps.back());
  }
  // Over every point; where the search budget ran out the gap is measured against a proven
  // lower bound (branch-and-bound or convex relaxation), which can only overstate it.
  EXPECT_GE(exact_gaps.size(), gaps.size() / 2);
  EXPECT_LT(median, 0.01);
  EXPECT_LT(p95, 0.03);
}

TEST(Solver, SingleOptionPerInstructionGivesOnePoint) {
  Problem problem{.num_stages = 2, .num_microbatches = 3};
  problem.forward_options = {{{0.010, 2.0}}, {{0.012, 2.5}}};
  problem.backward_options = {{{0.020, 4.0}}, {{0.024, 5.0}}};
  const Result result = Solve(problem, {.p_static_w = 50.0});
  ASSERT_EQ(result.summary.status, Status::kReachedMinimumTime);
  ASSERT_EQ(result.points.size(), 1u);
  const Evaluation& cost = result.points[0].cost;
  EXPECT_NEAR(cost.time_s, result.summary.min_time_s, 1e-15);
  // Energy accounting: sum of instruction energies minus their static share, plus static
  // power over the whole iteration on every GPU.
  const double instr = 3 * (2.0 + 2.5 + 4.0 + 5.0);
  const double busy = 3 * (0.010 + 0.012 + 0.020 + 0.024);
  EXPECT_NEAR(cost.energy_j, instr - 50.0 * busy + 50.0 * cost.time_s * 2, 1e-9);
  EXPECT_NEAR(cost.static_energy_j, 50.0 * cost.time_s * 2, 1e-12);
}

TEST(Solver, GPipeP2pAndGpusPerStage) {
  std::mt19937_64 rng(3);
  Problem problem{.schedule = ScheduleKind::kGPipe, .num_stages = 3, .num_microbatches = 4};
  for (int s = 0; s < 3; ++s) {
    problem.forward_options.push_back(RandomOptions(rng, 0.01, 6));
    problem.backward_options.push_back(RandomOptions(rng, 0.02, 6));
  }
  problem.gpus_per_stage = {2, 4, 2};
  problem.p2p_time_s = 0.002;
  const Result result = Solve(problem, {.unit_time_s = 5e-4, .p_static_w = kStaticW});
  ASSERT_EQ(result.summary.status, Status::kReachedMinimumTime);
  EXPECT_GT(result.points.size(), 3u);
  EXPECT_NEAR(result.points.back().cost.time_s, LongestPathAllFastest(problem, result.dag), 1e-12);
  for (const auto& point : result.points) {
    EXPECT_NEAR(point.cost.static_energy_j, kStaticW * 8 * point.cost.time_s, 1e-9);
  }
}

// Every node takes its class's options: forwards and backwards per (stage, chunk), each
// stage's last instruction (launching the overlapped gradient sync) its own list, each sync
// node its own. With one option per class the only point's time is the longest path over those
// durations, computed here from the node's identity.
TEST(Solver, NodeClassesTakeTheirOwnOptions) {
  const int stages = 2, chunks = 2, microbatches = 4;
  Problem problem{.schedule = ScheduleKind::kInterleaved1F1B, .num_stages = stages,
                  .num_microbatches = microbatches, .num_chunks = chunks};
  problem.gradient_sync = schedule::GradientSync::kOverlapped;
  auto one = [](double t) { return std::vector<Option>{{.time_s = t, .energy_j = 200.0 * t}}; };
  for (int u = 0; u < stages * chunks; ++u) {
    problem.forward_options.push_back(one(0.010 + 0.001 * u));
    problem.backward_options.push_back(one(0.020 + 0.002 * u));
  }
  for (int s = 0; s < stages; ++s) {
    problem.last_backward_options.push_back(one(0.050 + 0.003 * s));
    for (int c = 0; c < chunks; ++c) problem.gradient_sync_options.push_back(one(0.030 + 0.010 * s + 0.005 * c));
  }
  problem.gpus_per_stage = {2, 3};
  problem.p2p_time_s = 0.001;
  const Result result = Solve(problem, {.p_static_w = kStaticW});
  ASSERT_EQ(result.summary.status, Status::kReachedMinimumTime) << result.summary.message;
  ASSERT_EQ(result.points.size(), 1u);
  const Dag& dag = result.dag;
  ASSERT_EQ(static_cast<int>(dag.nodes.size()), 2 * stages * chunks * microbatches + stages * chunks);
  std::vector<double> durations;
  double effective = 0.0;
  for (const schedule::DagNode& node : dag.nodes) {
    const int u = node.stage * chunks + node.chunk;
    double t;
    if (node.node == schedule::NodeKind::kGradientSync) {
      t = 0.030 + 0.010 * node.stage + 0.005 * node.chunk;
    } else if (node.kind == schedule::Direction::kForward) {
      t = 0.010 + 0.001 * u;
    } else if (node.chunk == 0 && node.microbatch == microbatches - 1) {
      t = 0.050 + 0.003 * node.stage;
    } else {
      t = 0.020 + 0.002 * u;
    }
    durations.push_back(t);
    effective += problem.gpus_per_stage[node.stage] * (200.0 - kStaticW) * t;
  }
  const double makespan = schedule::StartTimes(dag, durations, 0.001).makespan;
  EXPECT_NEAR(result.points[0].cost.time_s, makespan, 1e-12);
  EXPECT_NEAR(result.points[0].cost.energy_j, effective + kStaticW * 5 * makespan, 1e-9);
}

// Interleaved 1F1B with an overlapped gradient sync on a DAG small enough to enumerate every
// assignment: the fastest point is the true minimum time and every point is within a few
// percent of the least energy any assignment reaches within its time.
TEST(Solver, InterleavedWithGradientSyncAgainstEnumeration) {
  std::mt19937_64 rng(11);
  const int stages = 2, chunks = 2, microbatches = 2;
  Problem problem{.schedule = ScheduleKind::kInterleaved1F1B, .num_stages = stages,
                  .num_microbatches = microbatches, .num_chunks = chunks};
  problem.gradient_sync = schedule::GradientSync::kOverlapped;
  for (int u = 0; u < stages * chunks; ++u) {
    problem.forward_options.push_back(RandomOptions(rng, 0.010, 2));
    problem.backward_options.push_back(RandomOptions(rng, 0.020, 2));
  }
  for (int s = 0; s < stages; ++s) {
    problem.last_backward_options.push_back(RandomOptions(rng, 0.030, 2));
    problem.gradient_sync_options.push_back(RandomOptions(rng, 0.015, 2));  // the tail
    problem.gradient_sync_options.push_back(RandomOptions(rng, 0.025, 1));  // chunk 1
  }
  problem.p2p_time_s = 0.0005;
  const Result result = Solve(problem, {.p_static_w = kStaticW});
  ASSERT_EQ(result.summary.status, Status::kReachedMinimumTime) << result.summary.message;
  const Dag& dag = result.dag;
  const std::size_t n = dag.nodes.size();
  ASSERT_EQ(n, 20u);
  std::vector<int> free_nodes;  // nodes with two options
  for (std::size_t v = 0; v < n; ++v) {
    if (OptionsOf(problem, dag, static_cast<int>(v)).size() == 2) free_nodes.push_back(static_cast<int>(v));
  }
  ASSERT_EQ(free_nodes.size(), 18u);
  std::vector<pareto::Point> all;  // every assignment: (time, energy)
  std::vector<int> choice(n, 0);
  for (uint32_t mask = 0; mask < (1u << free_nodes.size()); ++mask) {
    for (std::size_t i = 0; i < free_nodes.size(); ++i) choice[free_nodes[i]] = (mask >> i) & 1;
    const Evaluation e = Evaluate(problem, dag, choice, kStaticW);
    all.push_back({.time_s = e.time_s, .energy_j = e.energy_j});
  }
  const std::vector<pareto::Point> best = pareto::Filter(all);
  EXPECT_NEAR(result.points.back().cost.time_s, best.front().time_s, 1e-12);
  for (const IterationPoint& point : result.points) {
    double least = std::numeric_limits<double>::infinity();
    for (const pareto::Point& p : best) {
      if (p.time_s <= point.cost.time_s + 1e-12) least = std::min(least, p.energy_j);
    }
    EXPECT_LE(point.cost.energy_j, least * 1.06) << "at " << point.cost.time_s << " s";
    EXPECT_GE(point.cost.energy_j, least - 1e-9);
  }
}

TEST(Solver, StepLimitAndInvalidInputAreStatuses) {
  std::mt19937_64 rng(4);
  Problem problem = RandomProblem(rng);
  const Result limited = Solve(problem, {.p_static_w = kStaticW, .max_steps = 2});
  EXPECT_EQ(limited.summary.status, Status::kStepLimit);
  EXPECT_EQ(limited.summary.steps, 2);
  problem.backward_options[0].clear();
  const Result bad = Solve(problem, {});
  EXPECT_EQ(bad.summary.status, Status::kInvalidInput);
  EXPECT_NE(bad.summary.message.find("no backward options"), std::string::npos);
  EXPECT_TRUE(bad.points.empty());
  problem.backward_options[0] = {{-1.0, 3.0}};
  EXPECT_EQ(Solve(problem, {}).summary.status, Status::kInvalidInput);
  problem.backward_options[0] = {{1.0, 3.0}};
  problem.gradient_sync = schedule::GradientSync::kOverlapped;
  problem.gradient_sync_options.assign(problem.num_stages, {{1.0, 3.0}});  // no last backwards
  const Result half = Solve(problem, {});
  EXPECT_EQ(half.summary.status, Status::kInvalidInput);
  EXPECT_NE(half.summary.message.find("last_backward_options"), std::string::npos) << half.summary.message;
  problem.gradient_sync = schedule::GradientSync::kAtEnd;
  problem.gradient_sync_options.clear();
  const Result missing = Solve(problem, {});
  EXPECT_EQ(missing.summary.status, Status::kInvalidInput);
  EXPECT_NE(missing.summary.message.find("gradient_sync_options"), std::string::npos) << missing.summary.message;
  problem.gradient_sync = schedule::GradientSync::kNone;
  problem.schedule = ScheduleKind::kInterleaved1F1B;  // one chunk: not an interleaved schedule
  const Result shape = Solve(problem, {});
  EXPECT_EQ(shape.summary.status, Status::kInvalidInput);
  EXPECT_NE(shape.summary.message.find("chunks"), std::string::npos) << shape.summary.message;
}

}  // namespace
}  // namespace kareus::pipeline
