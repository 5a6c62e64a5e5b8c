// SPDX-License-Identifier: Apache-2.0
// The descent part (src/pipeline/descent.cc): the cut's nodes, one move, the deadlines realized
// as the descent passes them.
#include <algorithm>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "pipeline/parts/engine_probe.h"

namespace kareus::pipeline::parts_test {
namespace {

using internal::Descent;

TEST(DescentTest, OnOneChainTheCutShortensTheCheapestNodeUpToItsNextVertex) {
  Harness h(LadderProblem(1, 1, 3));
  Engine& engine = h.Built();
  const double makespan = engine.ForwardPass();
  engine.BackwardPass(makespan);
  ASSERT_TRUE(engine.MaxFlow());
  const double delta = engine.SelectCut();
  const int cheapest = engine.SpecOf(0).slope.back() <= engine.SpecOf(1).slope.back() ? 0 : 1;
  ASSERT_EQ(EngineProbe::Shortened(engine), std::vector<int>{cheapest});
  const internal::Spec& spec = engine.SpecOf(cheapest);
  EXPECT_DOUBLE_EQ(delta, spec.hull_time.back() - spec.hull_time[spec.hull_time.size() - 2]);
  // Nothing else is critical, so nothing clamps the move.
  double clamped = delta;
  EXPECT_DOUBLE_EQ(engine.ClampMove(makespan, clamped), makespan - delta);
  EXPECT_EQ(clamped, delta);
}

TEST(DescentTest, AStepMovesTheMakespanDownAndKeepsGoingUntilTheFastest) {
  Harness h(LadderProblem(2, 3, 3));
  Engine& engine = h.Built();
  Descent d;
  d.one_deadline = true;  // no deadline is realized on the way (deadline_done stays false)
  d.makespan = engine.ForwardPass();
  const double slowest = d.makespan;
  engine.BackwardPass(d.makespan);
  double previous = d.makespan;
  int steps = 0;
  while (engine.DescentStep(d)) {
    EXPECT_LT(d.makespan, previous - 1e-12) << "step " << steps;
    previous = d.makespan;
    ++steps;
  }
  EXPECT_GT(steps, 1);
  EXPECT_EQ(d.status, Status::kReachedMinimumTime);
  EXPECT_TRUE(d.t_star_seen);
  EXPECT_LE(d.t_star, slowest);
  // The descent ends at the all-fastest makespan.
  std::vector<int> fastest(EngineProbe::Nodes(engine), 0);
  EXPECT_NEAR(d.makespan, engine.RealMakespan(fastest), 1e-9);
}

TEST(DescentTest, RealizePassedRecordsEveryDeadlineTheMoveReaches) {
  Harness h(LadderProblem(1, 2, 3));
  Engine& engine = h.Built();
  Descent d;
  d.t_min = 0.100;
  d.makespan = 0.1055;
  d.k_next = 5;  // deadlines 0.105, 0.104, ... (unit 1 ms)
  engine.RealizePassed(d, 0.0);
  EXPECT_EQ(EngineProbe::Points(engine).size(), 0u);  // 0.105 is not reached yet
  engine.RealizePassed(d, 0.0025);                    // down to 0.103
  ASSERT_EQ(EngineProbe::Points(engine).size(), 3u);
  EXPECT_NEAR(EngineProbe::Points(engine)[0].deadline_s, 0.105, 1e-12);
  EXPECT_NEAR(EngineProbe::Points(engine)[2].deadline_s, 0.103, 1e-12);
  EXPECT_EQ(EngineProbe::Points(engine)[2].quanta, 3);
  EXPECT_EQ(d.k_next, 2);
}

TEST(DescentTest, OneDeadlineIsRealizedOnce) {
  Problem problem = LadderProblem(1, 2, 3);
  Options options = StaticPower(80.0);
  options.deadline_s = 1.0;
  Harness h(problem, options);
  Engine& engine = h.Built();
  Descent d;
  d.one_deadline = true;
  d.makespan = 0.5;
  engine.RealizePassed(d, 0.0);
  engine.RealizePassed(d, 0.1);
  EXPECT_TRUE(d.deadline_done);
  ASSERT_EQ(EngineProbe::Points(engine).size(), 1u);
  EXPECT_EQ(EngineProbe::Points(engine)[0].quanta, -1);
}

TEST(DescentTest, RunStopsAtTheStepLimit) {
  Options options = StaticPower(80.0);
  options.max_steps = 1;
  Harness h(LadderProblem(2, 3, 4), options);
  const Result result = h.engine().Run();
  EXPECT_EQ(result.summary.status, Status::kStepLimit);
  EXPECT_EQ(result.summary.steps, 1);
}

}  // namespace
}  // namespace kareus::pipeline::parts_test
