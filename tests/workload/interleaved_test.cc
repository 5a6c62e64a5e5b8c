// SPDX-License-Identifier: Apache-2.0
// Interleaved 1F1B (parallelism.virtual_stages) and the data-parallel gradient sync in the
// workload model: validation with Megatron-LM's rules, layers split into PP x V chunks with the
// embedding on the first and the loss on the last, and the gradient buckets.
#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "kareus/common/error.h"
#include "kareus/workload/ops.h"
#include "kareus/workload/workload.h"
#include "workload/expect_input_error.h"

namespace kareus::workload {
namespace {

using schedule::Direction;

std::string Yaml(const std::string& parallelism, int microbatches = 8,
                 const std::string& extra = "") {
  return "name: t\nmodel: llama3.2-3b\ngpu: A100-SXM4-40GB\nparallelism: " + parallelism +
         "\nmicrobatch_size: 2\nsequence_length: 2048\nmicrobatches: " +
         std::to_string(microbatches) + "\nrecompute: full\n" + extra;
}

using testing::ExpectInputError;

TEST(Interleaved, ValidationNamesTheFieldAndMegatronsRule) {
  // microbatches must be a multiple of pp.
  ExpectInputError(Yaml("{tp: 8, pp: 4, virtual_stages: 2, layers_per_stage: [8, 6, 8, 6]}", 6),
                   {"microbatches", "6", "multiple of parallelism.pp (4)", "virtual_stages = 2"});
  // Every stage's layers divisible by the chunks (28 layers / 4 stages = 7 per stage).
  ExpectInputError(Yaml("{tp: 8, pp: 4, virtual_stages: 2}", 8),
                   {"virtual_stages", "2", "stage 0 has 7"});
  // One stage cannot interleave.
  ExpectInputError(Yaml("{tp: 8, pp: 1, virtual_stages: 2}", 8), {"virtual_stages", "pp >= 2"});
  ExpectInputError(Yaml("{tp: 8, pp: 2, virtual_stages: 0}", 8), {"virtual_stages", "positive"});
  ExpectInputError(Yaml("{tp: 8, pp: 2}", 8, "gradient_sync: {reduce_dtype: fp8}\n"),
                   {"reduce_dtype", "fp8", "fp32 or bf16"});
  ExpectInputError(Yaml("{tp: 8, pp: 2}", 8, "gradient_sync: {buckets: 3}\n"), {"buckets"});
}

TEST(Interleaved, LayersSplitIntoChunksWithEmbeddingFirstAndLossLast) {
  const Workload w = WorkloadFromYaml(
      Yaml("{tp: 8, pp: 2, virtual_stages: 2, layers_per_stage: [14, 14]}"), "w.yaml");
  EXPECT_EQ(w.Schedule(), schedule::ScheduleKind::kInterleaved1F1B);
  const WorkloadModel model = BuildWorkloadModel(w);
  ASSERT_EQ(model.stages.size(), 4u);
  EXPECT_EQ(model.num_stages, 2);
  EXPECT_EQ(model.num_chunks, 2);
  for (int s = 0; s < 2; ++s) {
    for (int c = 0; c < 2; ++c) {
      const StageModel& unit = model.Unit(s, c);
      EXPECT_EQ(unit.stage, s);
      EXPECT_EQ(unit.chunk, c);
      EXPECT_EQ(unit.layers, 7);
      auto has = [](const std::vector<Op>& ops, const std::string& module) {
        for (const Op& op : ops) {
          if (op.module == module) return true;
        }
        return false;
      };
      // Virtual stage c * S + s: the embedding lives on virtual stage 0, the loss on the last.
      EXPECT_EQ(has(unit.forward.non_partition_ops, "embedding"), s == 0 && c == 0);
      EXPECT_EQ(has(unit.forward.non_partition_ops, "loss"), s == 1 && c == 1);
      // Every chunk but the last sends activations on; every one but the first sends gradients.
      EXPECT_EQ(unit.forward.p2p_send.bytes > 0, !(s == 1 && c == 1));
      EXPECT_EQ(unit.backward.p2p_send.bytes > 0, !(s == 0 && c == 0));
    }
  }
  // The middle chunks are identical instructions; the iteration's FLOPs equal the 1F1B model's.
  EXPECT_EQ(model.Unit(0, 1).forward.flops, model.Unit(1, 0).forward.flops);
  const WorkloadModel plain = BuildWorkloadModel(
      WorkloadFromYaml(Yaml("{tp: 8, pp: 2, layers_per_stage: [14, 14]}"), "w.yaml"));
  EXPECT_NEAR(model.IterationFlops(), plain.IterationFlops(), 1e-9 * plain.IterationFlops());
}

TEST(GradientSync, NoneWithoutDataParallelism) {
  const WorkloadModel model =
      BuildWorkloadModel(WorkloadFromYaml(Yaml("{tp: 8, pp: 2}"), "w.yaml"));
  EXPECT_FALSE(model.gradient_sync.enabled);
  for (const StageModel& unit : model.stages) EXPECT_TRUE(unit.gradient_buckets.empty());
  EXPECT_TRUE(GradientSyncBuckets(model, 0, 0).empty());
  EXPECT_TRUE(LastBackwardBuckets(model, 0).empty());
}

// The buckets hold every parameter of the unit once (this GPU's TP shard) at the reduce
// dtype, in the order the backward completes them; a unit's share is reduced exactly once,
// with its last backward or in the stage's tail.
TEST(GradientSync, BucketsCoverEveryParameterOnce) {
  for (bool overlap : {true, false}) {
    const std::string extra =
        std::string("gradient_sync: {overlap: ") + (overlap ? "true" : "false") + "}\n";
    const Workload w = WorkloadFromYaml(
        Yaml("{tp: 4, pp: 2, dp: 4, virtual_stages: 2, layers_per_stage: [14, 14]}", 8, extra),
        "w.yaml");
    const WorkloadModel model = BuildWorkloadModel(w);
    ASSERT_TRUE(model.gradient_sync.enabled);
    EXPECT_EQ(model.gradient_sync.group_size, 4);
    EXPECT_TRUE(model.gradient_sync.inter_node);  // 4 x 4 = 16 GPUs > 8 per node
    EXPECT_EQ(model.gradient_sync.bucket_parameters, 40e6);
    double total = 0.0;
    for (const StageModel& unit : model.stages) {
      const int last =
          static_cast<int>(BackwardKernelOrder(model, unit.stage, unit.chunk).size()) - 1;
      int previous = -1;
      for (const GradientBucket& b : unit.gradient_buckets) {
        EXPECT_GE(b.ready_after, previous) << "buckets in completion order";
        EXPECT_LE(b.ready_after, last);
        previous = b.ready_after;
        EXPECT_EQ(b.collective.group_size, 4);
        EXPECT_EQ(b.collective.collective, CollectiveType::kAllReduce);
        EXPECT_DOUBLE_EQ(b.collective.bytes, 4.0 * b.parameters);
        if (overlap) {
          EXPECT_LE(b.parameters, 40e6 + 1.0);
        }
        total += b.parameters;
      }
      if (!overlap) {
        EXPECT_EQ(unit.gradient_buckets.size(), 1u);
      }
    }
    // Per TP rank: the layers' parameters, the embedding and the output layer (padded vocab).
    const double padded_vocab = std::ceil(128256.0 / (128.0 * 4)) * 128.0 * 4;
    const double expected = double(w.model.LayerParameters()) / 4.0 +
                            2.0 * padded_vocab / 4.0 * double(w.model.hidden) +
                            double(w.model.hidden);
    EXPECT_NEAR(total, expected, 1e-9 * expected);
    double reduced = 0.0;
    for (int s = 0; s < 2; ++s) {
      for (const GradientBucket& b : LastBackwardBuckets(model, s)) reduced += b.parameters;
      for (int c = 0; c < 2; ++c) {
        for (const GradientBucket& b : GradientSyncBuckets(model, s, c)) reduced += b.parameters;
      }
      // With overlap the tail is chunk 0's buckets complete only when its backward ends;
      // without, one node holds everything.
      if (overlap) {
        const int last = static_cast<int>(BackwardKernelOrder(model, s, 0).size()) - 1;
        for (const GradientBucket& b : GradientSyncBuckets(model, s, 0)) {
          EXPECT_EQ(b.ready_after, last);
        }
        EXPECT_FALSE(GradientSyncBuckets(model, s, 0).empty());
        EXPECT_EQ(GradientSyncBuckets(model, s, 1).size(),
                  model.Unit(s, 1).gradient_buckets.size());
      } else {
        EXPECT_TRUE(GradientSyncBuckets(model, s, 1).empty());
        EXPECT_TRUE(LastBackwardBuckets(model, s).empty());
      }
    }
    EXPECT_NEAR(reduced, total, 1e-9 * total);
  }
}

TEST(GradientSync, DistributedOptimizerReduceScattersAndBf16HalvesTheBytes) {
  const WorkloadModel model = BuildWorkloadModel(
      WorkloadFromYaml(Yaml("{tp: 8, pp: 2, dp: 2}", 8,
                            "gradient_sync: {distributed_optimizer: true, reduce_dtype: bf16, "
                            "bucket_parameters: 10000000}\n"),
                       "w.yaml"));
  for (const StageModel& unit : model.stages) {
    for (const GradientBucket& b : unit.gradient_buckets) {
      EXPECT_EQ(b.collective.collective, CollectiveType::kReduceScatter);
      EXPECT_DOUBLE_EQ(b.collective.bytes, 2.0 * b.parameters);
      EXPECT_LE(b.parameters, 1e7 + 1.0);
    }
  }
  EXPECT_TRUE(model.gradient_sync.inter_node);  // 8 x 2 GPUs
  // CP alone within a node: the group rings over NVLink.
  const WorkloadModel cp = BuildWorkloadModel(WorkloadFromYaml(
      "name: t\nmodel: llama3.2-3b\ngpu: A100-SXM4-40GB\nparallelism: {tp: 4, cp: 2, pp: 2}\n"
      "microbatch_size: 2\nsequence_length: 4096\nmicrobatches: 4\n",
      "w.yaml"));
  EXPECT_TRUE(cp.gradient_sync.enabled);
  EXPECT_FALSE(cp.gradient_sync.inter_node);
  EXPECT_EQ(cp.gradient_sync.group_size, 2);
}

}  // namespace
}  // namespace kareus::workload
