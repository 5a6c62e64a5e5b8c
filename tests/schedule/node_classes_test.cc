// SPDX-License-Identifier: Apache-2.0
#include "kareus/schedule/node_classes.h"

#include <set>
#include <vector>

#include <gtest/gtest.h>

namespace kareus::schedule {
namespace {

TEST(NodeClassesTest, SyncNodesPerStageFollowsTheGradientSync) {
  EXPECT_EQ(SyncNodesPerStage(GradientSync::kNone, 3), 0);
  EXPECT_EQ(SyncNodesPerStage(GradientSync::kAtEnd, 3), 1);
  EXPECT_EQ(SyncNodesPerStage(GradientSync::kOverlapped, 3), 3);
  EXPECT_EQ(BuildDag(ScheduleKind::kInterleaved1F1B, 2, 4, 2, GradientSync::kOverlapped)
                .SyncNodesPerStage(),
            2);
}

// The layout is pinned: 2 per unit, then a last backward per stage, then the syncs.
TEST(NodeClassesTest, ClassIdsArePinned) {
  const NodeClasses classes(3, 2, GradientSync::kOverlapped);
  EXPECT_EQ(classes.NumUnits(), 6);
  EXPECT_EQ(classes.Count(), 12 + 3 + 6);
  EXPECT_EQ(classes.ForwardClass(4), 8);
  EXPECT_EQ(classes.BackwardClass(4), 9);
  EXPECT_EQ(classes.LastBackwardClass(2), 14);
  EXPECT_EQ(classes.SyncClass(1, 1), 18);
  EXPECT_EQ(classes.Get(9), (NodeClass{NodeClassKind::kBackward, 2, 0, 4}));
  EXPECT_EQ(classes.Get(14), (NodeClass{NodeClassKind::kLastBackward, 2, 0, 2}));
  EXPECT_EQ(classes.Get(18), (NodeClass{NodeClassKind::kGradientSync, 1, 1, 3}));
  for (int cls = 0; cls < classes.Count(); ++cls) {
    const NodeClass c = classes.Get(cls);
    EXPECT_EQ(classes.StageOf(cls), c.stage);
  }
}

// Every DAG node maps to the class of its kind, stage and chunk; the classes the DAG uses are
// exactly the ones its gradient sync has.
TEST(NodeClassesTest, EveryNodeHasItsClass) {
  for (const GradientSync sync :
       {GradientSync::kNone, GradientSync::kAtEnd, GradientSync::kOverlapped}) {
    const Dag dag = BuildDag(ScheduleKind::kInterleaved1F1B, 2, 4, 2, sync);
    const NodeClasses classes(dag);
    std::set<int> used;
    for (int v = 0; v < static_cast<int>(dag.nodes.size()); ++v) {
      const DagNode& n = dag.nodes[static_cast<std::size_t>(v)];
      const int cls = classes.Of(dag, v);
      ASSERT_GE(cls, 0);
      ASSERT_LT(cls, classes.Count());
      used.insert(cls);
      const NodeClass c = classes.Get(cls);
      EXPECT_EQ(c.stage, n.stage);
      if (n.node == NodeKind::kGradientSync) {
        EXPECT_EQ(c.kind, NodeClassKind::kGradientSync);
        EXPECT_EQ(c.chunk, n.chunk);
        EXPECT_EQ(v, dag.GradientSyncNode(n.stage, n.chunk));
      } else if (dag.LaunchesGradientSync(v)) {
        EXPECT_EQ(c.kind, NodeClassKind::kLastBackward);
      } else {
        EXPECT_EQ(c.kind, n.kind == Direction::kForward ? NodeClassKind::kForward
                                                        : NodeClassKind::kBackward);
        EXPECT_EQ(c.index, n.stage * 2 + n.chunk);
      }
    }
    const int last_backwards = sync == GradientSync::kOverlapped ? 2 : 0;
    EXPECT_EQ(static_cast<int>(used.size()), classes.Count() - 2 + last_backwards);
  }
}

TEST(NodeClassesTest, SelectPicksTheKindsList) {
  const NodeClasses classes(2, 1, GradientSync::kAtEnd);
  const std::vector<int> forward{10, 11}, backward{20, 21}, last{30, 31}, sync{40, 41};
  const std::vector<int> picked = {
      NodeClasses::Select(classes.Get(classes.ForwardClass(1)), forward, backward, last, sync),
      NodeClasses::Select(classes.Get(classes.BackwardClass(0)), forward, backward, last, sync),
      NodeClasses::Select(classes.Get(classes.LastBackwardClass(1)), forward, backward, last, sync),
      NodeClasses::Select(classes.Get(classes.SyncClass(1, 0)), forward, backward, last, sync)};
  EXPECT_EQ(picked, (std::vector<int>{11, 20, 31, 41}));
}

}  // namespace
}  // namespace kareus::schedule
