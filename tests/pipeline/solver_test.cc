// SPDX-License-Identifier: Apache-2.0
#include "kareus/pipeline/solver.h"

#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
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

// The least energy of the frontier for deadline T: its cheapest point with time <= T.
double FrontierAt(const Result& result, double deadline) {
  double best = std::numeric_limits<double>::infinity();
  for (const IterationPoint& point : result.points) {
    if (point.cost.time_s <= deadline * (1 + 1e-12)) best = std::min(best, point.cost.energy_j);
  }
  return best;
}

// Point 1 of issue 17 on random small DAGs, against branch and bound over every assignment:
// the fastest point against the exact minimum-energy plan at the minimum time, and deadlines
// on the frontier's 1 ms grid against the exact optimum (when the search's node budget runs
// out, against its proven lower bound, which can only overstate a gap). Option times lie on a
// 2^-12 s grid, which the solver's tick (1 ms / 1024) divides: the solver's model is then the
// real problem. The options carry +-3 % noise, so costs are far from convex: measured, the
// fastest point is exact on 37 of 40 instances (worst +0.7 %) and grid deadlines have median
// gap 0, p95 0.55 % (issue 17 asks for 0.1 % everywhere: not met).
TEST(Solver, MatchesExactOptimumOnRandomSmallDags) {
  std::mt19937_64 rng(20261129);
  std::vector<double> gaps;
  std::vector<double> exact_gaps;
  int bounded = 0;
  double worst = 0.0;
  int worst_instance = -1;
  const char* env = std::getenv("KAREUS_SOLVER_TEST_INSTANCES");
  const int instances = env != nullptr ? std::atoi(env) : 40;
  int fastest_exact = 0;
  const bool verbose = std::getenv("KAREUS_SOLVER_TEST_VERBOSE") != nullptr;
  constexpr int kDeadlines = 6;
  for (int instance = 0; instance < instances; ++instance) {
    const Problem problem = RandomProblem(rng);
    const Result result = Solve(problem, {.unit_time_s = 1e-3, .p_static_w = kStaticW});
    ASSERT_EQ(result.summary.status, Status::kReachedMinimumTime) << result.summary.message;
    ASSERT_FALSE(result.points.empty());
    const double t_min = LongestPathAllFastest(problem, result.dag);
    EXPECT_NEAR(result.points.back().cost.time_s, t_min, 1e-12);
    EXPECT_NEAR(result.summary.min_time_s, t_min, 1e-12);
    for (std::size_t i = 0; i < result.points.size(); ++i) {
      const IterationPoint& point = result.points[i];
      // Feasible and honest: re-evaluating the realized choice gives the reported numbers.
      const Evaluation again = Evaluate(problem, result.dag, point.choice, kStaticW);
      ASSERT_DOUBLE_EQ(again.time_s, point.cost.time_s);
      ASSERT_DOUBLE_EQ(again.energy_j, point.cost.energy_j);
      ASSERT_LE(point.cost.time_s, point.deadline_s * (1 + 1e-12));
      if (i > 0) {  // iteration order: slower and cheaper first
        EXPECT_LT(point.cost.time_s, result.points[i - 1].cost.time_s);
        EXPECT_GT(point.cost.energy_j, result.points[i - 1].cost.energy_j);
      }
    }
    Exact exact(problem, result.dag);
    // The fastest point: exact, no node budget.
    const IterationPoint& fastest = result.points.back();
    const auto at_min = exact.MinEnergy(t_min, fastest.cost.energy_j * (1 + 1e-12), 5'000'000);
    ASSERT_TRUE(at_min.exact) << "instance " << instance;
    fastest_exact += fastest.cost.energy_j <= at_min.energy_j * (1 + 1e-9) ? 1 : 0;
    EXPECT_LE(fastest.cost.energy_j, at_min.energy_j * 1.01)
        << "instance " << instance << ": fastest point " << fastest.cost.energy_j
        << " J, exact minimum at T_min " << at_min.energy_j << " J";
    const double t_max = result.summary.max_time_s;
    // Deadlines on the frontier's grid T_min + k * 1 ms.
    const auto steps = static_cast<int>(std::ceil((t_max - t_min) / 1e-3));
    for (int j = 0; j <= kDeadlines; ++j) {
      const double deadline = t_min + 1e-3 * std::round(double(steps) * j / kDeadlines);
      const double ours = FrontierAt(result, deadline);
      auto answer = exact.MinEnergy(deadline, ours * (1 + 1e-12), 20'000);
      if (!answer.exact && ours > answer.energy_j * 1.001) {
        answer = exact.MinEnergy(deadline, ours * (1 + 1e-12), 200'000);
      }
      bounded += answer.exact ? 0 : 1;
      const double optimum = std::min(ours, answer.energy_j);
      const double gap = (ours - optimum) / optimum;
      if (verbose) {
        std::printf("instance %d S=%d M=%d T=%.5f ours=%.4f opt=%.4f%s gap=%.4f%%\n", instance,
                    problem.num_stages, problem.num_microbatches, deadline, ours, optimum,
                    answer.exact ? "" : " (bound)", 100 * gap);
      }
      gaps.push_back(gap);
      if (gap > worst) {
        worst = gap;
        worst_instance = instance;
      }
      if (answer.exact) exact_gaps.push_back(gap);
    }
  }
  std::sort(gaps.begin(), gaps.end());
  std::printf("solver vs exact at %zu sampled deadlines (%d against a proven lower bound): "
              "median gap %.4f %%, p95 %.4f %%, worst %.4f %% (instance %d)\n",
              gaps.size(), bounded, 100 * gaps[gaps.size() / 2],
              100 * gaps[static_cast<std::size_t>(0.95 * (gaps.size() - 1))], 100 * worst,
              worst_instance);
  std::sort(exact_gaps.begin(), exact_gaps.end());
  ASSERT_FALSE(exact_gaps.empty());
  const double median = exact_gaps[exact_gaps.size() / 2];
  const double p95 = exact_gaps[static_cast<std::size_t>(0.95 * (exact_gaps.size() - 1))];
  std::printf("  exact searches only (%zu deadlines): median %.4f %%, p95 %.4f %%; fastest point "
              "exact on %d of %d instances\n",
              exact_gaps.size(), 100 * median, 100 * p95, fastest_exact, instances);
  EXPECT_GE(fastest_exact, instances * 85 / 100);
  EXPECT_LE(median, 1e-4);
  EXPECT_LE(p95, 0.01);
}

// A lower bound of the least energy at `deadline` from the convex relaxation: the solver's
// convex model (exact for convex costs) on options one model tick faster, so each tick-rounded
// time is at most the real one, effective energies unchanged.
double ConvexLowerBound(const Problem& problem, double p_static_w, double deadline) {
  constexpr double kTick = 1e-3 / kTicksPerUnit;
  Problem shifted = problem;
  for (auto* lists : {&shifted.forward_options, &shifted.backward_options}) {
    for (auto& list : *lists) {
      for (Option& o : list) {
        o.time_s -= kTick;
        o.energy_j -= kTick * p_static_w;
      }
    }
  }
  const Result model = Solve(shifted, {.unit_time_s = 1e-3, .p_static_w = p_static_w,
                                       .reclaim_slack = false, .deadline_s = deadline});
  EXPECT_EQ(model.points.size(), 1u);
  return model.points.empty() ? 0.0 : model.points.back().model_energy_j;
}

// Issue 17's unbalanced pipeline (tests/pipeline/data/make_perseus_4x16.sh): the fastest point
// is within 0.2 % of the least energy any plan has at the minimum iteration time, proven
// against the convex relaxation's lower bound (every plan at T_min has static energy
// P * T_min * GPUs, so only effective energy differs).
TEST(Solver, UnbalancedFourStagesFastestPointIsMinimumEnergy) {
  const char* root = std::getenv("KAREUS_SOURCE_DIR");
  ASSERT_NE(root, nullptr);
  std::ifstream csv(std::string(root) + "/tests/pipeline/data/perseus_4x16_unbalanced.csv");
  ASSERT_TRUE(csv.good());
  Problem problem{.num_stages = 4, .num_microbatches = 16};
  problem.forward_options.resize(4);
  problem.backward_options.resize(4);
  std::string line;
  std::getline(csv, line);  // header
  while (std::getline(csv, line)) {
    std::istringstream row(line);
    std::string stage, kind, freq, time, energy;
    std::getline(row, stage, ',');
    std::getline(row, kind, ',');
    std::getline(row, freq, ',');
    std::getline(row, time, ',');
    std::getline(row, energy, ',');
    auto& list = kind == "forward" ? problem.forward_options : problem.backward_options;
    list[std::stoi(stage)].push_back({std::stod(time), std::stod(energy)});
  }
  const Result result = Solve(problem, {.unit_time_s = 1e-3, .p_static_w = 85.0});
  ASSERT_EQ(result.summary.status, Status::kReachedMinimumTime) << result.summary.message;
  const IterationPoint& fastest = result.points.back();
  EXPECT_NEAR(fastest.cost.time_s, result.summary.min_time_s, 1e-12);
  const double bound = ConvexLowerBound(problem, 85.0, result.summary.min_time_s);
  std::printf("4x16 unbalanced: fastest point %.3f J at %.4f s, convex lower bound %.3f J "
              "(gap %.4f %%), %zu points\n",
              fastest.cost.energy_j, fastest.cost.time_s, bound,
              100 * (fastest.cost.energy_j - bound) / bound, result.points.size());
  EXPECT_LE(bound, fastest.cost.energy_j * (1 + 1e-12));
  // Measured 0.16 % above the bound (issue 17 asks for 0.05 % above the exact minimum, which
  // lies between the bound and this point: not proven here).
  EXPECT_LE(fastest.cost.energy_j, bound * 1.002);
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
}

}  // namespace
}  // namespace kareus::pipeline
