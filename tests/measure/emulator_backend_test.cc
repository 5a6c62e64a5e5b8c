// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <limits>

#include "kareus/emulator/emulator.h"
#include "kareus/measure/emulator_backend.h"
#include "kareus/workload/ops.h"

namespace kareus::measure {
namespace {

workload::WorkloadModel PaperModel() {
  const char* source = std::getenv("KAREUS_SOURCE_DIR");
  const std::filesystem::path root = source ? source : ".";
  return workload::BuildWorkloadModel(
      workload::LoadWorkloadFile(root / "examples/paper/01-llama3.2-3b-tp8-mbs8-seq4096.yaml"));
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
  // The repeatability it declares is the noise it adds; the twin adds none.
  EXPECT_DOUBLE_EQ(noisy->DeclaredNoise().time, options.measurement.time_noise);
  EXPECT_DOUBLE_EQ(noisy->DeclaredNoise().energy, options.measurement.energy_noise);
  EXPECT_EQ(exact->DeclaredNoise().time, 0.0);
  EXPECT_EQ(exact->DeclaredNoise().energy, 0.0);

  const PartitionKnobs a{
      .freq_mhz = 1410, .sms = type.sm_choices.front(), .slot = type.launch_slots.front()};
  const PartitionKnobs b{
      .freq_mhz = 1200, .sms = type.sm_choices.back(), .slot = type.launch_slots.back()};
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
  // Cost: one warm-up per batch plus each measurement's protocol time, on every GPU of the
  // partition's collective group (TP 8 here).
  const int gpus = type.collective.group_size;
  EXPECT_EQ(gpus, 8);
  EXPECT_EQ(first[0].gpus, gpus);
  EXPECT_EQ(noisy->Measurements(), 2);
  EXPECT_NEAR(noisy->GpuSeconds(), (10.0 + first[0].seconds + first[1].seconds) * gpus, 1e-9);
  EXPECT_GT(first[0].seconds, 0.0);
  EXPECT_DOUBLE_EQ(first[0].GpuSeconds(), first[0].seconds * gpus);
}

// Whole instructions and fixed work: the twin reads the simulation, the noisy backend a
// configuration-keyed reading, each on the stage replica's GPUs (TP x CP).
TEST(EmulatorBackend, InstructionsAndFixedWork) {
  const workload::WorkloadModel model = PaperModel();
  EmulatorBackendOptions options;
  options.seed = 3;
  options.workload_signature = model.workload.Signature();
  auto noisy = MakeEmulatorBackend(model.workload.gpu, options);
  auto exact = noisy->NoiseFreeTwin();
  const schedule::Direction backward = schedule::Direction::kBackward;
  InstructionRequest sequential{
      .stage = 1,
      .direction = backward,
      .knobs = {.freq_mhz = 1200, .mode = schedule::ExecutionMode::kSequential, .partitions = {}}};
  InstructionRequest tuned{
      .stage = 0,
      .direction = backward,
      .knobs = {.freq_mhz = 1410, .mode = schedule::ExecutionMode::kNanobatched, .partitions = {}}};
  for (const auto& type : model.partition_types) {
    if (type.tunable && type.direction == backward)
      tuned.knobs.partitions[type.name] = {.sms = 9, .slot = type.launch_slots.back()};
  }
  ASSERT_FALSE(tuned.knobs.partitions.empty());
  const auto truth = exact->MeasureAll(model, std::vector<InstructionRequest>{sequential, tuned});
  EXPECT_DOUBLE_EQ(truth[0].time_s,
                   emulator::SimulateInstruction(model, 1, backward, sequential.knobs).time_s);
  EXPECT_DOUBLE_EQ(truth[1].energy_j,
                   emulator::SimulateInstruction(model, 0, backward, tuned.knobs).energy_j);
  const auto read = noisy->MeasureAll(model, std::vector<InstructionRequest>{tuned, sequential});
  EXPECT_NE(read[0].time_s, truth[1].time_s);
  EXPECT_NEAR(read[0].time_s / truth[1].time_s, 1.0, 0.03);
  const auto again = noisy->MeasureAll(model, std::vector<InstructionRequest>{sequential});
  EXPECT_DOUBLE_EQ(again[0].time_s, read[1].time_s);  // keyed by configuration, not order
  EXPECT_EQ(read[0].gpus, 8);
  EXPECT_EQ(noisy->Measurements(), 3);
  // A repeat is a reading of its own (InstructionRequest::repeat), the same each time asked;
  // the twin has no noise to repeat.
  InstructionRequest second = sequential, third = sequential;
  second.repeat = 1;
  third.repeat = 2;
  const auto repeats =
      noisy->MeasureAll(model, std::vector<InstructionRequest>{second, third, second});
  EXPECT_NE(repeats[0].energy_j, read[1].energy_j);
  EXPECT_NE(repeats[0].energy_j, repeats[1].energy_j);
  EXPECT_DOUBLE_EQ(repeats[2].energy_j, repeats[0].energy_j);
  EXPECT_DOUBLE_EQ(exact->MeasureAll(model, std::vector<InstructionRequest>{second})[0].energy_j,
                   truth[0].energy_j);

  const FixedWorkRequest last{
      .stage = 1, .direction = schedule::Direction::kForward, .freq_mhz = 1110};
  const auto fixed = exact->MeasureAll(model, std::vector<FixedWorkRequest>{last});
  const auto ops = workload::FixedWorkOps(model, 1, schedule::Direction::kForward);
  ASSERT_FALSE(ops.empty());
  EXPECT_DOUBLE_EQ(fixed[0].time_s,
                   emulator::SimulateSequential(model.workload.gpu, ops, 1110,
                                                model.workload.gpu.interconnect.library_default_sms)
                       .time_s);
}

TEST(EmulatorBackend, OptionsValidate) {
  EXPECT_FALSE(EmulatorBackendOptions{}.Validate());
  EmulatorBackendOptions bad;
  bad.measurement.energy_noise = -0.1;
  ASSERT_TRUE(bad.Validate());
  EXPECT_EQ(bad.Validate()->field, "measurement.energy_noise");
  bad = {};
  bad.batch_warmup_s = std::numeric_limits<double>::infinity();
  EXPECT_EQ(bad.Validate()->field, "batch_warmup_s");
  EXPECT_THROW(MakeEmulatorBackend(PaperModel().workload.gpu, bad), InputError);
}

}  // namespace
}  // namespace kareus::measure
