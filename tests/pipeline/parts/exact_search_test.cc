// SPDX-License-Identifier: Apache-2.0
// The exact search part (src/pipeline/exact_search.cc): ExactAt against brute force, its
// preparation, the beam, fixed nodes and the neighbourhood search.
#include <algorithm>
#include <cmath>
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

}  // namespace
}  // namespace kareus::pipeline::parts_test
