// SPDX-License-Identifier: Apache-2.0
// The model part (src/pipeline/model.cc): specs, node classes, the adjacency and the
// activity-on-arc network BuildModel makes.
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "pipeline/parts/engine_probe.h"

namespace kareus::pipeline::parts_test {
namespace {

using internal::BuildSpec;
using internal::Spec;

TEST(ModelTest, SpecKeepsTheEffectiveEnergyFrontAndItsConvexHull) {
  // (time, energy) on 2 GPUs at 50 W static: effective energy 2 (E - 50 t).
  const std::vector<Alternative> options = {
      {.time_s = 1.0, .energy_j = 200.0},  // eff 300
      {.time_s = 2.0, .energy_j = 200.0},  // eff 200
      {.time_s = 2.5, .energy_j = 300.0},  // eff 350: dominated
      {.time_s = 3.0, .energy_j = 240.0},  // eff 180: above the hull of (2, 200)-(4, 100)
      {.time_s = 4.0, .energy_j = 250.0},  // eff 100
  };
  const Spec spec = BuildSpec(options, 2, 50.0, 1e-9);
  EXPECT_EQ(spec.time, (std::vector<double>{1.0, 2.0, 3.0, 4.0}));
  EXPECT_EQ(spec.eff, (std::vector<double>{300.0, 200.0, 180.0, 100.0}));
  EXPECT_EQ(spec.option, (std::vector<int>{0, 1, 3, 4}));
  EXPECT_EQ(spec.hull_time, (std::vector<double>{1.0, 2.0, 4.0}));
  EXPECT_EQ(spec.slope, (std::vector<double>{100.0, 50.0}));
  EXPECT_EQ(spec.last_vertex(), 2);
  EXPECT_EQ(spec.option_eff.size(), options.size());
  // Fit: the cheapest front entry no slower than d; Cost: the hull, flat outside it.
  EXPECT_EQ(spec.Fit(2.9), 1);
  EXPECT_EQ(spec.Fit(3.0), 2);
  EXPECT_EQ(spec.Fit(0.5), 0);
  EXPECT_DOUBLE_EQ(spec.Cost(3.0), 150.0);
  EXPECT_DOUBLE_EQ(spec.Cost(0.5), 300.0);
  EXPECT_DOUBLE_EQ(spec.Cost(9.0), 100.0);
}

TEST(ModelTest, SpecMergesNearEqualTimesInTheModelOnly) {
  const std::vector<Alternative> options = {{.time_s = 1.0, .energy_j = 10.0},
                                            {.time_s = 1.0 + 1e-7, .energy_j = 9.0}};
  const Spec merged = BuildSpec(options, 1, 0.0, 1e-6);
  EXPECT_EQ(merged.time.size(), 2u);  // the real front keeps both
  ASSERT_EQ(merged.hull_time.size(), 1u);
  EXPECT_EQ(merged.hull_time[0], 1.0);  // at the faster time,
  EXPECT_EQ(merged.hull_eff[0], 9.0);   // the cheaper energy
  EXPECT_EQ(BuildSpec(options, 1, 0.0, 1e-9).hull_time.size(), 2u);
}

TEST(ModelTest, BuildModelMakesOneActivityArcPerNodeAndOneArcPerEdge) {
  Harness h(LadderProblem(2, 3));
  Engine& engine = h.Built();
  const int n = EngineProbe::Nodes(engine);
  const schedule::Dag& dag = EngineProbe::DagOf(engine);
  ASSERT_EQ(n, 2 * 2 * 3);
  int source_arcs = 0;
  for (int v = 0; v < n; ++v) {
    const bool no_preds =
        EngineProbe::Preds(engine).start[v] == EngineProbe::Preds(engine).start[v + 1];
    const bool no_succs =
        EngineProbe::Succs(engine).start[v] == EngineProbe::Succs(engine).start[v + 1];
    EXPECT_EQ(EngineProbe::SourceArc(engine)[v] >= 0, no_preds) << "node " << v;
    EXPECT_EQ(EngineProbe::SinkArc(engine)[v] >= 0, no_succs) << "node " << v;
    source_arcs += no_preds ? 1 : 0;
    EXPECT_EQ(EngineProbe::ArcAct(engine)[v], v);  // activity arcs first
  }
  // 1F1B on 2 stages: only the first forward of stage 0 starts the DAG.
  EXPECT_EQ(source_arcs, 1);
  const int sink_arcs = static_cast<int>(EngineProbe::SinkNodes(engine).size());
  EXPECT_EQ(EngineProbe::NumArcs(engine),
            n + static_cast<int>(dag.edges.size()) + source_arcs + sink_arcs);
  // Every node starts at its cheapest (slowest) hull vertex.
  for (int v = 0; v < n; ++v) {
    EXPECT_EQ(EngineProbe::Durations(engine)[v], engine.SpecOf(v).hull_time.back());
  }
  EXPECT_DOUBLE_EQ(EngineProbe::StaticPower(engine), 80.0 * 2);
  EXPECT_GT(EngineProbe::TimeTolerance(engine), 0.0);
}

TEST(ModelTest, AdjacencyCarriesTheTransferTimeOnCrossStageEdgesOnly) {
  Problem problem = LadderProblem(2, 2);
  problem.p2p_time_s = 0.004;
  Harness h(problem);
  Engine& engine = h.Built();
  const schedule::Dag& dag = EngineProbe::DagOf(engine);
  const internal::Adjacency& preds = EngineProbe::Preds(engine);
  int cross = 0;
  for (const schedule::DagEdge& e : dag.edges) {
    bool found = false;
    for (int i = preds.start[e.to]; i < preds.start[e.to + 1]; ++i) {
      if (preds.node[i] != e.from) continue;
      found = true;
      EXPECT_EQ(preds.lag[i], e.cross_stage ? 0.004 : 0.0);
    }
    EXPECT_TRUE(found);
    cross += e.cross_stage ? 1 : 0;
  }
  EXPECT_GT(cross, 0);
}

TEST(ModelTest, EvaluateWithChargesStaticPowerForTheWholeIterationOnEveryGpu) {
  Problem problem = LadderProblem(1, 1, 1);
  problem.gpus_per_stage = {4};
  schedule::Dag dag = schedule::BuildDag(problem.schedule, 1, 1);
  const Evaluation cost = internal::EvaluateWith(problem, dag, {0, 0}, 80.0);
  const Alternative& f = problem.forward_options[0][0];
  const Alternative& b = problem.backward_options[0][0];
  EXPECT_DOUBLE_EQ(cost.time_s, f.time_s + b.time_s);
  EXPECT_DOUBLE_EQ(cost.energy_j, 4 * (f.energy_j + b.energy_j));
  EXPECT_DOUBLE_EQ(cost.static_energy_j, 80.0 * cost.time_s * 4);
}

}  // namespace
}  // namespace kareus::pipeline::parts_test
