// SPDX-License-Identifier: Apache-2.0
#include "kareus/pipeline/solver.h"

#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>

#include <gtest/gtest.h>

#include "kareus/pareto/pareto.h"
#include "pipeline/exact_milp.h"
#include "pipeline/label_bound.h"
#include "pipeline/stage_bound.h"

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
std::vector<Alternative> RandomOptions(std::mt19937_64& rng, double t0, int count) {
  std::uniform_real_distribution<double> ratio(0.6, 1.0);
  std::uniform_real_distribution<double> noise(0.97, 1.03);
  std::vector<Alternative> options;
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
    for (int s = 0; s < problem.num_stages; ++s)
      problem.gpus_per_stage.push_back(1 + coin(rng) % 2);
  }
  if (coin(rng) == 0) problem.p2p_time_s = 0.0015;
  return problem;
}

const std::vector<Alternative>& OptionsOf(const Problem& p, const Instruction& inst) {
  return inst.kind == schedule::Direction::kForward ? p.forward_options[inst.stage]
                                                    : p.backward_options[inst.stage];
}

double LongestPathAllFastest(const Problem& problem, const Dag& dag) {
  std::vector<int> choice(dag.nodes.size());
  for (std::size_t v = 0; v < choice.size(); ++v) {
    const auto& list = OptionsOf(problem, dag.nodes[v]);
    choice[v] = static_cast<int>(std::min_element(list.begin(), list.end(),
                                                  [](const Alternative& a, const Alternative& b) {
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

// Point 1 of issue 17 on random small DAGs, against the exact optimum (GLPK's branch and cut on
// the mixed-integer program of exact_milp.h): the fastest point against the least energy at the
// minimum time, and deadlines on the frontier's 1 ms grid against the least energy with time
// <= the deadline. The options carry +-3 % noise (costs far from convex) and lie on a 2^-12 s
// grid, so the frontier's times are exact sums. Also: the convex relaxation's energy
// (model_energy_j) never exceeds the exact optimum (it is a lower bound).
TEST(Solver, MatchesExactOptimumOnRandomSmallDags) {
  std::mt19937_64 rng(20261129);
  std::vector<double> gaps;
  double worst = 0.0;
  int worst_instance = -1;
  const char* env = std::getenv("KAREUS_SOLVER_TEST_INSTANCES");
  const int instances = env != nullptr ? std::atoi(env) : 40;
  const bool verbose = std::getenv("KAREUS_SOLVER_TEST_VERBOSE") != nullptr;
  int fastest_exact = 0;
  int lp_checked = 0;
  int exact_frontiers = 0;  // instances whose every deadline the whole-frontier search proved
  int64_t most_work = 0;    // the most exact-search work of one instance
  double stage_gap_closed =
      0.0;                    // sum over instances: share of the LP's gap the stage bound closes
  int lp_gaps = 0;            // instances whose LP bound is below the exact minimum at T_min
  int label_exact = 0;        // instances where the label-setting search was checked exact
  double label_wall_s = 0.0;  // time in the label-setting searches (printed, never compared)
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
      ASSERT_LE(point.model_energy_j, point.cost.energy_j * (1 + 1e-9));
      if (i > 0) {  // iteration order: slower and cheaper first
        EXPECT_LT(point.cost.time_s, result.points[i - 1].cost.time_s);
        EXPECT_GT(point.cost.energy_j, result.points[i - 1].cost.energy_j);
      }
    }
    // The descent traces the convex relaxation EXACTLY (minimum cuts, moves to the next
    // breakpoint; with issue 17's incremental source side and boundary cut): every point not
    // proven by the exact search reports the relaxation's least energy at its deadline, which
    // is the linear relaxation of the mixed-integer program (GLPK's simplex). A wrong cut or
    // move would trace a costlier convex schedule: model_energy_j above the LP optimum. These
    // problems are small: the whole-frontier exact search proves every point (then none is
    // left to check here), so the check runs on the same descent without the searches.
    exact_frontiers += result.summary.exact_frontier ? 1 : 0;
    most_work = std::max(most_work, result.summary.exact_search_work);
    const Result convex =
        Solve(problem, {.unit_time_s = 1e-3, .p_static_w = kStaticW, .reclaim_slack = false});
    ASSERT_EQ(convex.summary.status, Status::kReachedMinimumTime) << convex.summary.message;
    for (const IterationPoint& point : convex.points) {
      ASSERT_FALSE(point.exact);
      const auto lp = testing::MinEnergyLp(problem, result.dag, point.deadline_s, kStaticW);
      ASSERT_TRUE(lp.has_value()) << "instance " << instance;
      EXPECT_NEAR(point.model_energy_j, *lp, 1e-7 * *lp)
          << "instance " << instance << " deadline " << point.deadline_s;
      ++lp_checked;
    }
    if (verbose) {
      int ex = 0;
      for (const auto& pt : result.points) ex += pt.exact ? 1 : 0;
      std::printf("instance %d: %zu points, %d exact\n", instance, result.points.size(), ex);
    }
    // The fastest point against the exact minimum at T_min.
    const IterationPoint& fastest = result.points.back();
    const auto at_min = testing::MinEnergyMilp(problem, result.dag, t_min, kStaticW);
    ASSERT_TRUE(at_min.optimal) << "instance " << instance;
    EXPECT_LE(fastest.model_energy_j, at_min.energy_j * (1 + 1e-9)) << "instance " << instance;
    // The stage-wise Lagrangian bound (stage_bound.h) on the options' own grid: never above the
    // exact minimum (an invalid bound would certify plans that are not optimal), and, from
    // the LP's duals, at least the LP's bound.
    const auto lp_min = testing::MinEnergyLp(problem, result.dag, t_min, kStaticW);
    ASSERT_TRUE(lp_min.has_value()) << "instance " << instance;
    const auto stage_bound = testing::StageLagrangianBound(
        problem, result.dag, t_min, kStaticW,
        {.resolution_s = 1.0 / kGrid,
         .upper_bound_j = fastest.cost.energy_j,
         .multipliers = testing::MinEnergyLpEdgeDuals(problem, result.dag, t_min, kStaticW)});
    ASSERT_TRUE(stage_bound.has_value()) << "instance " << instance;
    EXPECT_LE(stage_bound->energy_j, at_min.energy_j * (1 + 1e-9)) << "instance " << instance;
    if (problem.p2p_time_s == 0.0) {  // every time on the grid: nothing lost to rounding
      EXPECT_GE(stage_bound->energy_j, *lp_min * (1 - 1e-9)) << "instance " << instance;
    }
    if (at_min.energy_j - *lp_min > 1e-6 * at_min.energy_j) {
      stage_gap_closed +=
          std::max(0.0, (stage_bound->energy_j - *lp_min) / (at_min.energy_j - *lp_min));
      ++lp_gaps;
    }
    // The label-setting search (label_bound.h) on the options' own grid (kGrid: nothing is
    // rounded, the grid program is the real one): below a threshold above the minimum it must
    // find the exact minimum, with a plan that really meets T_min (a search that drops a label
    // it should keep returns more; one that keeps an infeasible label, less); below a threshold
    // under the minimum it must prove the threshold and find nothing.
    {
      const auto label_start = std::chrono::steady_clock::now();
      const auto exact_label = testing::LabelSettingBound(
          problem, result.dag, t_min, kStaticW,
          {.resolution_s = 1.0 / kGrid,
           .threshold_j = at_min.energy_j * (1 + 1e-6),
           .multipliers = testing::MinEnergyLpEdgeDuals(problem, result.dag, t_min, kStaticW)});
      ASSERT_TRUE(exact_label.has_value()) << "instance " << instance;
      ASSERT_TRUE(exact_label->below_threshold) << "instance " << instance;
      EXPECT_LE(exact_label->energy_j, at_min.energy_j * (1 + 1e-9)) << "instance " << instance;
      if (problem.p2p_time_s == 0.0) {  // else the P2P time (off the grid) is rounded down
        EXPECT_NEAR(exact_label->energy_j, at_min.energy_j, 1e-9 * at_min.energy_j)
            << "instance " << instance;
        const Evaluation label_plan = Evaluate(problem, result.dag, exact_label->choice, kStaticW);
        EXPECT_LE(label_plan.time_s, t_min * (1 + 1e-12)) << "instance " << instance;
        EXPECT_NEAR(label_plan.energy_j, at_min.energy_j, 1e-9 * at_min.energy_j)
            << "instance " << instance;
        ++label_exact;
      }
      const auto proven = testing::LabelSettingBound(
          problem, result.dag, t_min, kStaticW,
          {.resolution_s = 1.0 / kGrid, .threshold_j = at_min.energy_j * (1 - 1e-6)});
      ASSERT_TRUE(proven.has_value()) << "instance " << instance;
      EXPECT_FALSE(proven->below_threshold) << "instance " << instance;
      EXPECT_LE(proven->energy_j, at_min.energy_j) << "instance " << instance;
      // A coarser grid rounds every time down: still a lower bound.
      const auto coarse = testing::LabelSettingBound(
          problem, result.dag, t_min, kStaticW,
          {.resolution_s = 1e-3, .threshold_j = at_min.energy_j * (1 + 1e-6)});
      ASSERT_TRUE(coarse.has_value()) << "instance " << instance;
      EXPECT_LE(coarse->energy_j, at_min.energy_j * (1 + 1e-9)) << "instance " << instance;
      label_wall_s +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - label_start).count();
    }
    const bool exact = fastest.cost.energy_j <= at_min.energy_j * (1 + 1e-9);
    fastest_exact += exact ? 1 : 0;
    EXPECT_TRUE(exact) << "instance " << instance << ": fastest point " << fastest.cost.energy_j
                       << " J, exact minimum at T_min " << at_min.energy_j << " J";
    // Deadlines on the frontier's grid T_min + k * 1 ms, up to the slowest plan's time.
    const double t_max = result.summary.max_time_s;
    const auto steps = static_cast<int>(std::ceil((t_max - t_min) / 1e-3));
    for (int j = 1; j <= kDeadlines; ++j) {
      const double deadline = t_min + 1e-3 * std::round(double(steps) * j / kDeadlines);
      const double ours = FrontierAt(result, deadline);
      const auto answer = testing::MinEnergyMilp(problem, result.dag, deadline, kStaticW);
      ASSERT_TRUE(answer.optimal) << "instance " << instance << " deadline " << deadline;
      const double gap = (ours - answer.energy_j) / answer.energy_j;
      if (verbose) {
        std::printf("instance %d S=%d M=%d T=%.5f ours=%.4f opt=%.4f gap=%.4f%%\n", instance,
                    problem.num_stages, problem.num_microbatches, deadline, ours, answer.energy_j,
                    100 * gap);
      }
      EXPECT_GE(gap, -1e-9) << "instance " << instance << ": better than the exact optimum?";
      gaps.push_back(gap);
      if (gap > worst) {
        worst = gap;
        worst_instance = instance;
      }
    }
  }
  std::sort(gaps.begin(), gaps.end());
  const auto above = std::count_if(gaps.begin(), gaps.end(), [](double g) { return g > 1e-3; });
  std::printf(
      "solver vs exact (GLPK) at %zu sampled deadlines: median gap %.4f %%, p95 %.4f %%, "
      "worst %.4f %% (instance %d), %td above 0.1 %%; fastest point exact on %d of %d "
      "instances, every point on %d (exact search work at most %lld); convex energy = LP "
      "relaxation at %d points\n",
      gaps.size(), 100 * gaps[gaps.size() / 2],
      100 * gaps[static_cast<std::size_t>(0.95 * (gaps.size() - 1))], 100 * worst, worst_instance,
      above, fastest_exact, instances, exact_frontiers, static_cast<long long>(most_work),
      lp_checked);
  EXPECT_GT(lp_checked, 100);
  // Every instance is small, and its whole-frontier search finished within its budget (the
  // budget's margin: kFrontierBudget, 100 M, against the most work printed above).
  EXPECT_EQ(exact_frontiers, instances);
  std::printf(
      "stage-wise Lagrangian bound at T_min: closes %.1f %% of the LP's gap to the exact "
      "minimum on average over the %d instances with a gap; label-setting search exact "
      "(energy and plan) on %d instances (%.2f s in its searches)\n",
      100 * stage_gap_closed / std::max(1, lp_gaps), lp_gaps, label_exact, label_wall_s);
  EXPECT_GT(label_exact, instances / 2);
  // Issue 17 asks for 0.1 % at every sampled deadline. Measured (seed 20261129, 40 instances):
  // worst 0.063 % (instance 17); before the neighbourhood search (exact search on stage pairs
  // and windows of the topological order, after the whole-DAG search ran out of budget) 2 of
  // 240 were above it (instance 2: 0.12 %, instance 9: 0.40 %, whose optimum differs from the
  // beam's plan in 7 instructions on all three stages).
  EXPECT_EQ(above, 0);
  EXPECT_LE(worst, 1e-3);
}

// A Perseus-format profile (stage,instruction,frequency,time,energy) in tests/pipeline/data.
Problem PerseusProfile(const std::string& name, int stages, int microbatches) {
  const char* root = std::getenv("KAREUS_SOURCE_DIR");
  EXPECT_NE(root, nullptr);
  std::ifstream csv(std::string(root == nullptr ? "." : root) + "/tests/pipeline/data/" + name);
  EXPECT_TRUE(csv.good()) << name;
  Problem problem{.num_stages = stages, .num_microbatches = microbatches};
  problem.forward_options.resize(static_cast<std::size_t>(stages));
  problem.backward_options.resize(static_cast<std::size_t>(stages));
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
  return problem;
}

// Issue 17's unbalanced 4 x 16 profile (tests/pipeline/data/make_perseus_4x16.sh).
Problem UnbalancedFourStages() { return PerseusProfile("perseus_4x16_unbalanced.csv", 4, 16); }

// Issue 17's unbalanced pipeline: the fastest point against the EXACT least energy at the
// minimum iteration time (every plan at T_min has static energy P * T_min * GPUs, so only
// effective energy differs). The label-setting search (label_bound.h) on a 1 us grid, below a
// threshold just above the fastest point: the grid program relaxes the real one (times rounded
// down), so its least energy is a lower bound of every real plan's; the plan it returns also
// meets T_min in real time at the same energy, so that bound is attained: it is the exact minimum.
// Measured: exact minimum 4,339.356 J; fastest point 4,340.184 J (+0.019 %); the convex (LP)
// bound 4,333.24 J and the stage-wise Lagrangian bound (stage_bound.h) 4,334.97 J were too weak
// to decide +0.05 %. The search: 1.2 M labels created, at most 7 k kept after one node, about
// 2.5 s (Release; docs/ARCHITECTURE.md §6).
TEST(Solver, UnbalancedFourStagesFastestPointIsMinimumEnergy) {
  const Problem problem = UnbalancedFourStages();
  const Result result = Solve(problem, {.unit_time_s = 1e-3, .p_static_w = 85.0});
  ASSERT_EQ(result.summary.status, Status::kReachedMinimumTime) << result.summary.message;
  const IterationPoint& fastest = result.points.back();
  const double t_min = result.summary.min_time_s;
  EXPECT_NEAR(fastest.cost.time_s, t_min, 1e-12);
  const double convex = fastest.model_energy_j;
  const auto search = testing::LabelSettingBound(
      problem, result.dag, t_min, 85.0,
      {.resolution_s = 1e-6,
       .threshold_j = fastest.cost.energy_j * (1 + 1e-6),
       .multipliers = testing::MinEnergyLpEdgeDuals(problem, result.dag, t_min, 85.0)});
  ASSERT_TRUE(search.has_value());
  // The fastest point itself lies below the threshold: a search that found nothing dropped it.
  ASSERT_TRUE(search->below_threshold);
  const double bound = search->energy_j;  // <= every plan's energy at T_min
  const Evaluation optimum = Evaluate(problem, result.dag, search->choice, 85.0);
  std::printf(
      "4x16 unbalanced: fastest point %.3f J at %.4f s; exact minimum %.3f J (gap %.4f "
      "%%; its plan %.3f J at %.9f s); convex (LP) bound %.3f J (gap %.4f %%); Lagrangian "
      "bound at the root %.3f J; %lld labels, at most %lld after one node; %zu points\n",
      fastest.cost.energy_j, fastest.cost.time_s, bound,
      100 * (fastest.cost.energy_j - bound) / bound, optimum.energy_j, optimum.time_s, convex,
      100 * (fastest.cost.energy_j - convex) / convex, search->root_bound_j,
      static_cast<long long>(search->labels_created), static_cast<long long>(search->labels_max),
      result.points.size());
  // The bound is attained by a real plan within T_min: it is the exact minimum.
  EXPECT_LE(optimum.time_s, t_min * (1 + 1e-12));
  EXPECT_NEAR(optimum.energy_j, bound, 1e-9 * bound);
  EXPECT_LE(bound, fastest.cost.energy_j);
  EXPECT_GT(bound, convex + 5.0);  // far above the LP (4,333.24 J)
  // Issue 17: the fastest point is within 0.05 % of the exact minimum.
  constexpr double kTolerance = 1.0005;
  EXPECT_LE(fastest.cost.energy_j, bound * kTolerance);
  // The check tells plans apart: the same plan with four of stage 3's instructions one clock
  // step faster (still within T_min, 2.7 J more) fails it.
  std::vector<int> worse = fastest.choice;
  int changed = 0;
  for (std::size_t v = 0; v < worse.size() && changed < 4; ++v) {
    if (result.dag.nodes[v].stage == 3 && worse[v] > 0) {
      --worse[v];
      ++changed;
    }
  }
  const Evaluation perturbed = Evaluate(problem, result.dag, worse, 85.0);
  std::printf("  perturbed plan (%d instructions of stage 3 one step faster): %.3f J at %.4f s\n",
              changed, perturbed.energy_j, perturbed.time_s);
  EXPECT_LE(perturbed.time_s, t_min + 1e-12);
  EXPECT_GT(perturbed.energy_j, bound * kTolerance);
}

// The max-flow keeps the previous cut's source side and rescans only what changed (issue 17's
// incremental BFS). Two safeguards make that exact: a fresh BFS after every augmentation (the
// residual graph changed along the path) and after an arc inside the source side leaves the
// critical sub-DAG (events reached through it may no longer be reachable). With
// check_incremental_cuts the solver compares every incremental BFS with a fresh one; without
// either safeguard these problems produce cuts whose source side differs (removing either
// line makes this test fail: verified when the test was written). The traced relaxation must
// not change either. The same check covers the moves that skip the longest-path passes
// (their float budget sufficed): with the check they run anyway, and must change neither the
// move nor the critical sub-DAG.
TEST(Solver, IncrementalSourceSideEqualsFreshBfs) {
  std::mt19937_64 rng(20261130);
  std::vector<Problem> problems;
  for (int i = 0; i < 40; ++i) problems.push_back(RandomProblem(rng));
  problems.push_back(UnbalancedFourStages());
  int64_t checked = 0;
  int64_t mismatches = 0;
  int64_t skipped = 0;
  for (std::size_t i = 0; i < problems.size(); ++i) {
    // A coarse grid: the whole descent, few deadlines to realize.
    const Options plain{.unit_time_s = 1.0, .p_static_w = kStaticW};
    Options checking = plain;
    checking.check_incremental_cuts = true;
    // Checked first: without the safeguard after augmentations the unchecked max-flow loops
    // forever on a stale augmenting path.
    const Result b = Solve(problems[i], checking);
    ASSERT_EQ(b.summary.status, Status::kReachedMinimumTime) << b.summary.message;
    ASSERT_EQ(b.summary.incremental_cut_mismatches, 0) << "problem " << i;
    ASSERT_EQ(b.summary.skipped_pass_mismatches, 0) << "problem " << i;
    const Result a = Solve(problems[i], plain);
    EXPECT_EQ(a.summary.incremental_cuts_checked, 0);
    skipped += a.summary.steps - a.summary.full_passes;
    checked += b.summary.incremental_cuts_checked;
    mismatches += b.summary.incremental_cut_mismatches;
    // Same cuts, so the same trace and the same points.
    EXPECT_EQ(a.summary.steps, b.summary.steps) << "problem " << i;
    ASSERT_EQ(a.points.size(), b.points.size()) << "problem " << i;
    for (std::size_t k = 0; k < a.points.size(); ++k) {
      EXPECT_EQ(a.points[k].model_energy_j, b.points[k].model_energy_j) << "problem " << i;
    }
  }
  std::printf("incremental BFSs checked %lld, mismatches %lld, moves without passes %lld\n",
              static_cast<long long>(checked), static_cast<long long>(mismatches),
              static_cast<long long>(skipped));
  EXPECT_GT(checked, 100);
  EXPECT_GT(skipped, 100);
}

// Without keep_dominated the solver drops dominated points as it goes (Engine::CompactPoints,
// first at 4,096 realized points, then whenever 1.5 x the survivors have accumulated): the
// result must be what filtering every realized point gives (keep_dominated), plans, deadlines
// and counts included.
TEST(Solver, DroppingDominatedPointsOnTheWayChangesNothing) {
  // The benchmark's shape (bench/pipeline_benchmark.cc): 4 x 16, 20 clocks per instruction
  // (too many options for the exact search at every deadline); 0.1 ms quanta give ~15 k
  // deadlines.
  Problem problem{.num_stages = 4, .num_microbatches = 16};
  for (int s = 0; s < problem.num_stages; ++s) {
    for (const double t0 : {0.07, 0.154}) {
      std::vector<Alternative>& options = t0 < 0.1 ? problem.forward_options.emplace_back()
                                                   : problem.backward_options.emplace_back();
      for (int f = 1410; f >= 840; f -= 30) {
        const double r = f / 1410.0;
        const double time_s = t0 * (1.0 + 0.08 * std::sin(1.7 * s + 0.3)) / std::pow(r, 0.9);
        options.push_back(
            {.time_s = time_s, .energy_j = (85.0 + 260.0 * std::pow(r, 2.5)) * time_s});
      }
    }
  }
  const Options options{.unit_time_s = 1e-4, .p_static_w = 85.0};
  Options every_point = options;
  every_point.keep_dominated = true;
  const Result filtered = Solve(problem, options);
  const Result every = Solve(problem, every_point);
  ASSERT_EQ(filtered.summary.status, Status::kReachedMinimumTime) << filtered.summary.message;
  ASSERT_GT(every.points.size(), 3u * 4096u);  // several compactions
  std::vector<pareto::Point> points;
  for (std::size_t i = 0; i < every.points.size(); ++i) {
    points.push_back({.time_s = every.points[i].cost.time_s,
                      .energy_j = every.points[i].cost.energy_j,
                      .payload = static_cast<int64_t>(i)});
  }
  const std::vector<pareto::Point> front = pareto::Filter(points);
  ASSERT_EQ(filtered.points.size(), front.size());
  for (std::size_t k = 0; k < front.size(); ++k) {
    // The result runs slowest first.
    const IterationPoint& a = filtered.points[k];
    const IterationPoint& b = every.points[front[front.size() - 1 - k].payload];
    EXPECT_EQ(a.cost.time_s, b.cost.time_s) << k;
    EXPECT_EQ(a.cost.energy_j, b.cost.energy_j) << k;
    EXPECT_EQ(a.deadline_s, b.deadline_s) << k;
    EXPECT_EQ(a.model_energy_j, b.model_energy_j) << k;
    EXPECT_EQ(a.choice, b.choice) << k;
  }
  EXPECT_EQ(filtered.summary.deadlines, every.summary.deadlines);
  EXPECT_EQ(filtered.summary.deadlines, static_cast<int64_t>(every.points.size()));
  EXPECT_EQ(filtered.summary.points_dominated,
            static_cast<int64_t>(every.points.size() - front.size()));
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
  Problem problem{.schedule = ScheduleKind::kInterleaved1F1B,
                  .num_stages = stages,
                  .num_microbatches = microbatches,
                  .num_chunks = chunks};
  problem.gradient_sync = schedule::GradientSync::kOverlapped;
  auto one = [](double t) {
    return std::vector<Alternative>{{.time_s = t, .energy_j = 200.0 * t}};
  };
  for (int u = 0; u < stages * chunks; ++u) {
    problem.forward_options.push_back(one(0.010 + 0.001 * u));
    problem.backward_options.push_back(one(0.020 + 0.002 * u));
  }
  for (int s = 0; s < stages; ++s) {
    problem.last_backward_options.push_back(one(0.050 + 0.003 * s));
    for (int c = 0; c < chunks; ++c)
      problem.gradient_sync_options.push_back(one(0.030 + 0.010 * s + 0.005 * c));
  }
  problem.gpus_per_stage = {2, 3};
  problem.p2p_time_s = 0.001;
  const Result result = Solve(problem, {.p_static_w = kStaticW});
  ASSERT_EQ(result.summary.status, Status::kReachedMinimumTime) << result.summary.message;
  ASSERT_EQ(result.points.size(), 1u);
  const Dag& dag = result.dag;
  ASSERT_EQ(static_cast<int>(dag.nodes.size()),
            2 * stages * chunks * microbatches + stages * chunks);
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

// The Pareto front of every assignment of `dag`'s 18 two-option nodes (the rest at their one
// option), by enumeration; empty (and a failure) when the DAG does not have 18 such nodes.
std::vector<pareto::Point> EnumeratedFront(const Problem& problem, const Dag& dag) {
  const std::size_t n = dag.nodes.size();
  std::vector<int> free_nodes;  // nodes with two options
  for (std::size_t v = 0; v < n; ++v) {
    if (OptionsOf(problem, dag, static_cast<int>(v)).size() == 2)
      free_nodes.push_back(static_cast<int>(v));
  }
  if (free_nodes.size() != 18u) {
    ADD_FAILURE() << free_nodes.size() << " two-option nodes, expected 18";
    return {};
  }
  std::vector<pareto::Point> all;  // every assignment: (time, energy)
  std::vector<int> choice(n, 0);
  for (uint32_t mask = 0; mask < (1u << free_nodes.size()); ++mask) {
    for (std::size_t i = 0; i < free_nodes.size(); ++i) choice[free_nodes[i]] = (mask >> i) & 1;
    const Evaluation e = Evaluate(problem, dag, choice, kStaticW);
    all.push_back({.time_s = e.time_s, .energy_j = e.energy_j});
  }
  return pareto::Filter(all);
}

// The least energy on `front` within `deadline_s` (infinity when none meets it).
double LeastWithin(const std::vector<pareto::Point>& front, double deadline_s) {
  double least = std::numeric_limits<double>::infinity();
  for (const pareto::Point& p : front) {
    if (p.time_s <= deadline_s + 1e-12) least = std::min(least, p.energy_j);
  }
  return least;
}

// Interleaved 1F1B with an overlapped gradient sync on a DAG small enough to enumerate every
// assignment: the fastest point is the true minimum time and every point is within a few
// percent of the least energy any assignment reaches within its time.
TEST(Solver, InterleavedWithGradientSyncAgainstEnumeration) {
  std::mt19937_64 rng(11);
  const int stages = 2, chunks = 2, microbatches = 2;
  Problem problem{.schedule = ScheduleKind::kInterleaved1F1B,
                  .num_stages = stages,
                  .num_microbatches = microbatches,
                  .num_chunks = chunks};
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
  ASSERT_EQ(result.dag.nodes.size(), 20u);
  const std::vector<pareto::Point> best = EnumeratedFront(problem, result.dag);
  ASSERT_FALSE(best.empty());
  EXPECT_NEAR(result.points.back().cost.time_s, best.front().time_s, 1e-12);
  for (const IterationPoint& point : result.points) {
    const double least = LeastWithin(best, point.cost.time_s);
    EXPECT_LE(point.cost.energy_j, least * 1.06) << "at " << point.cost.time_s << " s";
    EXPECT_GE(point.cost.energy_j, least - 1e-9);
  }
}

// Issue 17's exact search with issue 14's node kinds: interleaved 1F1B with a gradient sync at
// the end and overlapped, small enough to enumerate every assignment. The problem is small, so
// every grid deadline gets the exact search, whose completion bound groups a stage's chunks in
// one chain and counts the sync nodes alone: every point it proves (`exact`) must be the least
// energy of any assignment within the point's deadline (an invalid bound would prune that
// plan and "prove" a worse one), and every point's convex energy must stay a lower bound.
TEST(Solver, ExactSearchWithChunksAndGradientSyncAgainstEnumeration) {
  for (const auto sync : {schedule::GradientSync::kAtEnd, schedule::GradientSync::kOverlapped}) {
    SCOPED_TRACE(sync == schedule::GradientSync::kAtEnd ? "at end" : "overlapped");
    std::mt19937_64 rng(23);
    const int stages = 2, chunks = 2, microbatches = 2;
    Problem problem{.schedule = ScheduleKind::kInterleaved1F1B,
                    .num_stages = stages,
                    .num_microbatches = microbatches,
                    .num_chunks = chunks};
    problem.gradient_sync = sync;
    for (int u = 0; u < stages * chunks; ++u) {
      problem.forward_options.push_back(RandomOptions(rng, 0.010, 2));
      problem.backward_options.push_back(RandomOptions(rng, 0.020, 2));
    }
    for (int s = 0; s < stages; ++s) {
      if (sync == schedule::GradientSync::kOverlapped) {
        problem.last_backward_options.push_back(RandomOptions(rng, 0.030, 2));
        problem.gradient_sync_options.push_back(RandomOptions(rng, 0.015, 2));  // the tail
        problem.gradient_sync_options.push_back(RandomOptions(rng, 0.025, 1));  // chunk 1
      } else {
        problem.gradient_sync_options.push_back(RandomOptions(rng, 0.040, 2));
      }
    }
    problem.gpus_per_stage = {2, 1};
    problem.p2p_time_s = 0.0005;
    const Result result = Solve(problem, {.p_static_w = kStaticW});
    ASSERT_EQ(result.summary.status, Status::kReachedMinimumTime) << result.summary.message;
    const std::vector<pareto::Point> best = EnumeratedFront(problem, result.dag);
    ASSERT_FALSE(best.empty());
    EXPECT_NEAR(result.points.back().cost.time_s, best.front().time_s, 1e-12);
    int proven = 0;
    for (const IterationPoint& point : result.points) {
      const double least = LeastWithin(best, point.deadline_s);
      EXPECT_LE(point.cost.time_s, point.deadline_s + 1e-12);
      EXPECT_GE(point.cost.energy_j, least - 1e-9);
      EXPECT_LE(point.model_energy_j, least + 1e-9) << "at deadline " << point.deadline_s;
      if (point.exact) {
        ++proven;
        EXPECT_NEAR(point.cost.energy_j, least, 1e-9 * least) << "at deadline " << point.deadline_s;
      }
    }
    EXPECT_EQ(proven, static_cast<int>(result.points.size()));
  }
}

// Issue 33's pathology: on small problems (at most 160 node-options) the exact search ran at
// every deadline, and on an input fuzzer's profile (tests/pipeline/data, from
// ../shared/cases/) with 2 microbatches 737 of its 750 searches exhausted their 5 M budget and
// then ran a 5 M beam: 11.5 s against 0.01 s for 3 microbatches. Now one search covers the
// whole frontier (Summary::exact_frontier). The guard is the work the exact searches report
// (deterministic, unlike CPU time): measured 54 k at M = 1 and 29 M at M = 2 (0.86 s), against
// ~7.5 G before; the bound is generous. The same on random profiles with ties (identical rows,
// options of equal time), at most 15 M. Not covered, because it fails: the next instance of
// this generator (3 stages x 3 microbatches, ~7 options each) exhausts the whole-frontier
// search's budget, and its deadlines are then searched one by one as before (~11 s).
// Searching only every 2nd of them loses up to 0.14 % there, so that fallback stays.
TEST(Solver, SmallProblemsSearchTheirWholeFrontierOnce) {
  constexpr int64_t kGenerous = 400'000'000;
  struct Case {
    std::string name;
    Problem problem;
  };
  std::vector<Case> cases;
  for (int m = 1; m <= 4; ++m) {
    cases.push_back({"degenerate profile, M=" + std::to_string(m),
                     PerseusProfile("solver-degenerate-profile.csv", 2, m)});
  }
  std::mt19937_64 rng(33);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int instance = 0; instance < 5; ++instance) {
    Problem problem{.num_stages = 2 + instance % 2, .num_microbatches = 1 + instance % 3};
    for (int s = 0; s < problem.num_stages; ++s) {
      for (auto* list : {&problem.forward_options, &problem.backward_options}) {
        const double base = (list == &problem.forward_options ? 0.15 : 0.33) * (1 + 0.1 * s);
        std::vector<Alternative> options;
        for (int k = 0; k < 10; ++k) {
          const double draw = unit(rng);
          if (!options.empty() && draw < 0.3) {
            options.push_back(options.back());  // an identical row
          } else if (!options.empty() && draw < 0.5) {
            options.push_back({options.back().time_s, options.back().energy_j * 1.01});
          } else {
            const double t = base * (1 + 0.03 * k);
            options.push_back({t, 340.0 * base * base / t + 60.0 * t});
          }
        }
        list->push_back(std::move(options));
      }
    }
    cases.push_back({"random profile with ties " + std::to_string(instance), std::move(problem)});
  }
  for (const Case& c : cases) {
    const auto started = std::chrono::steady_clock::now();
    const Result result = Solve(c.problem, {.unit_time_s = 1e-3, .p_static_w = 85.0});
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    ASSERT_EQ(result.summary.status, Status::kReachedMinimumTime) << c.name;
    std::printf("%s: %zu points, exact search work %lld, whole frontier %s, %.3f s\n",
                c.name.c_str(), result.points.size(),
                static_cast<long long>(result.summary.exact_search_work),
                result.summary.exact_frontier ? "yes" : "no", wall_s);
    EXPECT_LE(result.summary.exact_search_work, kGenerous) << c.name;
    // Every small case (by the options as given, at least its node-options) searched its whole
    // frontier at once (3 and 4 microbatches of the degenerate profile are not small).
    const bool small = c.problem.num_microbatches * c.problem.num_stages * 2 *
                           static_cast<int>(c.problem.forward_options[0].size()) <=
                       160;
    if (small) {
      EXPECT_TRUE(result.summary.exact_frontier) << c.name;
    }
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
  EXPECT_NE(half.summary.message.find("last_backward_options"), std::string::npos)
      << half.summary.message;
  problem.gradient_sync = schedule::GradientSync::kAtEnd;
  problem.gradient_sync_options.clear();
  const Result missing = Solve(problem, {});
  EXPECT_EQ(missing.summary.status, Status::kInvalidInput);
  EXPECT_NE(missing.summary.message.find("gradient_sync_options"), std::string::npos)
      << missing.summary.message;
  problem.gradient_sync = schedule::GradientSync::kNone;
  problem.schedule = ScheduleKind::kInterleaved1F1B;  // one chunk: not an interleaved schedule
  const Result shape = Solve(problem, {});
  EXPECT_EQ(shape.summary.status, Status::kInvalidInput);
  EXPECT_NE(shape.summary.message.find("chunks"), std::string::npos) << shape.summary.message;
}

}  // namespace
}  // namespace kareus::pipeline
