// SPDX-License-Identifier: Apache-2.0
// Invariants the physics must keep whatever the calibration (STYLE.md: test invariants).
#include <gtest/gtest.h>

#include "emulator/test_util.h"

namespace kareus::emulator {
namespace {

using testing::A100;
using testing::LlamaTp8;
using testing::MakeCollective;
using testing::MakeGemm;
using testing::MakeMemoryOp;

std::vector<workload::Op> KernelZoo() {
  std::vector<workload::Op> ops = {MakeGemm(8192, 8192, 8192), MakeGemm(1536, 2304, 4096),
                                   MakeGemm(300, 500, 256), MakeMemoryOp(4e8), MakeMemoryOp(1e5)};
  for (const auto* instr : {&LlamaTp8().stages[0].forward, &LlamaTp8().stages[1].backward}) {
    for (const workload::Op& op : instr->sequential_ops) {
      if (op.kind != workload::OpKind::kCollective) ops.push_back(op);
    }
  }
  return ops;
}

// Locked clocks are upper bounds and work is clock-proportional or clock-independent, so a
// kernel never gets slower when its lock rises (the cap can only hold it level).
TEST(Physics, KernelTimeNeverRisesWithTheLockedClock) {
  const std::vector<int> grid = A100().clock.Supported();  // descending
  for (const workload::Op& op : KernelZoo()) {
    double previous = 0.0;  // time at the next higher clock
    for (int f : grid) {
      const double t = SimulateKernel(A100(), op, 108, f).time_s;
      EXPECT_GE(t, previous * (1.0 - 1e-12)) << op.name << " at " << f;
      previous = t;
    }
  }
}

// Waves ceil(tiles/s) never grow with s and the issue limit grows with s.
TEST(Physics, KernelTimeNeverRisesWithItsSms) {
  for (const workload::Op& op : KernelZoo()) {
    for (int f : {1410, 1110, 900}) {
      double previous = 1e300;
      for (int s = 1; s <= 108; ++s) {
        const double t = SimulateKernel(A100(), op, s, f).time_s;
        EXPECT_LE(t, previous * (1.0 + 1e-12)) << op.name << " on " << s << " SMs";
        previous = t;
      }
    }
  }
  const workload::Op ar = MakeCollective(workload::CollectiveType::kAllReduce, 5e7, 8);
  double previous = 1e300;
  for (int c = 1; c < 108; ++c) {
    const double t = SimulateKernel(A100(), ar, c, 1410).time_s;
    EXPECT_LE(t, previous * (1.0 + 1e-12));
    previous = t;
  }
}

// Partition time is monotone in the clock too (a collective's channels also speed up with f),
// up to 0.1 %: where the power cap binds, a faster memory-bound phase can move the collective
// into a capped (slower-clocked) GEMM phase, as power management does on real GPUs.
TEST(Physics, PartitionTimeNeverRisesWithTheLockedClock) {
  for (const workload::PartitionType& type : LlamaTp8().partition_types) {
    if (!type.tunable) continue;
    for (int sms : {type.sm_choices.front(), type.sm_choices.back()}) {
      for (const std::string& slot : type.launch_slots) {
        double previous = 0.0;
        for (int f : A100().clock.ProfileGrid()) {
          const double t =
              SimulatePartition(A100(), type, {.freq_mhz = f, .sms = sms, .slot = slot}).time_s;
          EXPECT_GE(t, previous * (1.0 - 1e-3)) << type.name << " " << slot << " " << f;
          previous = t;
        }
      }
    }
  }
}

// A partition of one GEMM (launch slot 0) overlapped with a long all-reduce.
workload::PartitionType GemmPartition(const workload::Op& gemm) {
  workload::PartitionType p;
  p.name = "gemm_vs_ar";
  p.compute_ops = {gemm};
  p.collective = MakeCollective(workload::CollectiveType::kAllReduce, 2e9, 8);
  p.slots = {{.name = "linear_0", .op_index = 0}};
  p.launch_slots = {"linear_0"};
  for (int s = 1; s <= 30; ++s) p.sm_choices.push_back(s);
  return p;
}

// Wave quantization (gpu-power-model.md §3.3: a GEMM launching 132 blocks next to an NCCL
// kernel got an extra wave, "nearly doubling" its time, NVIDIA forum 339078): tiles = SM count
// -> one wave alone, two waves when a collective holds even one SM. A GEMM with 96 tiles loses
// nothing to a 12-SM collective.
TEST(Physics, WaveQuantizationDoublesAGemmWhoseTilesEqualTheSmCount) {
  const workload::Op full = MakeGemm(128 * 12, 256 * 9, 8192);
  ASSERT_EQ(full.tiles, 108);
  const double alone = SimulateKernel(A100(), full, 108, 1110).time_s;
  const SimResult shared = SimulatePartition(A100(), GemmPartition(full),
                                             {.freq_mhz = 1110, .sms = 1, .slot = "linear_0"});
  ASSERT_NEAR(shared.overlap_s, shared.compute_busy_s, 1e-12);  // the AR outlasts the GEMM
  EXPECT_NEAR(shared.compute_busy_s / alone, 2.0, 0.1);

  const workload::Op partial = MakeGemm(128 * 12, 256 * 8, 8192);
  ASSERT_EQ(partial.tiles, 96);
  const double partial_alone = SimulateKernel(A100(), partial, 108, 1110).time_s;
  const SimResult partial_shared = SimulatePartition(
      A100(), GemmPartition(partial), {.freq_mhz = 1110, .sms = 12, .slot = "linear_0"});
  EXPECT_LT(partial_shared.compute_busy_s / partial_alone, 1.02);
}

// Kareus/Perseus account energy as static (P_static x wall time) + dynamic (the rest)
// (gpu-power-model.md §0); the split is exact, not approximate.
TEST(Physics, EnergyIsStaticPlusDynamicExactly) {
  const workload::PartitionType& type = emulator::FindPartitionType(LlamaTp8(), "fwd_attn");
  for (const SweepPoint& p : SweepPartition(A100(), type)) {
    EXPECT_EQ(p.result.energy_j, p.result.static_energy_j + p.result.dynamic_energy_j);
    EXPECT_DOUBLE_EQ(p.result.static_energy_j, A100().power.static_w * p.result.time_s);
    EXPECT_GT(p.result.dynamic_energy_j, 0.0);
    EXPECT_LE(p.result.avg_power_w, A100().power.cap_w + 1e-6);
  }
  for (ExecutionMode mode : {ExecutionMode::kNanobatched, ExecutionMode::kSequential}) {
    const SimResult r = SimulateInstruction(LlamaTp8(), 1, schedule::Direction::kBackward,
                                            DefaultInstructionKnobs(LlamaTp8(), 1200, mode));
    EXPECT_EQ(r.energy_j, r.static_energy_j + r.dynamic_energy_j);
    EXPECT_DOUBLE_EQ(r.static_energy_j, A100().power.static_w * r.time_s);
  }
}

// Theorem 1 of the paper (constant frequency is more energy-efficient; gpu-power-model.md §5,
// paper-notes.md §3): the same clock-proportional work done half the time at f1 and half at f2
// uses no less energy than at the constant average clock, which takes the same time.
TEST(Physics, ConstantClockBeatsAnAlternatingScheduleWithTheSameAverage) {
  struct Pair {
    int f1, f2;
  };
  // Below the 400 W board's hold on a dense GEMM (near 1225 MHz), across the voltage floor.
  for (const Pair& pair : {Pair{1050, 1200}, Pair{900, 1200}, Pair{960, 1140}, Pair{1020, 1080}}) {
    const int avg = (pair.f1 + pair.f2) / 2;
    // Waves in proportion to the clocks, so both halves take the same time: 108-tile waves of
    // a GEMM (k sets the per-tile work), total (f1 + f2) / 30 waves.
    const int64_t waves_1 = pair.f1 / 30, waves_2 = pair.f2 / 30;
    const workload::Op whole = MakeGemm(128 * 12 * (waves_1 + waves_2), 256 * 9, 4096);
    workload::Op part_1 = MakeGemm(128 * 12 * waves_1, 256 * 9, 4096);
    workload::Op part_2 = MakeGemm(128 * 12 * waves_2, 256 * 9, 4096);
    // Same work: the halves split the whole GEMM's FLOPs and bytes exactly.
    part_1.bytes = whole.bytes * double(waves_1) / double(waves_1 + waves_2);
    part_2.bytes = whole.bytes - part_1.bytes;
    ASSERT_DOUBLE_EQ(part_1.flops + part_2.flops, whole.flops);
    const SimResult constant = SimulateKernel(A100(), whole, 108, avg);
    const SimResult a = SimulateKernel(A100(), part_1, 108, pair.f1);
    const SimResult b = SimulateKernel(A100(), part_2, 108, pair.f2);
    EXPECT_NEAR(a.time_s, b.time_s, 1e-9 * a.time_s);  // alternating: equal durations
    EXPECT_NEAR(constant.time_s, a.time_s + b.time_s, 1e-9 * constant.time_s);
    EXPECT_LE(constant.energy_j, a.energy_j + b.energy_j) << pair.f1 << "/" << pair.f2;
  }
}

}  // namespace
}  // namespace kareus::emulator
