// SPDX-License-Identifier: Apache-2.0
// Measurement emulation: seeded noise, counter quantization, cost, determinism per (seed, key).
#include <gtest/gtest.h>

#include <cmath>

#include "emulator/test_util.h"

namespace kareus::emulator {
namespace {

using testing::A100;
using testing::LlamaTp8;

SimResult Truth() {
  const workload::PartitionType& type = FindPartitionType(LlamaTp8(), "fwd_mlp");
  return SimulatePartition(A100(), type, {.freq_mhz = 1260, .sms = 12, .slot = "norm_0"});
}

TEST(Measure, NoiseFreeReturnsTheSimulationExactly) {
  const SimResult truth = Truth();
  const Measurement m = Measure(truth, {.noise_free = true}, 7, 42);
  EXPECT_TRUE(m.noise_free);
  EXPECT_EQ(m.value.time_s, truth.time_s);
  EXPECT_EQ(m.value.energy_j, truth.energy_j);
}

// The published protocol: 2 s settle after locking the clock, a 5 s window, 5 s cool-down
// (kareus-official.md §3.7, §7.1), ~12 GPU-seconds per measurement.
TEST(Measure, CostIsSettlePlusWindowPlusCooldown) {
  const Measurement m = Measure(Truth(), {}, 1, 1);
  EXPECT_DOUBLE_EQ(m.gpu_seconds, 12.0);
  EXPECT_DOUBLE_EQ(Measure(Truth(), {.noise_free = true}, 1, 1).gpu_seconds, 12.0);
}

TEST(Measure, DeterministicPerSeedAndKey) {
  const SimResult truth = Truth();
  const Measurement a = Measure(truth, {}, 3, 99);
  Measure(truth, {}, 3, 100);  // measuring something else in between changes nothing
  const Measurement b = Measure(truth, {}, 3, 99);
  EXPECT_EQ(a.value.time_s, b.value.time_s);
  EXPECT_EQ(a.value.energy_j, b.value.energy_j);
  EXPECT_NE(a.value.energy_j, Measure(truth, {}, 3, 101).value.energy_j);
  EXPECT_NE(a.value.energy_j, Measure(truth, {}, 4, 99).value.energy_j);
}

// Relative noise near the defaults (0.3 % time; 1 % energy plus the NVML counter's 100 ms
// update period over a 5 s window, ml-energy/blog thermally-stable-profiling), unbiased, and
// the static/dynamic split follows the measured time.
TEST(Measure, NoiseHasTheConfiguredSpreadAndNoBias) {
  const SimResult truth = Truth();
  const int n = 4000;
  double sum_t = 0, sum_t2 = 0, sum_e = 0, sum_e2 = 0;
  for (int i = 0; i < n; ++i) {
    const Measurement m = Measure(truth, {}, 11, static_cast<uint64_t>(i));
    const double rt = m.value.time_s / truth.time_s - 1.0;
    const double re = m.value.energy_j / truth.energy_j - 1.0;
    sum_t += rt;
    sum_t2 += rt * rt;
    sum_e += re;
    sum_e2 += re * re;
    EXPECT_DOUBLE_EQ(m.value.energy_j, m.value.static_energy_j + m.value.dynamic_energy_j);
    EXPECT_NEAR(m.value.static_energy_j, A100().power.static_w * m.value.time_s,
                1e-9 * m.value.static_energy_j);
  }
  const double sd_t = std::sqrt(sum_t2 / n - (sum_t / n) * (sum_t / n));
  const double sd_e = std::sqrt(sum_e2 / n - (sum_e / n) * (sum_e / n));
  EXPECT_NEAR(sum_t / n, 0.0, 0.0003);
  EXPECT_NEAR(sum_e / n, 0.0, 0.001);
  EXPECT_NEAR(sd_t, 0.003, 0.0003);
  // sqrt(1 %^2 + (100 ms / (5 s sqrt 6))^2) = 1.29 %
  EXPECT_NEAR(sd_e, std::sqrt(0.01 * 0.01 + std::pow(0.1 / (5.0 * std::sqrt(6.0)), 2)), 0.001);
}

}  // namespace
}  // namespace kareus::emulator
