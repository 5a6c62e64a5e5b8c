// SPDX-License-Identifier: Apache-2.0
// Calibration targets of DESIGN.md §5; every figure's source is reference/gpu-power-model.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "emulator/test_util.h"

namespace kareus::emulator {
namespace {

using testing::A100;
using testing::H100;
using testing::LlamaTp8;
using testing::MakeCollective;
using testing::MakeGemm;
using testing::MakeMemoryOp;

// A dense BF16 GEMM locked at 1410 MHz is held by the board's power limit. Changed with the
// measurements of data/validation/ (issue 12): the earlier target, HPL's ~1305 MHz at 400 W
// (glennklockwood.com/garden/peak-FLOPS), is FP64; the measured BF16 GPT-3 stages on 500 W
// A100 boards (gpt3-175b+a100_sxm_bf16.csv) draw 475-480 W at 1410 MHz with their time 4.4 %
// above the unheld trend, so BF16 tensor GEMMs draw more per clock than HPL: a 400 W board
// holds them below HPL's clock, a 500 W board a little below 1410 MHz.
TEST(Calibration, A100GemmLockedAtMaxIsHeldByTheBoardLimit) {
  const workload::Op gemm = MakeGemm(8192, 8192, 8192);
  const SimResult board400 = SimulateKernel(A100(), gemm, 108, 1410);
  EXPECT_NEAR(board400.avg_power_w, 400.0, 0.5);
  EXPECT_GE(board400.effective_freq_mhz, 1150.0);
  EXPECT_LE(board400.effective_freq_mhz, 1305.0);
  hw::GpuSpec gpu500 = hw::GpuPreset("A100-SXM4-80GB");
  hw::SetPowerLimit(gpu500, 500.0);
  const SimResult board500 = SimulateKernel(gpu500, gemm, 108, 1410);
  EXPECT_NEAR(board500.avg_power_w, 500.0, 0.5);
  EXPECT_GT(board500.effective_freq_mhz, 1300.0);
  EXPECT_LT(board500.effective_freq_mhz, 1410.0);
  // Below the limit a locked clock is delivered exactly.
  EXPECT_DOUBLE_EQ(SimulateKernel(A100(), gemm, 108, 1110).effective_freq_mhz, 1110.0);
}

// The energy-optimal locked clock of a compute-bound GEMM sits at the top of the voltage floor.
// Changed with data/validation/ (issue 12): the earlier target, 900-1050 MHz (the published
// plans' 960 MHz mode, inferred on another board and workload; gpu-power-model.md §0), is
// contradicted by the per-clock measurements, whose GEMM-dominated GPT-3 stages are cheapest at
// 1080 MHz (1065-1080 MHz over every stage and direction).
TEST(Calibration, EnergyOptimalClockOfComputeBoundGemmIsAtTheVoltageFloor) {
  ASSERT_DOUBLE_EQ(A100().power.static_w, 85.0);  // Kareus model_config.py "p2p_power_w"
  for (const workload::Op& gemm : {MakeGemm(8192, 8192, 8192), MakeGemm(16384, 3072, 8192)}) {
    int best_mhz = 0;
    double best_j = 1e300;
    for (int f : A100().clock.Supported()) {
      if (f < 855) continue;
      const double e = SimulateKernel(A100(), gemm, 108, f).energy_j;
      if (e < best_j) {
        best_j = e;
        best_mhz = f;
      }
    }
    EXPECT_GE(best_mhz, 1050);
    EXPECT_LE(best_mhz, 1110);
  }
}

// Memory clock is fixed on HBM parts (gpu-power-model.md §1.2, §2.1: memory-bound kernels are
// nearly flat in the SM clock): less than 10 % time change from 1410 to 900 MHz.
TEST(Calibration, MemoryBoundKernelsAreNearlyFlatInClock) {
  std::vector<workload::Op> ops = {MakeMemoryOp(4e8), MakeMemoryOp(2.5e7)};
  for (const workload::Op& op : LlamaTp8().stages[0].forward.sequential_ops) {
    if (op.kind == workload::OpKind::kMemory) ops.push_back(op);
  }
  ASSERT_GT(ops.size(), 2u);
  for (const workload::Op& op : ops) {
    const double fast = SimulateKernel(A100(), op, 108, 1410).time_s;
    const double slow = SimulateKernel(A100(), op, 108, 900).time_s;
    EXPECT_LT(slow / fast, 1.10) << op.name;
  }
}

// NCCL's per-channel ceilings (20 GB/s SM80, 36.7 GB/s SM90, nccl src/graph/tuning.cc) and the
// 8-GPU bus bandwidths (~230 GB/s A100, NVIDIA/nccl-tests#149; ~370 GB/s H100 ring,
// nccl-tests#212) put saturation near 12 SMs on A100 and 10-11 on H100 (§3.1).
int SaturationSms(const hw::GpuSpec& gpu, double* max_busbw) {
  const workload::Op ar = MakeCollective(workload::CollectiveType::kAllReduce, 96.0 * (1 << 20), 8);
  const double wire = ar.bytes * 2.0 * 7.0 / 8.0;
  std::vector<double> busbw;
  for (int c = 1; c <= 32; ++c) {
    busbw.push_back(wire / SimulateKernel(gpu, ar, c, gpu.clock.max_mhz).time_s / 1e9);
  }
  *max_busbw = *std::max_element(busbw.begin(), busbw.end());
  for (int c = 1; c <= 32; ++c) {
    if (busbw[c - 1] >= 0.98 * *max_busbw) return c;
  }
  return 0;
}

TEST(Calibration, AllReduceBandwidthSaturatesNearTheChannelCount) {
  double a100_bw = 0.0, h100_bw = 0.0;
  const int a100 = SaturationSms(A100(), &a100_bw);
  const int h100 = SaturationSms(H100(), &h100_bw);
  EXPECT_GE(a100, 10);
  EXPECT_LE(a100, 14);
  EXPECT_GE(h100, 9);
  EXPECT_LE(h100, 12);
  EXPECT_NEAR(a100_bw, 230.0, 230.0 * 0.05);
  EXPECT_NEAR(h100_bw, 370.0, 370.0 * 0.05);
}

// Static share of a stage's energy at max throughput: 27-36 % in the published plans (§0, §5);
// the forward instruction of Llama 3.2 3B TP 8 at 1410 MHz must sit in 22-40 %.
TEST(Calibration, StaticShareOfLlamaForwardInstruction) {
  const workload::WorkloadModel& model = LlamaTp8();
  for (ExecutionMode mode : {ExecutionMode::kNanobatched, ExecutionMode::kSequential}) {
    const SimResult r = SimulateInstruction(model, 0, schedule::Direction::kForward,
                                            DefaultInstructionKnobs(model, 1410, mode));
    const double share = r.static_energy_j / r.energy_j;
    EXPECT_GE(share, 0.22);
    EXPECT_LE(share, 0.40);
  }
}

// Overlap slows the compute it shares the GPU with: 18.9 % on average, at most 40 % (Lee et al.
// 2025 on A100/H100/MI250/MI210, arXiv 2507.03114; DESIGN.md §5 "a few percent up to ≈40 %").
// Over the published search spaces of both paper workloads the emulated slowdown of the
// compute stream stays in that range, and SM counts near the saturation point cost only a few
// percent.
TEST(Calibration, OverlapSlowsComputeByAFewPercentUpToAbout40Percent) {
  double worst = 1.0, sum_at_12 = 0.0;
  int count_at_12 = 0;
  for (const workload::WorkloadModel* model : {&LlamaTp8(), &testing::LlamaCp2Tp4()}) {
    for (const workload::PartitionType& type : model->partition_types) {
      if (!type.tunable) continue;
      workload::PartitionType alone_type = type;
      alone_type.collective.bytes = 0.0;
      const SimResult alone = SimulatePartition(
          A100(), alone_type,
          {.freq_mhz = 1410, .sms = type.sm_choices.front(), .slot = type.launch_slots.front()});
      for (const SweepPoint& p : SweepPartition(A100(), type, {.freqs_mhz = {1410}})) {
        const double slowdown = p.result.compute_busy_s / alone.compute_busy_s;
        EXPECT_GE(slowdown, 1.0 - 1e-9) << type.name;
        worst = std::max(worst, slowdown);
        if (p.knobs.sms == 12) {
          sum_at_12 += slowdown;
          ++count_at_12;
        }
      }
    }
  }
  const double mean_at_12 = sum_at_12 / count_at_12;
  EXPECT_GT(mean_at_12, 1.01);
  EXPECT_LT(mean_at_12, 1.15);
  EXPECT_GT(worst, 1.05);
  EXPECT_LT(worst, 1.45);
  std::printf("compute slowdown under overlap: mean %.3f at 12 SMs, worst %.3f\n", mean_at_12,
              worst);
}

}  // namespace
}  // namespace kareus::emulator
