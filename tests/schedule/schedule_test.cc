// SPDX-License-Identifier: Apache-2.0
#include "kareus/schedule/schedule.h"

#include <deque>
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

// Megatron-LM's forward_backward_pipelining_with_interleaving (megatron/core/pipeline_parallel/
// schedules.py), transcribed as its loop structure with the default
// microbatch_group_size_per_vp_stage = pipeline size: get_schedule_table (per group of
// microbatches, every model chunk in turn), get_model_chunk_id (backward: chunks reversed), the
// warm-up count of get_pp_rank_microbatches, then warm-up forwards, steady state (one forward
// then one backward) and cool-down backwards. A backward pops its chunk's oldest input, as
// backward_step_helper does with input_tensors[model_chunk_id]. Tokens "F3.1": microbatch 3 on
// chunk 1.
std::vector<std::string> MegatronInterleavedOrder(int pipeline_size, int rank, int num_model_chunks,
                                                  int num_microbatches) {
  const int group_size = pipeline_size;  // config.microbatch_group_size_per_vp_stage default
  std::vector<std::pair<int, int>> schedule_table;  // (microbatch_id, model_chunk_id)
  for (int min_id = 0; min_id < num_microbatches; min_id += group_size) {
    const int end =
        min_id + group_size >= num_microbatches ? num_microbatches : min_id + group_size;
    for (int chunk = 0; chunk < num_model_chunks; ++chunk) {
      for (int id = min_id; id < end; ++id) schedule_table.push_back({id, chunk});
    }
  }
  const int total = num_microbatches * num_model_chunks;
  auto get_model_chunk_id = [&](int virtual_id, bool forward) {
    int chunk = schedule_table[virtual_id % total].second;
    if (!forward) chunk = num_model_chunks - chunk - 1;
    return chunk;
  };
  int num_warmup = (pipeline_size - rank - 1) * 2;
  num_warmup += (num_model_chunks - 1) * group_size;
  if (num_warmup >= total) num_warmup = total;
  const int num_remaining = total - num_warmup;
  std::vector<std::deque<int>> input_tensors(num_model_chunks);
  std::vector<std::string> out;
  auto forward_step = [&](int k) {
    const int chunk = get_model_chunk_id(k, true);
    const int microbatch = schedule_table[k].first;
    input_tensors[chunk].push_back(microbatch);
    out.push_back("F" + std::to_string(microbatch) + "." + std::to_string(chunk));
  };
  auto backward_step = [&](int k) {
    const int chunk = get_model_chunk_id(k, false);
    const int microbatch = input_tensors[chunk].front();
    input_tensors[chunk].pop_front();
    out.push_back("B" + std::to_string(microbatch) + "." + std::to_string(chunk));
  };
  for (int k = 0; k < num_warmup; ++k) forward_step(k);
  for (int k = 0; k < num_remaining; ++k) {
    forward_step(k + num_warmup);
    backward_step(k);
  }
  for (int k = num_remaining; k < total; ++k) backward_step(k);
  return out;
}

std::vector<std::string> ChunkTokens(const std::vector<Instruction>& list) {
  std::vector<std::string> out;
  for (const Instruction& inst : list) {
    out.push_back((inst.kind == Direction::kForward ? "F" : "B") + std::to_string(inst.microbatch) +
                  "." + std::to_string(inst.chunk));
  }
  return out;
}

TEST(Schedule, InterleavedMatchesMegatron) {
  // (PP, V, M): the three of the issue, then more shapes (a single group, more groups, PP 8).
  for (auto [stages, chunks, microbatches] : std::vector<std::tuple<int, int, int>>{{2, 2, 4},
                                                                                    {4, 2, 8},
                                                                                    {4, 3, 12},
                                                                                    {2, 2, 2},
                                                                                    {3, 2, 3},
                                                                                    {2, 3, 8},
                                                                                    {8, 2, 16},
                                                                                    {4, 5, 4}}) {
    const auto order = BuildSchedule(ScheduleKind::kInterleaved1F1B, stages, microbatches, chunks);
    ASSERT_EQ(static_cast<int>(order.size()), stages);
    for (int s = 0; s < stages; ++s) {
      EXPECT_EQ(ChunkTokens(order[s]), MegatronInterleavedOrder(stages, s, chunks, microbatches))
          << "PP=" << stages << " V=" << chunks << " M=" << microbatches << " stage " << s;
    }
  }
}

TEST(Schedule, InterleavedSmallCaseByHand) {
  // PP 2, V 2, M 4, rank 0: warm-up (2-0-1)*2 + (2-1)*2 = 4 forwards over the first group
  // (microbatches 0,1 on chunk 0, then on chunk 1), then 1F1B with backwards on chunk 1 first.
  const auto order = ChunkTokens(StageOrder(ScheduleKind::kInterleaved1F1B, 2, 0, 4, 2));
  EXPECT_EQ(order, (std::vector<std::string>{"F0.0", "F1.0", "F0.1", "F1.1", "F2.0", "B0.1", "F3.0",
                                             "B1.1", "F2.1", "B0.0", "F3.1", "B1.0", "B2.1", "B3.1",
                                             "B2.0", "B3.0"}));
}

TEST(Schedule, InterleavedShapeRules) {
  // Megatron-LM's rules, each named by its field.
  try {
    StageOrder(ScheduleKind::kInterleaved1F1B, 4, 0, 6, 2);
    FAIL() << "6 microbatches on 4 stages";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("microbatches"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("multiple of the pipeline stages (4)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(StageOrder(ScheduleKind::kInterleaved1F1B, 4, 0, 8, 1), InputError);
  EXPECT_THROW(StageOrder(ScheduleKind::kInterleaved1F1B, 1, 0, 8, 2), InputError);
  EXPECT_THROW(StageOrder(ScheduleKind::k1F1B, 4, 0, 8, 2), InputError);
  EXPECT_THROW(StageOrder(ScheduleKind::kGPipe, 4, 0, 8, 2), InputError);
  EXPECT_EQ(ScheduleKindFromString("interleaved-1f1b"), ScheduleKind::kInterleaved1F1B);
  EXPECT_STREQ(ToString(ScheduleKind::kInterleaved1F1B), "interleaved-1f1b");
}

TEST(Schedule, InterleavedOrderInvariants) {
  for (int stages = 2; stages <= 5; ++stages) {
    for (int chunks = 2; chunks <= 4; ++chunks) {
      for (int groups = 1; groups <= 3; ++groups) {
        const int microbatches = groups * stages;
        for (int s = 0; s < stages; ++s) {
          const auto order =
              StageOrder(ScheduleKind::kInterleaved1F1B, stages, s, microbatches, chunks);
          ASSERT_EQ(order.size(), 2u * microbatches * chunks);
          std::vector<int> next_forward(chunks, 0), next_backward(chunks, 0);
          for (const Instruction& slot : order) {
            ASSERT_GE(slot.chunk, 0);
            ASSERT_LT(slot.chunk, chunks);
            EXPECT_EQ(slot.stage, s);
            if (slot.kind == Direction::kForward) {
              EXPECT_EQ(slot.microbatch, next_forward[slot.chunk]++);
            } else {
              EXPECT_EQ(slot.microbatch, next_backward[slot.chunk]++);
              EXPECT_LT(slot.microbatch, next_forward[slot.chunk]) << "backward before its forward";
            }
          }
          for (int c = 0; c < chunks; ++c) {
            EXPECT_EQ(next_forward[c], microbatches);
            EXPECT_EQ(next_backward[c], microbatches);
          }
        }
      }
    }
  }
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
    EXPECT_EQ(Tokens(list),
              (std::vector<std::string>{"F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"}));
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

TEST(Schedule, InterleavedDagEdgesFollowVirtualStages) {
  for (GradientSync sync : {GradientSync::kNone, GradientSync::kAtEnd, GradientSync::kOverlapped}) {
    for (auto [stages, chunks, microbatches] :
         std::vector<std::tuple<int, int, int>>{{2, 2, 4}, {4, 2, 8}, {4, 3, 12}}) {
      const Dag dag = BuildDag(ScheduleKind::kInterleaved1F1B, stages, microbatches, chunks, sync);
      const int instructions = 2 * stages * microbatches * chunks;
      const int per_stage = sync == GradientSync::kNone    ? 0
                            : sync == GradientSync::kAtEnd ? 1
                                                           : chunks;
      ASSERT_EQ(dag.NumInstructions(), instructions);
      ASSERT_EQ(dag.SyncNodesPerStage(), per_stage);
      ASSERT_EQ(static_cast<int>(dag.nodes.size()), instructions + stages * per_stage);
      // Chain, P2P between consecutive virtual stages, and per sync node one edge in (two for
      // a chunk > 0: its last backward and the stream order).
      EXPECT_EQ(static_cast<int>(dag.edges.size()),
                stages * (instructions / stages - 1) + 2 * microbatches * (stages * chunks - 1) +
                    stages * (per_stage == 0 ? 0 : 2 * per_stage - 1));
      std::vector<int> position(dag.nodes.size());
      for (std::size_t i = 0; i < dag.topological_order.size(); ++i)
        position[dag.topological_order[i]] = static_cast<int>(i);
      for (const DagEdge& e : dag.edges) {
        EXPECT_LT(position[e.from], position[e.to]);
        const DagNode& a = dag.nodes[e.from];
        const DagNode& b = dag.nodes[e.to];
        if (b.node == NodeKind::kGradientSync) {
          EXPECT_EQ(a.stage, b.stage);
          EXPECT_FALSE(e.cross_stage);
          if (a.node == NodeKind::kGradientSync) {
            EXPECT_EQ(a.chunk, b.chunk + 1) << "the stream runs chunk V-1 first";
          } else {
            // Chunk c's last backward feeds its sync; for chunk 0 it is the stage's last
            // instruction.
            EXPECT_EQ(a.kind, Direction::kBackward);
            EXPECT_EQ(a.chunk, b.chunk);
            EXPECT_EQ(a.microbatch, microbatches - 1);
          }
          continue;
        }
        ASSERT_NE(a.node, NodeKind::kGradientSync) << "a sync feeds only syncs";
        if (!e.cross_stage) {
          EXPECT_EQ(a.stage, b.stage);
          continue;
        }
        EXPECT_EQ(a.microbatch, b.microbatch);
        EXPECT_EQ(a.kind, b.kind);
        // Virtual stages c * S + s are consecutive along the microbatch's path.
        const int va = a.chunk * stages + a.stage, vb = b.chunk * stages + b.stage;
        EXPECT_EQ(vb - va, a.kind == Direction::kForward ? 1 : -1);
      }
      for (int s = 0; s < stages; ++s) {
        if (per_stage > 0) {
          EXPECT_EQ(dag.nodes[dag.GradientSyncNode(s, 0)].stage, s);
          EXPECT_EQ(dag.nodes[dag.GradientSyncNode(s, per_stage - 1)].chunk, per_stage - 1);
        }
      }
      int launches = 0;
      for (int v = 0; v < static_cast<int>(dag.nodes.size()); ++v)
        launches += dag.LaunchesGradientSync(v);
      EXPECT_EQ(launches, sync == GradientSync::kOverlapped ? stages : 0);
    }
  }
}

// A stage's iteration ends when its gradient sync ends: the tail starts after every
// instruction of its stage, and lengthening it lengthens the iteration once it is critical.
TEST(Schedule, IterationEndsWhenTheGradientSyncEnds) {
  for (ScheduleKind kind :
       {ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B, ScheduleKind::kGPipe}) {
    for (GradientSync sync : {GradientSync::kAtEnd, GradientSync::kOverlapped}) {
      const int chunks = kind == ScheduleKind::kInterleaved1F1B ? 2 : 1;
      const Dag dag = BuildDag(kind, 4, 8, chunks, sync);
      std::vector<double> durations(dag.nodes.size(), 1.0);
      for (int s = 0; s < 4; ++s) durations[dag.GradientSyncNode(s)] = 0.5 + s;
      const Timing timing = StartTimes(dag, durations, 0.01);
      for (int s = 0; s < 4; ++s) {
        const int tail = dag.GradientSyncNode(s);
        for (int v = 0; v < static_cast<int>(dag.nodes.size()); ++v) {
          if (dag.nodes[v].stage == s && v != tail) {
            EXPECT_LE(timing.finish[v], timing.start[tail] + 1e-12);
          }
        }
      }
      const double before = timing.makespan;
      durations[dag.GradientSyncNode(0)] += 10.0;
      const Timing longer = StartTimes(dag, durations, 0.01);
      EXPECT_NEAR(longer.makespan, longer.finish[dag.GradientSyncNode(0)], 1e-12);
      EXPECT_GT(longer.makespan, before);
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
          start[e.to] = std::max(start[e.to],
                                 start[e.from] + durations[e.from] + (e.cross_stage ? p2p : 0.0));
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
  EXPECT_EQ(ToString(DagNode{}), "forward 0");
  DagNode sync;
  sync.node = NodeKind::kGradientSync;
  EXPECT_EQ(ToString(sync), "gradient sync");
  sync.chunk = 2;
  EXPECT_EQ(ToString(sync), "gradient sync (chunk 2)");
}

}  // namespace
}  // namespace kareus::schedule
