// SPDX-License-Identifier: Apache-2.0
#include "kareus/schedule/schedule.h"

#include <set>
#include <string>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>

#include "kareus/common/error.h"

namespace kareus::schedule {
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
    out.push_back(Token(inst.kind == Direction::kForward ? 'F' : 'B', inst.microbatch));
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
          EXPECT_EQ(b.stage - a.stage, a.kind == Direction::kForward ? 1 : -1);
        } else {
          EXPECT_EQ(a.stage, b.stage);
        }
      }
    }
  }
}

TEST(Schedule, StageOrderInvariantsHoldForManyShapes) {
  for (int stages = 1; stages <= 6; ++stages) {
    for (int microbatches = 1; microbatches <= 9; ++microbatches) {
      for (int s = 0; s < stages; ++s) {
        const auto order = StageOrder(ScheduleKind::k1F1B, stages, s, microbatches);
        ASSERT_EQ(order.size(), 2u * microbatches);
        int next_forward = 0, next_backward = 0, in_flight_max = 0;
        for (const Instruction& slot : order) {
          EXPECT_EQ(slot.stage, s);
          EXPECT_EQ(slot.chunk, 0);
          if (slot.kind == Direction::kForward) {
            EXPECT_EQ(slot.microbatch, next_forward++);
          } else {
            EXPECT_EQ(slot.microbatch, next_backward++);
            EXPECT_LT(slot.microbatch, next_forward) << "backward before its forward";
          }
          in_flight_max = std::max(in_flight_max, next_forward - next_backward);
        }
        // 1F1B bounds the activations held by stage s to S - s microbatches.
        EXPECT_LE(in_flight_max, std::min(stages - s, microbatches));
      }
    }
  }
}

TEST(Schedule, NamesAndParsing) {
  EXPECT_EQ(ToString(Instruction{.stage = 1, .microbatch = 3, .kind = Direction::kBackward}),
            "backward 3");
  EXPECT_EQ(ToString(Instruction{.stage = 1, .chunk = 2, .microbatch = 3}), "forward 3 (chunk 2)");
  EXPECT_EQ(DirectionFromString("backward"), Direction::kBackward);
  EXPECT_EQ(ExecutionModeFromString("nanobatched"), ExecutionMode::kNanobatched);
  EXPECT_STREQ(ToString(ExecutionMode::kSequential), "sequential");
  EXPECT_THROW(DirectionFromString("recompute"), InputError);
  EXPECT_THROW(ExecutionModeFromString("overlap"), InputError);
  EXPECT_THROW(StageOrder(ScheduleKind::k1F1B, 2, 2, 4), InputError);
}

// The longest path against an independent relaxation (Bellman-Ford style, |V| rounds over the
// edge list) on random durations: start times, finishes and the makespan.
TEST(Schedule, StartTimesAreTheLongestPath) {
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) / static_cast<double>(1ULL << 53);
  };
  for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kGPipe}) {
    for (auto [stages, microbatches] : std::vector<std::pair<int, int>>{{1, 1}, {2, 8}, {4, 6}}) {
      const Dag dag = BuildDag(kind, stages, microbatches);
      std::vector<double> durations(dag.nodes.size());
      for (double& d : durations) d = 0.1 + next();
      const double p2p = 0.05;
      const Timing timing = StartTimes(dag, durations, p2p);
      std::vector<double> start(dag.nodes.size(), 0.0);
      for (std::size_t round = 0; round < dag.nodes.size(); ++round) {
        for (const DagEdge& e : dag.edges) {
          start[e.to] = std::max(start[e.to], start[e.from] + durations[e.from] + (e.cross_stage ? p2p : 0.0));
        }
      }
      double makespan = 0.0;
      for (std::size_t v = 0; v < start.size(); ++v) {
        EXPECT_NEAR(timing.start[v], start[v], 1e-12);
        EXPECT_NEAR(timing.finish[v], start[v] + durations[v], 1e-12);
        makespan = std::max(makespan, start[v] + durations[v]);
      }
      EXPECT_NEAR(timing.makespan, makespan, 1e-12);
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
}  // namespace kareus::schedule
