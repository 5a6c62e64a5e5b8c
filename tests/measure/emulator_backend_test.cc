// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "kareus/emulator/emulator.h"
#include "kareus/measure/backend.h"
#include "kareus/workload/ops.h"

namespace kareus::measure {
namespace {

workload::WorkloadModel PaperModel() {
  const char* source = std::getenv("KAREUS_SOURCE_DIR");
  const std::filesystem::path root = source ? source : ".";
  return workload::BuildWorkloadModel(workload::LoadWorkloadFile(
      root / "examples/paper/01-llama3.2-3b-tp8-mbs8-seq4096.yaml"));
}

TEST(EmulatorBackend, NoiseFreeTwinIsTheSimulationAndNoiseIsPerConfiguration) {
  const workload::WorkloadModel model = PaperModel();
  ASSERT_FALSE(model.partition_types.empty());
  const workload::PartitionType& type = model.partition_types.front();
  EmulatorBackendOptions options;
  options.seed = 3;
  options.batch_warmup_s = 10.0;
  options.workload_signature = model.workload.Signature();
  auto noisy = MakeEmulatorBackend(model.workload.gpu, options);
  auto again = MakeEmulatorBackend(model.workload.gpu, options);
  auto exact = noisy->NoiseFreeTwin();
  ASSERT_TRUE(exact);
  EXPECT_TRUE(exact->NoiseFree());
  EXPECT_FALSE(noisy->NoiseFree());
  EXPECT_NE(noisy->Description(), exact->Description());

  const Knobs a{.freq_mhz = 1410, .sms = type.sm_choices.front(), .slot = type.launch_slots.front()};
  const Knobs b{.freq_mhz = 1200, .sms = type.sm_choices.back(), .slot = type.launch_slots.back()};
  const auto first = noisy->MeasureAll(type, {a, b});
  const auto reversed = again->MeasureAll(type, {b, a});
  EXPECT_DOUBLE_EQ(first[0].energy_j, reversed[1].energy_j);
  EXPECT_DOUBLE_EQ(first[1].time_s, reversed[0].time_s);

  const auto truth = exact->MeasureAll(type, {a});
  const emulator::SimResult sim = emulator::SimulatePartition(model.workload.gpu, type, a);
  EXPECT_DOUBLE_EQ(truth[0].time_s, sim.time_s);
  EXPECT_DOUBLE_EQ(truth[0].energy_j, sim.energy_j);
  EXPECT_TRUE(truth[0].noise_free);
  // Noise is small (default 0.3 % time, 1 % energy) but present.
  EXPECT_NEAR(first[0].time_s / sim.time_s, 1.0, 0.03);
  EXPECT_NEAR(first[0].energy_j / sim.energy_j, 1.0, 0.08);
  EXPECT_NE(first[0].energy_j, sim.energy_j);
  // Cost: one warm-up per batch plus each measurement's protocol time.
  EXPECT_EQ(noisy->Measurements(), 2);
  EXPECT_NEAR(noisy->GpuSeconds(), 10.0 + first[0].gpu_seconds + first[1].gpu_seconds, 1e-9);
  EXPECT_GT(first[0].gpu_seconds, 0.0);
}

}  // namespace
}  // namespace kareus::measure
