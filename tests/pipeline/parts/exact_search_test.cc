// SPDX-License-Identifier: Apache-2.0
// The exact search part (src/pipeline/exact_search.cc): ExactAt against brute force, its
// preparation, the beam, fixed nodes and the neighbourhood search.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "pipeline/parts/engine_probe.h"

namespace kareus::pipeline::parts_test {
namespace {

// The least energy of every plan (front indices) with makespan <= deadline; nodes with
// fixed[v] >= 0 keep that index.
double BruteForce(Engine& engine, double deadline, const std::vector<int>& fixed) {
  const int n = EngineProbe::Nodes(engine);
  std::vector<int> choice(n, 0);
  for (int v = 0; v < n; ++v) choice[v] = std::max(fixed[v], 0);
  double best = INFINITY;
  for (;;) {
    if (engine.RealMakespan(choice) <= deadline + 1e-12)
      best = std::min(best, engine.Energy(choice));
    int v = 0;
    for (; v < n; ++v) {
      if (fixed[v] >= 0) continue;
      if (++choice[v] < static_cast<int>(engine.SpecOf(v).time.size())) break;
      choice[v] = 0;
    }
    if (v == n) return best;
  }
}

class ExactSearchTest : public ::testing::TestWithParam<int> {
 protected:
  // 2 stages x 2 microbatches (8 nodes, 3 options each: 6561 plans), transfers between stages.
  static Problem Small() {
    Problem problem = LadderProblem(2, 2, 3);
    problem.p2p_time_s = 0.002;
    return problem;
  }
};

TEST_P(ExactSearchTest, FindsTheBruteForceOptimumAndProvesIt) {
  Harness h(Small());
  Engine& engine = h.Built();
  const int n = EngineProbe::Nodes(engine);
  std::vector<int> choice(n, 0);
  const double t_min = engine.RealMakespan(choice);
  const double deadline = t_min * (1.0 + 0.04 * GetParam());
  ASSERT_TRUE(engine.ExactAt(50'000'000, deadline, choice, 0));
  EXPECT_LE(engine.RealMakespan(choice), deadline + 1e-12);
  const double best = BruteForce(engine, deadline, std::vector<int>(n, -1));
  EXPECT_NEAR(engine.Energy(choice), best, 1e-9 * best);
}

TEST_P(ExactSearchTest, KeepsFixedNodesAndIsOptimalOverTheRest) {
  Harness h(Small());
  Engine& engine = h.Built();
  const int n = EngineProbe::Nodes(engine);
  std::vector<int> choice(n, 0);
  const double deadline = engine.RealMakespan(choice) * (1.0 + 0.04 * GetParam());
  std::vector<int> fixed(n, -1);
  std::vector<char> free_nodes(n, 1);
  for (int v = 0; v < n; v += 3) {
    fixed[v] = 0;  // at the incumbent's option
    free_nodes[v] = 0;
  }
  ASSERT_TRUE(engine.ExactAt(50'000'000, deadline, choice, 0, &free_nodes));
  for (int v = 0; v < n; v += 3) EXPECT_EQ(choice[v], 0) << "node " << v;
  const double best = BruteForce(engine, deadline, fixed);
  EXPECT_NEAR(engine.Energy(choice), best, 1e-9 * best);
}

INSTANTIATE_TEST_SUITE_P(Deadlines, ExactSearchTest, ::testing::Values(0, 1, 3, 6, 12));

TEST(ExactSearchPrepareTest, PlacesNodesInATopologicalOrderAndKnowsTheirLastUse) {
  Harness h(LadderProblem(3, 3, 2));
  Engine& engine = h.Built();
  const int n = EngineProbe::Nodes(engine);
  const std::vector<int> choice(n, 0);
  const internal::ExactSearch x = engine.PrepareExact(1.0, choice, nullptr);
  std::vector<int> position(n);
  for (int k = 0; k < n; ++k) position[x.order[k]] = k;
  for (const schedule::DagEdge& e : EngineProbe::DagOf(engine).edges) {
    EXPECT_LT(position[e.from], position[e.to]);
    EXPECT_GE(x.last_use[e.from], position[e.to]);
  }
  for (int v = 0; v < n; ++v) {
    EXPECT_EQ(x.first[v], 0u);
    EXPECT_EQ(x.end[v], engine.SpecOf(v).time.size());
    // head + own fastest time + tail is at most the fastest makespan, equal on a critical node.
    EXPECT_LE(x.head[v] + engine.SpecOf(v).time[0] + x.tail[v],
              engine.RealMakespan(choice) + 1e-12);
  }
  EXPECT_EQ(x.table.size(), EngineProbe::Chains(engine).size());
}

TEST(ExactSearchPrepareTest, TheCompletionBoundNeverExceedsAChainsCheapestFit) {
  Harness h(LadderProblem(1, 2, 3));
  Engine& engine = h.Built();
  const int n = EngineProbe::Nodes(engine);
  std::vector<int> cheapest(n);
  double eff = 0.0;
  for (int v = 0; v < n; ++v) {
    cheapest[v] = static_cast<int>(engine.SpecOf(v).time.size()) - 1;
    eff += engine.SpecOf(v).eff.back();
  }
  const double slowest = engine.RealMakespan(cheapest);
  const internal::ExactSearch x = engine.PrepareExact(slowest, cheapest, nullptr);
  // The whole chain, free from 0, within the slowest makespan: at most every node's cheapest.
  EXPECT_LE(engine.ChainBound(x, 0, 0, 0.0), eff + 1e-9);
  // No time at all: impossible.
  EXPECT_EQ(engine.ChainBound(x, 0, 0, slowest + 1.0), INFINITY);
}

TEST(ExactSearchBeamTest, TheBeamNeverClaimsAProofAndNeverWorsensThePlan) {
  Harness h(LadderProblem(2, 3, 3));
  Engine& engine = h.Built();
  const int n = EngineProbe::Nodes(engine);
  std::vector<int> choice(n, 0);
  const double deadline = engine.RealMakespan(choice) * 1.1;
  const double before = engine.Energy(choice);
  EXPECT_FALSE(engine.ExactAt(50'000'000, deadline, choice, 4));
  EXPECT_LE(engine.Energy(choice), before);
  EXPECT_LE(engine.RealMakespan(choice), deadline + 1e-12);
  // Past its budget the exact search gives up and keeps the plan.
  std::vector<int> kept(n, 0);
  EXPECT_FALSE(engine.ExactAt(1, deadline, kept, 0));
  EXPECT_EQ(kept, std::vector<int>(n, 0));
}

TEST(NeighborhoodSearchTest, NeverLosesEnergyOrTheDeadline) {
  Harness h(LadderProblem(3, 3, 3));
  Engine& engine = h.Built();
  const int n = EngineProbe::Nodes(engine);
  std::vector<int> choice(n, 0);
  const double deadline = engine.RealMakespan(choice) * 1.15;
  const double before = engine.Energy(choice);
  const bool moved = engine.NeighborhoodSearch(choice, deadline, 2);
  EXPECT_TRUE(moved);  // from the all-fastest plan there is slack to use
  EXPECT_LT(engine.Energy(choice), before);
  EXPECT_LE(engine.RealMakespan(choice), deadline + 1e-12);
}

// Every plan's (makespan, energy) (front indices enumerated), as a staircase: at each makespan
// the least energy of the plans no slower.
std::vector<std::pair<double, double>> BruteForceFrontier(Engine& engine) {
  const int n = EngineProbe::Nodes(engine);
  std::vector<std::pair<double, double>> plans;
  std::vector<int> choice(n, 0);
  for (;;) {
    plans.emplace_back(engine.RealMakespan(choice), engine.Energy(choice));
    int v = 0;
    for (; v < n; ++v) {
      if (++choice[v] < static_cast<int>(engine.SpecOf(v).time.size())) break;
      choice[v] = 0;
    }
    if (v == n) break;
  }
  std::sort(plans.begin(), plans.end());
  for (std::size_t i = 1; i < plans.size(); ++i)
    plans[i].second = std::min(plans[i].second, plans[i - 1].second);
  return plans;
}

double StaircaseAt(const std::vector<std::pair<double, double>>& stairs, double t) {
  const auto it = std::upper_bound(stairs.begin(), stairs.end(),
                                   std::make_pair(t, std::numeric_limits<double>::infinity()));
  return it == stairs.begin() ? INFINITY : std::prev(it)->second;
}

struct FrontierCase {
  int stages;
  int microbatches;
  int options;
};

class ExactFrontierTest : public ::testing::TestWithParam<FrontierCase> {};

// Small problems search every deadline at once (Engine::ExactFrontier): each realized point is
// the least energy of every plan at its deadline, and so is the frontier at every deadline of
// the grid. The options are the ladder's with a deterministic jitter (not convex, so the convex
// descent's plans are not optimal and the search has work to do).
TEST_P(ExactFrontierTest, EveryDeadlineGetsTheBruteForceOptimum) {
  const FrontierCase c = GetParam();
  Problem problem = LadderProblem(c.stages, c.microbatches, c.options);
  problem.p2p_time_s = 0.0015;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> jitter(0.97, 1.03);
  for (auto* list : {&problem.forward_options, &problem.backward_options}) {
    for (auto& options : *list) {
      for (Alternative& a : options) a.energy_j *= jitter(rng);
    }
  }
  Options options = StaticPower(80.0);
  options.unit_time_s = 5e-4;
  Harness solved(problem, options);
  const Result result = solved.engine().Run();
  ASSERT_EQ(result.summary.status, Status::kReachedMinimumTime);
  ASSERT_TRUE(result.summary.exact_frontier);
  Harness h(problem, options);
  Engine& engine = h.Built();
  const auto stairs = BruteForceFrontier(engine);
  int better_than_convex = 0;
  for (const IterationPoint& point : result.points) {
    EXPECT_TRUE(point.exact);
    EXPECT_LE(point.cost.time_s, point.deadline_s + 1e-12);
    const double best = StaircaseAt(stairs, point.deadline_s + 1e-12);
    EXPECT_NEAR(point.cost.energy_j, best, 1e-9 * best) << "deadline " << point.deadline_s;
  }
  const double t_min = result.summary.min_time_s;
  for (double t = t_min; t <= result.summary.max_time_s; t += options.unit_time_s) {
    double ours = INFINITY;
    for (const IterationPoint& point : result.points) {
      if (point.cost.time_s <= t + 1e-12) ours = std::min(ours, point.cost.energy_j);
    }
    const double best = StaircaseAt(stairs, t + 1e-12);
    EXPECT_NEAR(ours, best, 1e-9 * best) << "deadline " << t;
  }
  // The same descent without the searches is worse somewhere (else this proves nothing). Without
  // the dynamic program's plans (each point keeping the best realized plan, marked exact) all
  // three shapes fail the checks above.
  options.reclaim_slack = false;
  Harness convex(problem, options);
  for (const IterationPoint& point : convex.engine().Run().points) {
    better_than_convex +=
        point.cost.energy_j > StaircaseAt(stairs, point.deadline_s + 1e-12) * (1 + 1e-6) ? 1 : 0;
  }
  EXPECT_GT(better_than_convex, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ExactFrontierTest,
                         ::testing::Values(FrontierCase{2, 2, 5}, FrontierCase{3, 2, 3},
                                           FrontierCase{2, 3, 3}));

// KeepUndominated's exact mode (the staircase for at most two dimensions, beyond the ordered
// sums or, on large layers, the tree) keeps exactly the states the plain pairwise scan keeps, and
// without `measured` counts the same work: the same total, and a budget runs out at the same
// candidate (the last, the middle) with the same states kept (ExactAt's budget: the same plans
// as before). Energies are distinct (the order of equal ones is the sort's); the times lie on a
// coarse grid, some moved by half the tolerance, so ties within it occur.
TEST(KeepUndominatedTest, KeepsWhatThePairwiseScanKeeps) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int cases = 0;
  for (int d_from = 0; d_from <= 3; ++d_from) {
    for (int d_to = 0; d_to <= 3; ++d_to) {
      for (int shape = 0; shape < 4; ++shape) {
        const bool same_makespan = shape % 2 == 1;
        // Past internal::kTreeCandidates candidates, the tree (else the ordered sums).
        const int count = shape < 2 ? 600 : static_cast<int>(internal::kTreeCandidates) + 900;
        Harness h(LadderProblem(2, 2, 3));
        Engine& engine = h.Built();
        const double tol = EngineProbe::TimeTolerance(engine);
        internal::ExactLayer from;
        internal::ExactStep step;
        for (int i = 0; i < d_from; ++i) from.open.push_back(i);
        const int parents = 40;
        for (int s = 0; s < parents; ++s) {
          // On a coarse grid: ties between states and candidates, within the tolerance or not.
          for (int i = 0; i < d_from; ++i) from.finish.push_back(std::floor(unit(rng) * 8) * 0.01);
          from.energy.push_back(0.0);
        }
        internal::ExactLayer to;
        for (int i = 0; i < d_to; ++i) {
          to.open.push_back(10 + i);
          step.source.push_back(d_from == 0 || i == d_to - 1 ? -1 : i % d_from);
        }
        std::vector<internal::ExactCandidate> candidates;
        for (int c = 0; c < count; ++c) {
          candidates.push_back(
              {.energy = unit(rng) * 100.0,  // distinct: the sort's order is the reference's
               .parent = static_cast<int>(unit(rng) * parents),
               .option = c,
               .makespan = same_makespan ? 0.5 : std::floor(unit(rng) * 8) * 0.01,
               .finish = std::floor(unit(rng) * 8) * 0.01 + (unit(rng) < 0.3 ? tol / 2 : 0.0),
               .low = 0.0});
        }
        // The reference: cheapest first, each against every state kept so far.
        std::vector<internal::ExactCandidate> sorted = candidates;
        std::sort(sorted.begin(), sorted.end(),
                  [](const auto& a, const auto& b) { return a.energy < b.energy; });
        std::vector<int> kept_options;
        std::vector<std::vector<double>> kept;  // per kept state: its finishes, then makespan
        int64_t reference_work = 0;
        // At the middle candidate: the work counted once it is reached, and the states kept
        // before it.
        const std::size_t middle = sorted.size() / 2;
        int64_t middle_work = 0;
        std::vector<int> kept_before_middle;
        for (const auto& c : sorted) {
          if (&c == &sorted[middle]) kept_before_middle = kept_options;
          std::vector<double> vec;
          for (int i = 0; i < d_to; ++i) {
            vec.push_back(step.source[i] < 0 ? c.finish
                                             : from.finish[c.parent * d_from + step.source[i]]);
          }
          vec.push_back(c.makespan);
          reference_work += static_cast<int64_t>(kept.size()) + 1;
          if (&c == &sorted[middle]) middle_work = reference_work;
          bool dominated = false;
          for (const auto& q : kept) {
            bool no_later = true;
            for (std::size_t i = 0; i < vec.size(); ++i) no_later &= q[i] <= vec[i] + tol;
            dominated |= no_later;
          }
          if (dominated) continue;
          kept.push_back(vec);
          kept_options.push_back(c.option);
        }
        for (bool measured : {false, true}) {
          internal::ExactLayer out;
          out.open = to.open;
          std::vector<internal::ExactCandidate> work_list = candidates;
          int64_t work = 0;
          ASSERT_TRUE(engine.KeepUndominated(
              from, step, work_list, 0, std::numeric_limits<int64_t>::max(), measured, work, out));
          EXPECT_EQ(out.option, kept_options)
              << "d_from " << d_from << " d_to " << d_to << " same makespan " << same_makespan;
          if (!measured) {
            EXPECT_EQ(work, reference_work);
          }
          // Past the budget: false at the same candidate as the reference, the last one or the
          // middle one, with the states kept before it.
          for (const int64_t budget : {reference_work - 1, middle_work - 1}) {
            if (measured) break;
            internal::ExactLayer short_out;
            short_out.open = to.open;
            work_list = candidates;
            int64_t short_work = 0;
            EXPECT_FALSE(engine.KeepUndominated(from, step, work_list, 0, budget, measured,
                                                short_work, short_out));
            if (budget == middle_work - 1) {
              EXPECT_EQ(short_out.option, kept_before_middle);
            }
          }
        }
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 64);
}

}  // namespace
}  // namespace kareus::pipeline::parts_test
