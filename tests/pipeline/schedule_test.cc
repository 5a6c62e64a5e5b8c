// SPDX-License-Identifier: Apache-2.0
#include "kareus/pipeline/schedule.h"

#include <set>
#include <string>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>

namespace kareus::pipeline {
namespace {

std::string Token(char kind, int microbatch) {
  std::string token(1, kind);
  token += std::to_string(microbatch);
  return token;
}

// Megatron-LM's forward_backward_pipelining_without_interleaving, transcribed as its loop
// structure (warm-up, steady state with one forward then one backward, cool-down), producing
// "F3"/"B3" tokens for one pipeline rank.
std::vector<std::string> MegatronOrder(int pipeline_size, int rank, int num_microbatches) {
  int num_warmup = pipeline_size - rank - 1;
  if (num_warmup > num_microbatches) num_warmup = num_microbatches;
  const int num_remaining = num_microbatches - num_warmup;
  std::vector<std::string> out;
  int fwd = 0;
  int bwd = 0;
  for (int i = 0; i < num_warmup; ++i) out.push_back(Token('F', fwd++));
  for (int i = 0; i < num_remaining; ++i) {
    out.push_back(Token('F', fwd++));
    out.push_back(Token('B', bwd++));
  }
  for (int i = 0; i < num_warmup; ++i) out.push_back(Token('B', bwd++));
  return out;
}

std::vector<std::string> Tokens(const std::vector<Instruction>& list) {
  std::vector<std::string> out;
  for (const Instruction& inst : list) {
    out.push_back(Token(inst.kind == InstructionKind::kForward ? 'F' : 'B', inst.microbatch));
  }
  return out;
}

TEST(Schedule, OneFOneBMatchesMegatron) {
  for (auto [stages, microbatches] :
       std::vector<std::pair<int, int>>{{2, 8}, {4, 8}, {8, 16}, {4, 2}, {1, 3}, {3, 3}}) {
    const auto order = BuildSchedule(ScheduleKind::k1F1B, stages, microbatches);
    ASSERT_EQ(static_cast<int>(order.size()), stages);
    for (int s = 0; s < stages; ++s) {
      EXPECT_EQ(Tokens(order[s]), MegatronOrder(stages, s, microbatches))
          << "S=" << stages << " M=" << microbatches << " stage " << s;
    }
  }
}

TEST(Schedule, PublishedTwoStageExample) {
  // reference/kareus-official.md §4.5: stage 0: F0 F1 B0 F2 B1 ... F7 B6 B7.
  const auto order = BuildSchedule(ScheduleKind::k1F1B, 2, 8);
  const auto s0 = Tokens(order[0]);
  EXPECT_EQ(s0[0], "F0");
  EXPECT_EQ(s0[1], "F1");
  EXPECT_EQ(s0[2], "B0");
  EXPECT_EQ(s0[15], "B7");
  EXPECT_EQ(Tokens(order[1])[1], "B0");
}

TEST(Schedule, GPipeRunsAllForwardsFirst) {
  const auto order = BuildSchedule(ScheduleKind::kGPipe, 3, 4);
  for (const auto& list : order) {
    EXPECT_EQ(Tokens(list), (std::vector<std::string>{"F0", "F1", "F2", "F3", "B0", "B1", "B2",
                                                      "B3"}));
  }
}

TEST(Schedule, DagEdgesAndTopologicalOrder) {
  for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kGPipe}) {
    for (auto [stages, microbatches] : std::vector<std::pair<int, int>>{{2, 8}, {4, 8}, {3, 2}}) {
      const Dag dag = BuildDag(kind, stages, microbatches);
      const int n = 2 * stages * microbatches;
      ASSERT_EQ(static_cast<int>(dag.nodes.size()), n);
      EXPECT_EQ(static_cast<int>(dag.edges.size()),
                stages * (2 * microbatches - 1) + 2 * microbatches * (stages - 1));
      std::vector<int> position(n);
      for (int i = 0; i < n; ++i) position[dag.topological_order[i]] = i;
      std::set<std::tuple<int, int, int>> seen;
      for (const Instruction& inst : dag.nodes) {
        EXPECT_TRUE(seen.insert({inst.stage, inst.microbatch, static_cast<int>(inst.kind)}).second);
      }
      for (const DagEdge& e : dag.edges) {
        EXPECT_LT(position[e.from], position[e.to]);
        const Instruction& a = dag.nodes[e.from];
        const Instruction& b = dag.nodes[e.to];
        if (e.cross_stage) {
          EXPECT_EQ(a.microbatch, b.microbatch);
          EXPECT_EQ(a.kind, b.kind);
          EXPECT_EQ(b.stage - a.stage, a.kind == InstructionKind::kForward ? 1 : -1);
        } else {
          EXPECT_EQ(a.stage, b.stage);
        }
      }
    }
  }
}

TEST(Schedule, RejectsBadSizes) {
  EXPECT_ANY_THROW(BuildSchedule(ScheduleKind::k1F1B, 0, 4));
  EXPECT_ANY_THROW(BuildSchedule(ScheduleKind::k1F1B, 2, 0));
  EXPECT_EQ(ScheduleKindFromString("gpipe"), ScheduleKind::kGPipe);
  EXPECT_ANY_THROW(ScheduleKindFromString("zb"));
}

}  // namespace
}  // namespace kareus::pipeline
