// SPDX-License-Identifier: Apache-2.0
// The executor on the schedules large jobs use, against the fake NVML: a GPipe plan round-trips
// through plan.json and the executor; interleaved 1F1B with and without the chunk in the hooks;
// the data-parallel gradient sync (the launching backwards' knobs, the tail's clock).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "kareus/device/frequency_controller.h"
#include "kareus/device/nvml.h"
#include "kareus/runtime/plan_executor.h"
#include "runtime/runtime_test_util.h"

namespace kareus::runtime {
namespace {

using schedule::Direction;
using schedule::ScheduleKind;
using testing::ClockCalls;
using ::testing::HasSubstr;
using testing::TestClockMhz;

constexpr int kTailMhz = 1200;

// A valid plan of `kind` (S stages x M microbatches x V chunks); with `sync` every chunk's last
// backward launches the gradient reduction (SMs 2 + chunk, overlapped on even stages) and each
// stage has a sync tail at kTailMhz.
plan::Plan MakePlan(ScheduleKind kind, int stages, int microbatches, int chunks, bool sync) {
  plan::Plan plan;
  plan.method = "kareus";
  plan.workload = Json{{"test", true}};
  plan.schedule = kind;
  plan.num_microbatches = microbatches;
  plan.virtual_stages = chunks;
  for (int s = 0; s < stages; ++s) {
    plan::PlannedStage stage{.stage = s, .gpus = 2, .instructions = {}};
    int i = 0;
    for (const auto& slot : schedule::StageOrder(kind, stages, s, microbatches, chunks)) {
      plan::PlannedInstruction instruction{.kind = slot.kind,
                                           .chunk = slot.chunk,
                                           .microbatch = slot.microbatch,
                                           .freq_mhz = TestClockMhz(s, i++),
                                           .mode = schedule::ExecutionMode::kSequential,
                                           .partitions = {},
                                           .time_s = 0.1,
                                           .energy_j = 1.0};
      if (sync && slot.kind == Direction::kBackward && slot.microbatch == microbatches - 1) {
        instruction.gradient_sync =
            plan::InstructionGradientSync{.sms = 2 + slot.chunk, .overlapped = s % 2 == 0};
      }
      stage.instructions.push_back(instruction);
    }
    if (sync)
      stage.gradient_sync =
          plan::StageGradientSync{.freq_mhz = kTailMhz, .sms = 4, .time_s = 0.2, .energy_j = 30.0};
    plan.stages.push_back(stage);
  }
  return plan;
}

class SchedulesTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::FreshTestDirWithNvmlLog("kareus_schedules_test", &log_); }
  void TearDown() override {
    unsetenv("FAKE_NVML_LOG");
    std::filesystem::remove_all(dir_);
  }
  std::shared_ptr<device::Nvml> OpenNvml() {
    return device::Nvml::Open({.library_path = testing::FakeNvmlPath()});
  }

  // The set calls for `steps` repetitions of the stage's plan (one per clock change), with the
  // tail's clock after the last instruction when the loop runs the sync hooks.
  static std::vector<std::string> ExpectedSets(const plan::Plan& plan, int stage, int steps,
                                               bool sync_hooks) {
    std::vector<std::string> calls;
    int last = 0;
    auto request = [&](int mhz) {
      if (mhz != last) calls.push_back("set " + std::to_string(mhz));
      last = mhz;
    };
    for (int step = 0; step < steps; ++step) {
      for (const auto& instruction : plan.stages[stage].instructions) request(instruction.freq_mhz);
      if (sync_hooks && plan.stages[stage].gradient_sync)
        request(plan.stages[stage].gradient_sync->freq_mhz);
    }
    return calls;
  }

  std::filesystem::path dir_;
  std::filesystem::path log_;
};

// A GPipe plan written by the plan writer, read back unchanged, and run by one executor per
// stage (each on its own GPU and thread): clocks in the plan's order, only on change, reset at
// the end; a loop running 1F1B against it is refused at its first 1F1B-only instruction.
TEST_F(SchedulesTest, GPipePlanRoundTripsThroughTheExecutor) {
  constexpr int kStages = 2, kMicrobatches = 4, kSteps = 2;
  const plan::Plan plan = MakePlan(ScheduleKind::kGPipe, kStages, kMicrobatches, 1, false);
  const std::filesystem::path path = dir_ / "plan.json";
  plan::WritePlanFile(path, plan);
  const plan::Plan read = plan::ReadPlanFile(path);
  EXPECT_EQ(plan::ToJson(read), plan::ToJson(plan));
  EXPECT_EQ(read.schedule, ScheduleKind::kGPipe);
  {
    auto nvml = OpenNvml();
    std::vector<std::thread> ranks;
    for (int stage = 0; stage < kStages; ++stage) {
      ranks.emplace_back([&, stage] {
        device::FrequencyController controller(
            nvml, {.gpu = stage, .install_signal_handlers = false, .coalesce = false});
        PlanExecutor executor(path, {.stage = stage}, &controller);
        for (int step = 0; step < kSteps; ++step) {
          // GPipe: every forward, then every backward.
          for (int m = 0; m < kMicrobatches; ++m) {
            executor.OnInstructionBegin("forward");
            EXPECT_EQ(executor.current_instruction().microbatch, m);
            executor.OnInstructionEnd("forward");
          }
          for (int m = 0; m < kMicrobatches; ++m) {
            executor.OnInstructionBegin("backward");
            executor.OnInstructionEnd("backward");
          }
          executor.OnStepEnd();
        }
        controller.WaitIdle();
        EXPECT_EQ(controller.stats().failures, 0);
      });
    }
    for (auto& rank : ranks) rank.join();
  }
  for (int stage = 0; stage < kStages; ++stage) {
    std::vector<std::string> expected = ExpectedSets(plan, stage, kSteps, false);
    expected.push_back("reset");
    EXPECT_EQ(ClockCalls(log_, stage), expected) << "stage " << stage;
  }
  PlanExecutor executor(read, {.stage = 0});
  executor.OnInstructionBegin("forward");
  executor.OnInstructionEnd("forward");
  try {
    executor.OnInstructionBegin("backward");  // 1F1B on stage 0 of 2 would run B0 here
    FAIL() << "a 1F1B loop against a GPipe plan";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the training loop began backward"));
    EXPECT_THAT(e.what(), HasSubstr("forward (microbatch 1)"));
  }
}

// Interleaved 1F1B: the loop passes Megatron's model chunk (checked), or leaves it to the plan.
TEST_F(SchedulesTest, InterleavedHooksCheckTheChunk) {
  constexpr int kStages = 2, kMicrobatches = 4, kChunks = 2;
  const plan::Plan plan =
      MakePlan(ScheduleKind::kInterleaved1F1B, kStages, kMicrobatches, kChunks, false);
  const std::filesystem::path path = dir_ / "plan.json";
  plan::WritePlanFile(path, plan);
  {
    auto nvml = OpenNvml();
    device::FrequencyController controller(
        nvml, {.gpu = 1, .install_signal_handlers = false, .coalesce = false});
    PlanExecutor executor(path, {.stage = 1}, &controller);
    const auto order =
        schedule::StageOrder(ScheduleKind::kInterleaved1F1B, kStages, 1, kMicrobatches, kChunks);
    for (int step = 0; step < 2; ++step) {
      for (const auto& slot : order) {
        const char* kind = schedule::ToString(slot.kind);
        if (step == 0) {
          executor.OnInstructionBegin(kind, slot.chunk);  // as forward_step_helper knows it
        } else {
          executor.OnInstructionBegin(kind);  // following the plan
        }
        EXPECT_EQ(executor.current_instruction().chunk, slot.chunk);
        EXPECT_EQ(executor.current_instruction().microbatch, slot.microbatch);
        if (step == 0) {
          executor.OnInstructionEnd(kind, slot.chunk);
        } else {
          executor.OnInstructionEnd(kind);
        }
      }
      executor.OnStepEnd();
    }
    controller.WaitIdle();
  }
  std::vector<std::string> expected = ExpectedSets(plan, 1, 2, false);
  expected.push_back("reset");
  EXPECT_EQ(ClockCalls(log_, 1), expected);

  // Stage 0 starts with F0 on chunk 0 then F1 on chunk 0: a loop on chunk 1 is refused and
  // told what the plan expects.
  PlanExecutor executor(plan, {.stage = 0});
  executor.OnInstructionBegin("forward", 0);
  executor.OnInstructionEnd("forward", 0);
  try {
    executor.OnInstructionBegin("forward", 1);
    FAIL() << "wrong chunk accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("began forward (chunk 1)"));
    EXPECT_THAT(e.what(), HasSubstr("forward (microbatch 1)"));
    EXPECT_THAT(e.what(), HasSubstr("virtual stages"));
  }
  // The mismatch abandoned the step: the next instruction starts a fresh one.
  executor.OnInstructionBegin("forward", 0);
  EXPECT_EQ(executor.instruction_index(), 0);
  try {
    executor.OnInstructionEnd("forward", 1);
    FAIL() << "end of the wrong chunk accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("on_instruction_end(forward (chunk 1))"));
  }
}

// Data parallelism: each chunk's last backward serves the reduction's knobs; the sync hooks
// after the step's last instruction apply the tail's clock; misuse is refused.
TEST_F(SchedulesTest, GradientSyncKnobsAndTailClock) {
  constexpr int kStages = 2, kMicrobatches = 4, kChunks = 2;
  const plan::Plan plan =
      MakePlan(ScheduleKind::kInterleaved1F1B, kStages, kMicrobatches, kChunks, true);
  const std::filesystem::path path = dir_ / "plan.json";
  plan::WritePlanFile(path, plan);
  EXPECT_EQ(plan::ToJson(plan::ReadPlanFile(path)), plan::ToJson(plan));
  {
    auto nvml = OpenNvml();
    device::FrequencyController controller(
        nvml, {.gpu = 0, .install_signal_handlers = false, .coalesce = false});
    PlanExecutor executor(path, {.stage = 0}, &controller);
    ASSERT_TRUE(executor.stage_gradient_sync().has_value());
    EXPECT_EQ(executor.stage_gradient_sync()->freq_mhz, kTailMhz);
    for (int step = 0; step < 2; ++step) {
      int launches = 0;
      for (const auto& slot : schedule::StageOrder(ScheduleKind::kInterleaved1F1B, kStages, 0,
                                                   kMicrobatches, kChunks)) {
        const char* kind = schedule::ToString(slot.kind);
        executor.OnInstructionBegin(kind, slot.chunk);
        const auto sync = executor.gradient_sync();
        if (slot.kind == Direction::kBackward && slot.microbatch == kMicrobatches - 1) {
          ASSERT_TRUE(sync.has_value());
          EXPECT_EQ(sync->sms, 2 + slot.chunk);
          EXPECT_TRUE(sync->overlapped);
          ++launches;
        } else {
          EXPECT_FALSE(sync.has_value());
        }
        executor.OnInstructionEnd(kind, slot.chunk);
      }
      EXPECT_EQ(launches, kChunks);
      executor.OnGradientSyncBegin();
      EXPECT_TRUE(executor.in_gradient_sync());
      executor.OnGradientSyncEnd();
      executor.OnStepEnd();
    }
    controller.WaitIdle();
  }
  std::vector<std::string> expected = ExpectedSets(plan, 0, 2, true);
  expected.push_back("reset");
  EXPECT_EQ(ClockCalls(log_, 0), expected);
  EXPECT_THAT(expected, ::testing::Contains("set " + std::to_string(kTailMhz)));

  PlanExecutor executor(plan, {.stage = 1});
  executor.OnInstructionBegin("forward");
  executor.OnInstructionEnd("forward");
  try {
    executor.OnGradientSyncBegin();
    FAIL() << "sync before the step's last instruction";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("on_gradient_sync_begin came after 1 of 16 instructions"));
  }
  EXPECT_THROW(executor.OnGradientSyncEnd(), InputError);
  // Without data parallelism the hooks are no-ops around the step's end.
  PlanExecutor plain(MakePlan(ScheduleKind::k1F1B, 2, 2, 1, false), {.stage = 1});
  for (const char* kind : {"forward", "backward", "forward", "backward"}) {
    plain.OnInstructionBegin(kind);
    plain.OnInstructionEnd(kind);
  }
  EXPECT_FALSE(plain.stage_gradient_sync().has_value());
  plain.OnGradientSyncBegin();
  plain.OnGradientSyncEnd();
  plain.OnStepEnd();
  EXPECT_EQ(plain.step(), 1);
}

// The plan file refuses inconsistent schedules and syncs, naming the field.
TEST_F(SchedulesTest, PlanFileRules) {
  auto expect_error = [](Json json, const std::string& fragment) {
    try {
      plan::PlanFromJson(json);
      FAIL() << "accepted; expected " << fragment;
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr(fragment));
    }
  };
  const Json interleaved = plan::ToJson(MakePlan(ScheduleKind::kInterleaved1F1B, 2, 4, 2, true));
  Json bad = interleaved;
  bad["virtual_stages"] = 1;
  expect_error(bad, "virtual_stages");
  bad = interleaved;
  bad["virtual_stages"] = 3;
  expect_error(bad, "num_microbatches x virtual_stages (4 x 3)");
  bad = interleaved;
  bad["stages"][0]["instructions"][0]["chunk"] = 1;
  expect_error(bad,
               "interleaved 1F1B order of stage 0 of 2 with 4 microbatches and 2 chunks expects "
               "forward 0 here");
  bad = interleaved;
  bad["stages"][1].erase("gradient_sync");
  expect_error(bad, "stages[1].gradient_sync");
  bad = interleaved;
  bad["stages"][0]["instructions"][0]["gradient_sync"] = {{"sms", 2}, {"overlapped", true}};
  expect_error(bad, "only the last backward of a chunk");
  bad = interleaved;
  bad["stages"][0]["gradient_sync"]["sms"] = 0;
  expect_error(bad, "stages[0].gradient_sync.sms");
  Json gpipe = plan::ToJson(MakePlan(ScheduleKind::kGPipe, 2, 3, 1, false));
  gpipe["virtual_stages"] = 2;
  expect_error(gpipe, "must be 1 for the gpipe schedule");
}

}  // namespace
}  // namespace kareus::runtime
