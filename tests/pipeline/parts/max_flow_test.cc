// SPDX-License-Identifier: Apache-2.0
// The max-flow part (src/pipeline/max_flow.cc): capacities, the backward pass's critical arcs and
// the warm-started max-flow's minimum cut.
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "pipeline/parts/engine_probe.h"

namespace kareus::pipeline::parts_test {
namespace {

TEST(MaxFlowTest, CapacityAtTheSlowestVertexIsTheLastSegmentsSlopeUpAndNothingDown) {
  Harness h(LadderProblem(1, 1, 3));
  Engine& engine = h.Built();
  for (int v = 0; v < EngineProbe::Nodes(engine); ++v) {
    EXPECT_EQ(EngineProbe::Up(engine)[v], engine.SpecOf(v).slope.back()) << "node " << v;
  }
}

// Independent longest paths: activity v is critical when its latest start equals its earliest.
std::vector<char> CriticalActivities(Engine& engine, double tol) {
  const schedule::Dag& dag = EngineProbe::DagOf(engine);
  const int n = EngineProbe::Nodes(engine);
  const std::vector<double>& dur = EngineProbe::Durations(engine);
  const schedule::Timing timing = schedule::StartTimes(dag, dur, 0.0);
  std::vector<double> latest_finish(n, timing.makespan);
  for (auto it = dag.topological_order.rbegin(); it != dag.topological_order.rend(); ++it) {
    for (const schedule::DagEdge& e : dag.edges) {
      if (e.from == *it)
        latest_finish[*it] = std::min(latest_finish[*it], latest_finish[e.to] - dur[e.to]);
    }
  }
  std::vector<char> critical(n);
  for (int v = 0; v < n; ++v) {
    critical[v] = latest_finish[v] - timing.finish[v] <= tol ? 1 : 0;
  }
  return critical;
}

TEST(MaxFlowTest, BackwardPassMarksExactlyTheActivitiesWithoutSlack) {
  Harness h(LadderProblem(3, 4));
  Engine& engine = h.Built();
  engine.BackwardPass(engine.ForwardPass());
  const std::vector<char> expected = CriticalActivities(engine, EngineProbe::TimeTolerance(engine));
  int critical = 0;
  for (int v = 0; v < EngineProbe::Nodes(engine); ++v) {
    EXPECT_EQ(EngineProbe::Critical(engine)[v], expected[v]) << "node " << v;
    critical += expected[v];
  }
  // Stages of different lengths: some activity has slack, some has none.
  EXPECT_GT(critical, 0);
  EXPECT_LT(critical, EngineProbe::Nodes(engine));
}

TEST(MaxFlowTest, OnOneChainTheMaximumFlowIsTheCheapestShortening) {
  // One stage, one microbatch: forward then backward, one path: the minimum cut is the node
  // cheapest to shorten.
  Harness h(LadderProblem(1, 1, 3));
  Engine& engine = h.Built();
  engine.BackwardPass(engine.ForwardPass());
  ASSERT_TRUE(engine.MaxFlow());
  EXPECT_DOUBLE_EQ(EngineProbe::FlowValue(engine),
                   std::min(engine.SpecOf(0).slope.back(), engine.SpecOf(1).slope.back()));
  EXPECT_TRUE(engine.SideMatchesFreshBfs());
}

TEST(MaxFlowTest, FlowIsUnboundedWhenEveryNodeIsAtItsFastest) {
  // One option per class: nothing can be shortened.
  Harness h(LadderProblem(2, 2, 1));
  Engine& engine = h.Built();
  engine.BackwardPass(engine.ForwardPass());
  EXPECT_FALSE(engine.MaxFlow());
}

TEST(MaxFlowTest, TheKeptSourceSideMatchesAFreshSearchAfterEveryMove) {
  Problem problem = LadderProblem(3, 6, 4);
  problem.p2p_time_s = 0.001;
  Options options = StaticPower(80.0);
  options.check_incremental_cuts = true;
  Harness h(problem, options);
  const Result result = h.engine().Run();
  EXPECT_EQ(result.summary.status, Status::kReachedMinimumTime);
  EXPECT_GT(result.summary.incremental_cuts_checked, 0);
  EXPECT_EQ(result.summary.incremental_cut_mismatches, 0);
  EXPECT_EQ(result.summary.skipped_pass_mismatches, 0);
}

}  // namespace
}  // namespace kareus::pipeline::parts_test
