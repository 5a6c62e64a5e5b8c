// SPDX-License-Identifier: Apache-2.0
// The data-parallel gradient reduction on the emulator: its cost grows with the replicas at
// fixed per-GPU work, overlap with the last backward hides part of it, and its physics (SMs,
// network, energy split) behave as the model says.
#include "kareus/emulator/gradient_sync.h"

#include <gtest/gtest.h>

#include <string>

#include "kareus/common/error.h"
#include "kareus/workload/ops.h"
#include "kareus/workload/workload.h"

namespace kareus::emulator {
namespace {

using workload::GradientBucket;

workload::WorkloadModel Model(const std::string& parallelism, const std::string& gpu = "H100-SXM",
                              const std::string& sync = "") {
  return workload::BuildWorkloadModel(workload::WorkloadFromYaml(
      "name: t\nmodel: llama3.1-8b\ngpu: " + gpu + "\nparallelism: " + parallelism +
          "\nmicrobatch_size: 2\nsequence_length: 4096\nmicrobatches: 8\nrecompute: full\n" + sync,
      "w.yaml"));
}

std::vector<GradientBucket> AllBuckets(const workload::WorkloadModel& model, int stage) {
  std::vector<GradientBucket> out;
  for (const auto& unit : model.stages) {
    if (unit.stage == stage)
      out.insert(out.end(), unit.gradient_buckets.begin(), unit.gradient_buckets.end());
  }
  return out;
}

// More DP replicas at fixed per-GPU work (same TP shard, same microbatches per replica): the
// ring all-reduce moves 2(n-1)/n of each bucket, so the sync grows, towards twice the bytes.
TEST(GradientSync, MoreReplicasLongerSyncAtFixedPerGpuWork) {
  double previous = 0.0;
  std::vector<double> times;
  for (int dp : {2, 4, 8, 16}) {
    const auto model = Model("{tp: 8, pp: 2, dp: " + std::to_string(dp) + "}");
    const SimResult r =
        SimulateGradientBuckets(model, AllBuckets(model, 0), {.freq_mhz = 1980, .sms = 8});
    EXPECT_GT(r.time_s, previous) << "dp " << dp;
    previous = r.time_s;
    times.push_back(r.time_s);
  }
  // Bandwidth-bound: the ratio follows the wire fraction 2(n-1)/n (1, 1.5, 1.75, 1.875) within
  // the per-bucket latency.
  EXPECT_NEAR(times[1] / times[0], 1.5, 0.02);
  EXPECT_NEAR(times[3] / times[0], 1.875, 0.03);
}

// Overlap: with the buckets reduced while the backward runs, the stage is done sooner than
// with the backward and then the same buckets, and the sync time exposed after the backward's
// compute is shorter than the sync itself.
TEST(GradientSync, OverlapReducesTheExposedSyncTime) {
  for (const std::string gpu : {"H100-SXM", "A100-SXM4-40GB"}) {
    const auto model = Model("{tp: 8, pp: 2, dp: 2}", gpu);
    const int f = model.workload.gpu.clock.max_mhz;
    const auto buckets = workload::LastBackwardBuckets(model, 0);
    ASSERT_GT(buckets.size(), 2u);
    const SimResult backward_alone =
        SimulateBackwardWithGradientSync(model, 0, 0, {}, {.freq_mhz = f, .sms = 4});
    const SimResult sync_alone = SimulateGradientBuckets(model, buckets, {.freq_mhz = f, .sms = 4});
    const SimResult overlapped =
        SimulateBackwardWithGradientSync(model, 0, 0, buckets, {.freq_mhz = f, .sms = 4});
    EXPECT_LT(overlapped.time_s, backward_alone.time_s + sync_alone.time_s) << gpu;
    const double exposed = overlapped.time_s - backward_alone.time_s;
    EXPECT_LT(exposed, sync_alone.time_s) << gpu;
    EXPECT_GT(overlapped.overlap_s, 0.0) << gpu;
    // The backward alone is the sequential instruction's kernels (same work, other order).
    const SimResult sequential = SimulateInstruction(
        model, 0, schedule::Direction::kBackward,
        {.freq_mhz = f, .mode = schedule::ExecutionMode::kSequential, .partitions = {}});
    EXPECT_NEAR(backward_alone.time_s, sequential.time_s, 1e-9 * sequential.time_s) << gpu;
    EXPECT_NEAR(backward_alone.energy_j, sequential.energy_j, 1e-6 * sequential.energy_j) << gpu;
  }
}

// The reduction kernel's SMs: below the network's rate it is SM-bound (one SM at 36.7 GB/s on
// H100 is slower than the 50 GB/s NIC share), above it more SMs only take SMs from compute.
TEST(GradientSync, SmsBoundTheRateAndSlowTheOverlappedCompute) {
  const auto model = Model("{tp: 8, pp: 2, dp: 2}");
  const auto buckets = workload::LastBackwardBuckets(model, 0);
  const SimResult one = SimulateGradientBuckets(model, buckets, {.freq_mhz = 1980, .sms = 1});
  const SimResult two = SimulateGradientBuckets(model, buckets, {.freq_mhz = 1980, .sms = 2});
  const SimResult many = SimulateGradientBuckets(model, buckets, {.freq_mhz = 1980, .sms = 24});
  EXPECT_GT(one.time_s, two.time_s * 1.2);
  EXPECT_NEAR(two.time_s, many.time_s, 1e-9 * two.time_s);  // NIC-bound from 2 SMs on
  EXPECT_GT(many.dynamic_energy_j, two.dynamic_energy_j);   // idle copy SMs still draw power
  // Overlapped: the compute stream loses the reduction's SMs while a bucket runs.
  const SimResult few =
      SimulateBackwardWithGradientSync(model, 0, 0, buckets, {.freq_mhz = 1980, .sms = 2});
  const SimResult wide =
      SimulateBackwardWithGradientSync(model, 0, 0, buckets, {.freq_mhz = 1980, .sms = 32});
  EXPECT_GT(wide.compute_busy_s, few.compute_busy_s);
}

// The inter-node network is the figure of the GPU preset: a group within one node rings over
// NVLink; across nodes the per-GPU NIC share bounds it (A100 p4d 6.25 GB/s, far below NVLink).
TEST(GradientSync, NetworkFiguresOfThePreset) {
  const auto within = Model("{tp: 4, pp: 2, dp: 2}", "A100-SXM4-40GB");  // 8 GPUs: one node
  const auto across = Model("{tp: 8, pp: 2, dp: 2}", "A100-SXM4-40GB");  // 16 GPUs: two nodes
  ASSERT_FALSE(within.gradient_sync.inter_node);
  ASSERT_TRUE(across.gradient_sync.inter_node);
  // Same bytes per bucket would differ by TP; compare rates instead: bytes moved per second.
  auto rate = [](const workload::WorkloadModel& m) {
    const auto buckets = AllBuckets(m, 0);
    double wire = 0.0;
    for (const auto& b : buckets)
      wire += b.collective.bytes * 2.0 * (b.collective.group_size - 1) / b.collective.group_size;
    return wire / SimulateGradientBuckets(m, buckets, {.freq_mhz = 1410, .sms = 24}).time_s;
  };
  EXPECT_NEAR(rate(across), 6.25e9, 0.02 * 6.25e9);
  EXPECT_GT(rate(within), 100e9);
  // Energy splits exactly; reduce-scatter moves half the all-reduce's bytes.
  const auto buckets = AllBuckets(across, 0);
  const SimResult ar = SimulateGradientBuckets(across, buckets, {.freq_mhz = 1410, .sms = 4});
  EXPECT_NEAR(ar.energy_j, ar.static_energy_j + ar.dynamic_energy_j, 1e-9 * ar.energy_j);
  const auto rs_model = Model("{tp: 8, pp: 2, dp: 2}", "A100-SXM4-40GB",
                              "gradient_sync: {distributed_optimizer: true}\n");
  const SimResult rs =
      SimulateGradientBuckets(rs_model, AllBuckets(rs_model, 0), {.freq_mhz = 1410, .sms = 4});
  EXPECT_NEAR(rs.time_s / ar.time_s, 0.5, 0.02);
}

TEST(GradientSync, BadKnobsNameTheField) {
  const auto model = Model("{tp: 8, pp: 2, dp: 2}");
  try {
    SimulateGradientBuckets(model, AllBuckets(model, 0), {.freq_mhz = 1980, .sms = 0});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sms"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SimulateGradientBuckets(model, {}, {.freq_mhz = 7, .sms = 2}), InputError);
  EXPECT_THROW(SimulateBackwardWithGradientSync(model, 2, 0, {}, {.freq_mhz = 1980, .sms = 2}),
               InputError);
  EXPECT_THROW(SimulateBackwardWithGradientSync(model, 0, 1, {}, {.freq_mhz = 1980, .sms = 2}),
               InputError);
}

}  // namespace
}  // namespace kareus::emulator
