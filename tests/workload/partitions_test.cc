// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "kareus/workload/ops.h"

namespace kareus::workload {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

Workload Make(const std::string& model, int tp, int cp, int mbs, int seq,
              const std::string& recompute = "full", const std::string& layers = "[15, 13]") {
  return WorkloadFromYaml(
      "model: " + model + "\ngpu: A100-SXM4-40GB\nparallelism: {tp: " + std::to_string(tp) +
          ", cp: " + std::to_string(cp) + ", pp: 2, layers_per_stage: " + layers +
          "}\nmicrobatch_size: " + std::to_string(mbs) + "\nsequence_length: " +
          std::to_string(seq) + "\nmicrobatches: 8\nrecompute: " + recompute + "\n",
      "test.yaml");
}

std::vector<std::string> TunableTypes(const WorkloadModel& m) {
  std::vector<std::string> names;
  for (const auto& t : m.partition_types) {
    if (t.tunable) names.push_back(t.name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Independent closed form (Narayanan et al., SC'21, with GQA and SwiGLU): dense matmuls cost
// 2 FLOPs per parameter per token forward, 4 backward, 2 more for full recomputation; the output
// layer 6 H V per token (outside the recomputed block); causal attention 2 S h d per token per
// layer forward, 2.5x that backward (FlashAttention), once more when recomputed.
double ClosedFormIterationFlops(const Workload& w) {
  const auto& m = w.model;
  const double q = double(m.heads) * m.head_dim;
  const double kv = 2.0 * m.kv_groups * m.head_dim;
  const double matmul_params =
      m.layers * (m.hidden * (q + kv) + q * m.hidden + 3.0 * m.hidden * m.ffn);
  const double tokens =
      double(w.microbatches) * w.microbatch_size * w.sequence_length * w.parallelism.dp;
  const bool full = w.recompute == Recompute::kFull;
  const double vocab = std::ceil(m.vocab / (128.0 * w.parallelism.tp)) * 128.0 * w.parallelism.tp;
  const double dense = (full ? 8.0 : 6.0) * matmul_params + 6.0 * m.hidden * vocab;
  const double attention_fwd = 2.0 * w.sequence_length * q * m.layers;
  const double attention = attention_fwd * (full ? 4.5 : 3.5);
  return tokens * (dense + attention);
}

TEST(WorkloadModel, IterationFlopsMatchClosedForm) {
  const std::vector<Workload> workloads = {
      Make("llama3.2-3b", 8, 1, 8, 4096), Make("llama3.2-3b", 4, 2, 8, 4096),
      Make("qwen3-1.7b", 4, 2, 16, 4096), Make("qwen3-1.7b", 8, 1, 8, 8192, "none"),
      Make("llama3.3-70b", 8, 1, 2, 4096, "full", "[40, 40]")};
  for (const auto& w : workloads) {
    const double model = BuildWorkloadModel(w).IterationFlops();
    const double closed = ClosedFormIterationFlops(w);
    EXPECT_NEAR(model / closed, 1.0, 0.02) << w.Signature();
  }
}

TEST(WorkloadModel, TensorParallelGivesFourTypes) {
  const auto m = BuildWorkloadModel(Make("llama3.2-3b", 8, 1, 8, 4096));
  EXPECT_TRUE(m.nanobatching);
  EXPECT_EQ(TunableTypes(m),
            (std::vector<std::string>{"bwd_attn", "bwd_mlp", "fwd_attn", "fwd_mlp"}));
}

TEST(WorkloadModel, ContextPlusTensorParallelGivesTwelveTypes) {
  const auto m = BuildWorkloadModel(Make("llama3.2-3b", 4, 2, 8, 4096));
  EXPECT_EQ(TunableTypes(m),
            (std::vector<std::string>{"bwd_a_ag", "bwd_a_rs", "bwd_mlp", "bwd_o_ag", "bwd_o_ar",
                                      "bwd_qkv_ar", "bwd_qkv_rs", "fwd_ao_ag", "fwd_ao_ar",
                                      "fwd_mlp", "fwd_qkv_ag", "fwd_qkv_ar"}));
}

TEST(WorkloadModel, CollectiveBuffersMatchThePublishedSizes) {
  // kareus-official.md §7.2: AR [S/CP, MBS/2, H] bf16; gathered K [S, MBS/2, G/TP, d].
  const auto tp8 = BuildWorkloadModel(Make("llama3.2-3b", 8, 1, 8, 4096));
  EXPECT_DOUBLE_EQ(tp8.Type("fwd_attn").collective.bytes, 96 * kMiB);
  EXPECT_EQ(tp8.Type("fwd_attn").collective.group_size, 8);
  const auto cp2 = BuildWorkloadModel(Make("llama3.2-3b", 4, 2, 8, 4096));
  EXPECT_DOUBLE_EQ(cp2.Type("fwd_mlp").collective.bytes, 48 * kMiB);
  const Op& gather = cp2.Type("fwd_qkv_ag").collective;
  EXPECT_EQ(gather.collective, CollectiveType::kAllGather);
  EXPECT_EQ(gather.group_size, 2);
  EXPECT_DOUBLE_EQ(gather.bytes / gather.tensors, 8 * kMiB);
  EXPECT_EQ(cp2.Type("bwd_a_rs").collective.collective, CollectiveType::kReduceScatter);
  EXPECT_EQ(cp2.Type("bwd_o_ag").collective.collective, CollectiveType::kAllGather);
  EXPECT_EQ(cp2.Type("bwd_qkv_ar").collective.collective, CollectiveType::kAllReduce);
}

TEST(WorkloadModel, SlotsFollowThePublishedNaming) {
  const auto m = BuildWorkloadModel(Make("llama3.2-3b", 8, 1, 8, 4096));
  auto names = [](const PartitionType& t) {
    std::vector<std::string> out;
    for (const auto& s : t.slots) out.push_back(s.name);
    return out;
  };
  EXPECT_EQ(names(m.Type("fwd_attn")),
            (std::vector<std::string>{"norm_0", "linear_0", "rope_0", "attn_0", "linear_1"}));
  EXPECT_EQ(names(m.Type("fwd_mlp")),
            (std::vector<std::string>{"norm_0", "linear_0", "activation_0", "linear_1"}));
  EXPECT_EQ(names(m.Type("bwd_attn")),
            (std::vector<std::string>{"norm_0", "linear_0", "attn_0", "rope_0", "linear_1"}));
  EXPECT_EQ(names(m.Type("bwd_mlp")),
            (std::vector<std::string>{"norm_0", "linear_0", "activation_0", "linear_1"}));
  // Launch slots and SM choices of the published search spaces (kareus-official.md §2.2).
  EXPECT_EQ(m.Type("fwd_attn").launch_slots,
            (std::vector<std::string>{"norm_0", "linear_0", "rope_0", "attn_0"}));
  EXPECT_EQ(m.Type("fwd_attn").sm_choices.front(), 3);
  EXPECT_EQ(m.Type("fwd_attn").sm_choices.back(), 30);
  EXPECT_EQ(m.Type("fwd_attn").SpaceSize(18), 720);
  EXPECT_EQ(m.Type("fwd_mlp").SpaceSize(18), 540);
  // The collective starts with the op at its slot: rope_0 is qkv_post (after bda, ln, qkv).
  EXPECT_EQ(m.Type("fwd_attn").compute_ops[m.Type("fwd_attn").SlotIndex("rope_0")].name,
            "qkv_post");
}

TEST(WorkloadModel, PublishedSpaceSizesWithContextParallelism) {
  const auto m = BuildWorkloadModel(Make("llama3.2-3b", 4, 2, 8, 4096));
  const std::map<std::string, int> expected = {
      {"fwd_qkv_ar", 360}, {"fwd_qkv_ag", 1080}, {"fwd_ao_ag", 720}, {"fwd_ao_ar", 180},
      {"bwd_qkv_ar", 360}, {"bwd_qkv_rs", 720},  {"bwd_a_rs", 360},  {"bwd_a_ag", 360},
      {"bwd_o_ag", 720},   {"bwd_o_ar", 180},    {"fwd_mlp", 540},   {"bwd_mlp", 540}};
  for (const auto& [name, size] : expected) EXPECT_EQ(m.Type(name).SpaceSize(18), size) << name;
}

TEST(WorkloadModel, CountsPerInstruction) {
  const auto m = BuildWorkloadModel(Make("llama3.2-3b", 8, 1, 8, 4096));
  auto count = [&](const InstructionModel& ins, const std::string& name) {
    for (const auto& use : ins.uses) {
      if (m.partition_types[use.type].name == name)
        return std::pair{use.count, use.without_collective};
    }
    return std::pair{0, 0};
  };
  const auto& s0 = m.stages[0];
  EXPECT_EQ(s0.layers, 15);
  EXPECT_EQ(count(s0.forward, "fwd_attn"), (std::pair{30, 1}));
  EXPECT_EQ(count(s0.forward, "fwd_mlp"), (std::pair{30, 0}));
  EXPECT_EQ(count(s0.forward, "fwd_trail"), (std::pair{2, 1}));
  // Full recomputation re-runs the forward partitions inside the backward instruction.
  EXPECT_EQ(count(s0.backward, "fwd_attn"), (std::pair{30, 1}));
  EXPECT_EQ(count(s0.backward, "bwd_mlp"), (std::pair{30, 1}));
  EXPECT_EQ(count(s0.backward, "bwd_attn"), (std::pair{30, 0}));
  EXPECT_EQ(count(s0.backward, "bwd_trail"), (std::pair{2, 1}));
  EXPECT_EQ(count(m.stages[1].forward, "fwd_attn"), (std::pair{26, 1}));
  // Sequence length equals the sum of the counts.
  size_t total = 0;
  for (const auto& use : s0.backward.uses) total += use.count;
  EXPECT_EQ(total, s0.backward.sequence.size());

  const auto none = BuildWorkloadModel(Make("llama3.2-3b", 8, 1, 8, 4096, "none"));
  EXPECT_EQ(count(none.stages[0].backward, "fwd_attn"), (std::pair{0, 0}));
}

// Context parallelism without tensor parallelism has no published layout: its partitions get
// generic names from their position in the layer. The first partition of a stage has no
// collective before it and must still map to the type of its steady-state position (the fuzzer
// found a build that stopped on "partition fwd_p0 has no type"), with one layer or many.
TEST(WorkloadModel, ContextParallelAloneMapsEveryPartitionToAType) {
  for (const std::string layers : {"[15, 13]", "[1, 27]"}) {
    const auto m = BuildWorkloadModel(Make("llama3.2-3b", 1, 2, 8, 4096, "full", layers));
    ASSERT_TRUE(m.nanobatching) << layers;
    EXPECT_EQ(TunableTypes(m),
              (std::vector<std::string>{"bwd_p0_reduce_scatter", "bwd_p1_all_gather",
                                        "bwd_p2_all_gather", "bwd_p3_reduce_scatter",
                                        "fwd_p0_all_gather", "fwd_p1_all_gather"}))
        << layers;
    for (const auto& stage : m.stages) {
      for (const InstructionModel* ins : {&stage.forward, &stage.backward}) {
        int without = 0;
        for (const auto& use : ins->uses) {
          const auto& type = m.partition_types[use.type];
          if (type.tunable) {
            EXPECT_EQ(use.count, stage.layers) << type.name << " " << layers;
          }
          without += use.without_collective;
        }
        // One partition per recomputed or run block starts without a collective before it,
        // and one trail partition ends without one after it.
        const int blocks = ins->direction == schedule::Direction::kForward ? 1 : 2;
        EXPECT_EQ(without, 2 * blocks) << layers;
      }
    }
  }
}

TEST(WorkloadModel, NonPartitionWorkSitsOnTheEndStages) {
  const auto m = BuildWorkloadModel(Make("llama3.2-3b", 8, 1, 8, 4096));
  auto has = [](const std::vector<Op>& ops, const std::string& name) {
    return std::any_of(ops.begin(), ops.end(), [&](const Op& op) { return op.name == name; });
  };
  EXPECT_TRUE(has(m.stages[0].forward.non_partition_ops, "embedding"));
  EXPECT_FALSE(has(m.stages[0].forward.non_partition_ops, "output_layer"));
  EXPECT_TRUE(has(m.stages[1].forward.non_partition_ops, "output_layer"));
  EXPECT_TRUE(has(m.stages[1].forward.non_partition_ops, "loss"));
  EXPECT_TRUE(has(m.stages[1].backward.non_partition_ops, "output_layer.wgrad"));
  EXPECT_TRUE(has(m.stages[0].backward.non_partition_ops, "embedding.bwd"));
  // Activations go forward from stage 0, gradients backward from stage 1: [S, b, H] bf16.
  EXPECT_DOUBLE_EQ(m.stages[0].forward.p2p_send.bytes, 4096.0 * 8 * 3072 * 2);
  EXPECT_DOUBLE_EQ(m.stages[1].forward.p2p_send.bytes, 0.0);
  EXPECT_DOUBLE_EQ(m.stages[1].backward.p2p_send.bytes, 4096.0 * 8 * 3072 * 2);
}

TEST(WorkloadModel, MicrobatchOfOnePlansSequentialOnly) {
  const auto m = BuildWorkloadModel(Make("llama3.2-3b", 8, 1, 1, 4096));
  EXPECT_FALSE(m.nanobatching);
  EXPECT_TRUE(m.partition_types.empty());
  EXPECT_TRUE(m.stages[0].forward.sequence.empty());
  EXPECT_FALSE(m.stages[0].forward.sequential_ops.empty());
  EXPECT_TRUE(m.ToJson().contains("nanobatching_note"));
}

TEST(WorkloadModel, GemmShapesAreShardedByTensorParallelism) {
  const Workload w = Make("llama3.2-3b", 8, 1, 8, 4096);
  const auto ops = LayerForwardOps(w, 4);
  const auto qkv =
      std::find_if(ops.begin(), ops.end(), [](const Op& op) { return op.name == "linear_qkv"; });
  ASSERT_NE(qkv, ops.end());
  EXPECT_EQ(qkv->m, 4 * 4096);
  EXPECT_EQ(qkv->n, (24 + 2 * 8) * 128 / 8);
  EXPECT_EQ(qkv->k, 3072);
  EXPECT_DOUBLE_EQ(qkv->flops, 2.0 * 16384 * 640 * 3072);
  EXPECT_EQ(qkv->tiles, (16384 / 128) * 3);  // 640 columns = 2.5 -> 3 tiles of 256
}

}  // namespace
}  // namespace kareus::workload
