// SPDX-License-Identifier: Apache-2.0
// Board power limits as data (workload `gpu.power_limit_w`, bounded by the board's range),
// power-limit mode (the GPU unlocked, held to the limit), and the idle power of a waiting GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "emulator/test_util.h"
#include "kareus/common/error.h"

namespace kareus::emulator {
namespace {

using testing::A100;
using testing::MakeGemm;
using testing::MakeMemoryOp;

std::string Gpt3StageYaml(const std::string& gpu_section) {
  return "model: {name: m, hidden: 4096, heads: 32, kv_groups: 32, head_dim: 128, ffn: 11008,"
         " layers: 4, vocab: 32000}\n" +
         gpu_section +
         "parallelism: {tp: 1, pp: 1}\nmicrobatch_size: 2\nsequence_length: 2048\n"
         "microbatches: 1\nrecompute: none\n";
}

std::string InputErrorOf(const std::string& yaml) {
  try {
    workload::WorkloadFromYaml(yaml, "w.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A100 SXM4 80GB exists as 400 W (default) and 500 W boards; the 40GB part stops at 400 W.
TEST(PowerLimit, WorkloadGpuSectionSetsTheLimitWithinTheBoardRange) {
  const workload::Workload plain =
      workload::WorkloadFromYaml(Gpt3StageYaml("gpu: A100-SXM4-80GB\n"), "w.yaml");
  EXPECT_EQ(plain.gpu.power.cap_w, 400.0);
  EXPECT_EQ(plain.power_limit_w, 0.0);
  const workload::Workload board500 = workload::WorkloadFromYaml(
      Gpt3StageYaml("gpu: {name: A100-SXM4-80GB, power_limit_w: 500}\n"), "w.yaml");
  EXPECT_EQ(board500.gpu.power.cap_w, 500.0);
  EXPECT_NE(board500.Signature(), plain.Signature());  // measurements differ by board limit
  EXPECT_EQ(board500.ToJson()["power_limit_w"], 500.0);

  const std::string over =
      InputErrorOf(Gpt3StageYaml("gpu: {name: A100-SXM4-40GB, power_limit_w: 500}\n"));
  EXPECT_NE(over.find("power_limit_w"), std::string::npos) << over;
  EXPECT_NE(over.find("500"), std::string::npos) << over;
  EXPECT_NE(over.find("100 to 400 W"), std::string::npos) << over;
  EXPECT_NE(InputErrorOf(Gpt3StageYaml("gpu: {name: A40, power_limit_w: 50}\n")).find("100 to 300"),
            std::string::npos);
  EXPECT_NE(
      InputErrorOf(Gpt3StageYaml("gpu: {name: A40, power_limt_w: 200}\n")).find("power_limt_w"),
      std::string::npos);
}

// Power-limit mode: unlocked (the maximum clock), the GPU runs each kernel set at the highest
// clock whose power fits. Lower limits give lower clocks and longer times, no set exceeds the
// limit, and a limit the workload never reaches changes nothing.
TEST(PowerLimit, LowerLimitsLowerTheClockAndHoldThePower) {
  workload::Workload w = workload::WorkloadFromYaml(
      Gpt3StageYaml("gpu: {name: A100-SXM4-80GB, power_limit_w: 500}\n"), "w.yaml");
  double previous_time = 0.0, previous_freq = 1e9;
  for (double limit : {500.0, 400.0, 300.0, 200.0, 150.0}) {
    hw::SetPowerLimit(w.gpu, limit);
    const workload::WorkloadModel model = workload::BuildWorkloadModel(w);
    const SimResult r = SimulateInstruction(
        model, 0, schedule::Direction::kForward,
        {.freq_mhz = w.gpu.clock.max_mhz, .mode = ExecutionMode::kSequential, .partitions = {}});
    EXPECT_LE(r.avg_power_w, limit + 1e-6) << limit;
    EXPECT_GE(r.time_s, previous_time) << limit;
    EXPECT_LE(r.effective_freq_mhz, previous_freq + 1e-9) << limit;
    previous_time = r.time_s;
    previous_freq = r.effective_freq_mhz;
  }
  EXPECT_LT(previous_freq, 800.0);  // 150 W leaves ~66 W above the idle draw
  // A GEMM held by a 400 W limit and the same GEMM on a 500 W board.
  hw::GpuSpec gpu500 = hw::GpuPreset("A100-SXM4-80GB");
  hw::SetPowerLimit(gpu500, 500.0);
  const SimResult at400 =
      SimulateKernel(hw::GpuPreset("A100-SXM4-80GB"), MakeGemm(8192, 8192, 8192), 108, 1410);
  const SimResult at500 = SimulateKernel(gpu500, MakeGemm(8192, 8192, 8192), 108, 1410);
  EXPECT_NEAR(at400.avg_power_w, 400.0, 0.5);
  EXPECT_GT(at500.effective_freq_mhz, at400.effective_freq_mhz);
  // A memory-bound kernel draws far below either limit: the limit changes nothing.
  const SimResult norm400 = SimulateKernel(A100(), MakeMemoryOp(4e8), 108, 1410);
  EXPECT_EQ(norm400.effective_freq_mhz, 1410.0);
}

// A GPU with nothing to run draws power.idle_w: a kernel too short for the host's launch cost
// runs host-bound in a loop (each iteration lasts the launch time), and the GPU waits out the
// rest at idle power.
TEST(PowerLimit, AWaitingGpuDrawsIdlePower) {
  const hw::GpuSpec& gpu = A100();
  const workload::Op tiny = MakeMemoryOp(1e6);
  const SimResult alone = SimulateKernel(gpu, tiny, 108, 1410);
  const double gap_s = gpu.launch.kernel_gap_us * 1e-6;
  const double host_s = gpu.launch.host_launch_us * 1e-6;
  ASSERT_LT(alone.time_s + gap_s, host_s);
  const SimResult looped = SimulateSequential(gpu, {tiny}, 1410, 24);
  EXPECT_NEAR(looped.time_s, host_s, 1e-15);
  const double idle_s = host_s - alone.time_s;
  EXPECT_NEAR(looped.energy_j, alone.energy_j + gpu.power.idle_w * idle_s, 1e-9);
  // A kernel long enough for the host pays only the device gap before it.
  const workload::Op big = MakeGemm(8192, 8192, 8192);
  EXPECT_NEAR(SimulateSequential(gpu, {big}, 1110, 24).time_s,
              SimulateKernel(gpu, big, 108, 1110).time_s + gap_s, 1e-12);
}

// PowerSpec::CapMode::kAverage (H200-SXM, measured; H100-SXM, derived): the limit holds the
// average power of a simulated run at one clock, so a GEMM next to memory-bound kernels runs
// above the limit in bursts and the run sits at the limit; the default holds every set on its
// own, so the same run averages below the limit at a lower GEMM clock. One kernel alone reads
// the same either way.
TEST(PowerLimit, AverageModeHoldsTheRunsAveragePower) {
  hw::GpuSpec each = hw::GpuPreset("H200-SXM");
  ASSERT_EQ(each.power.cap_mode, hw::PowerSpec::CapMode::kAverage);
  hw::GpuSpec average = each;
  each.power.cap_mode = hw::PowerSpec::CapMode::kEachSet;
  const std::vector<workload::Op> mix = {MakeGemm(8192, 8192, 8192), MakeMemoryOp(4e9),
                                         MakeGemm(8192, 8192, 8192), MakeMemoryOp(4e9)};
  const int top = each.clock.max_mhz;
  const SimResult a = SimulateSequential(average, mix, top, 32);
  const SimResult e = SimulateSequential(each, mix, top, 32);
  EXPECT_NEAR(a.avg_power_w, average.power.cap_w, 0.5);  // held at the limit on average
  EXPECT_LT(e.avg_power_w, each.power.cap_w - 20.0);     // the memory kernels pull it below
  EXPECT_LT(a.time_s, e.time_s);                         // the GEMMs run faster
  // One clock for the whole run: reported exactly, below the maximum.
  EXPECT_LT(a.effective_freq_mhz, top);
  // A GEMM alone: the same clock and power in both modes.
  const workload::Op gemm = MakeGemm(8192, 8192, 8192);
  EXPECT_NEAR(SimulateSequential(average, {gemm}, top, 32).effective_freq_mhz,
              SimulateSequential(each, {gemm}, top, 32).effective_freq_mhz, 1.0);
  // Below the limit nothing is held.
  const SimResult cool = SimulateSequential(average, {MakeMemoryOp(4e9)}, top, 32);
  EXPECT_EQ(cool.effective_freq_mhz, top);
}

}  // namespace
}  // namespace kareus::emulator
