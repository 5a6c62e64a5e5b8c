// SPDX-License-Identifier: Apache-2.0
// The runtime against the fake NVML (fake_nvml.c): clocks in plan order and only on change,
// resets on every way out (normal exit, exception, SIGTERM/SIGINT, std::terminate), the
// permission refusal, energy windows, order checks, plan swaps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kareus/common/io.h"
#include "kareus/device/frequency_controller.h"
#include "kareus/device/nvml.h"
#include "kareus/runtime/energy_monitor.h"
#include "kareus/runtime/plan_executor.h"
#include "plan/plan_for.h"
#include "runtime/runtime_test_util.h"

namespace kareus::runtime {
namespace {

using testing::ClockCalls;
using ::testing::ElementsAre;
using testing::FakeNvml;
using ::testing::HasSubstr;
using testing::MakeTestPlan;

constexpr int kStages = 2;
constexpr int kMicrobatches = 8;

class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDirWithNvmlLog("kareus_runtime_test", &log_);
    for (const char* name : {"FAKE_NVML_SET_RETURN", "FAKE_NVML_ENERGY_RETURN",
                             "FAKE_NVML_INIT_RETURN", "FAKE_NVML_DEVICES", "FAKE_NVML_POWER_MW"}) {
      unsetenv(name);
    }
  }
  void TearDown() override {
    unsetenv("FAKE_NVML_LOG");
    std::filesystem::remove_all(dir_);
  }

  std::shared_ptr<device::Nvml> OpenNvml() {
    return device::Nvml::Open({.library_path = testing::FakeNvmlPath()});
  }

  // One step of `stage`'s 1F1B loop through the hooks, as Megatron's schedule runs it.
  static void RunStep(PlanExecutor& executor, int stage, int num_stages = kStages,
                      int num_microbatches = kMicrobatches) {
    executor.OnStepBegin();
    for (const auto& slot :
         schedule::StageOrder(schedule::ScheduleKind::k1F1B, num_stages, stage, num_microbatches)) {
      const char* kind = schedule::ToString(slot.kind);
      executor.OnInstructionBegin(kind);
      executor.OnInstructionEnd(kind);
    }
    executor.OnStepEnd();
  }

  // The set calls a controller must make for `steps` repetitions of the stage's plan: one per
  // change of clock, the first from the default clocks.
  static std::vector<std::string> ExpectedSets(const plan::Plan& plan, int stage, int steps) {
    std::vector<std::string> calls;
    int last = 0;
    for (int step = 0; step < steps; ++step) {
      for (const auto& instruction : plan.stages[stage].instructions) {
        if (instruction.freq_mhz != last)
          calls.push_back("set " + std::to_string(instruction.freq_mhz));
        last = instruction.freq_mhz;
      }
    }
    return calls;
  }

  std::filesystem::path dir_;
  std::filesystem::path log_;
};

// Issue 31: the runtime applies the plan check export and the executor apply; on a machine
// without Kareus's data folder it still checks the stage list against the recorded workload.
TEST_F(RuntimeTest, PlansThatDoNotFitTheirWorkloadAreRefused) {
  const plan::Plan good = plan::testing::PlanFor("01-llama3.2-3b-tp8-mbs8-seq4096.yaml");
  EXPECT_NO_THROW(PlanExecutor(good, {.stage = 1}, nullptr));
  const auto refusal = [](const plan::Plan& plan) {
    try {
      PlanExecutor executor(plan, {.stage = 0}, nullptr);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  plan::Plan pp = good;
  pp.workload["parallelism"]["pp"] = 4;
  EXPECT_THAT(refusal(pp), HasSubstr("workload.parallelism.pp = 4: the plan lists 2 stages"));
  plan::Plan clock = good;
  clock.stages[1].instructions[2].freq_mhz = 5000;
  EXPECT_THAT(refusal(clock), HasSubstr("stages[1].instructions[2].freq_mhz = 5000: not a clock"));
  plan::Plan slot = good;
  slot.stages[0].instructions[0].partitions[0].slot = "nowhere";
  EXPECT_THAT(refusal(slot), HasSubstr("slot = nowhere: not a slot of"));
  const char* data = std::getenv("KAREUS_DATA_DIR");
  const std::string saved = data ? data : "";
  setenv("KAREUS_DATA_DIR", (dir_ / "no-data").c_str(), 1);
  EXPECT_THAT(refusal(pp), HasSubstr("workload.parallelism.pp = 4"));
  EXPECT_EQ(refusal(clock), "");  // NVML's range is the check there (none without a controller)
  if (data) {
    setenv("KAREUS_DATA_DIR", saved.c_str(), 1);
  } else {
    unsetenv("KAREUS_DATA_DIR");
  }
}

TEST_F(RuntimeTest, MissingLibraryOrDeviceIsAnEnvironmentError) {
  try {
    device::Nvml::Open({.library_path = "/nonexistent/libnvidia-ml.so.1"});
    FAIL() << "expected EnvironmentError";
  } catch (const EnvironmentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/libnvidia-ml.so.1"));
    EXPECT_THAT(e.what(), HasSubstr("KAREUS_NVML_LIBRARY"));
  }
  setenv("FAKE_NVML_DEVICES", "0", 1);
  EXPECT_THROW(OpenNvml(), EnvironmentError);
  unsetenv("FAKE_NVML_DEVICES");
  setenv("FAKE_NVML_INIT_RETURN", "9", 1);
  try {
    OpenNvml();
    FAIL() << "expected NvmlError";
  } catch (const device::NvmlError& e) {
    EXPECT_EQ(e.code(), 9);
    EXPECT_THAT(e.what(), HasSubstr("Driver Not Loaded"));
  }
  unsetenv("FAKE_NVML_INIT_RETURN");
  auto nvml = OpenNvml();
  EXPECT_EQ(nvml->device_count(), 2);
  EXPECT_THROW(device::FrequencyController(nvml, {.gpu = 2}), EnvironmentError);
  EXPECT_THROW(EnergyMonitor(nvml, {.gpus = {0, 5}}), EnvironmentError);
}

TEST_F(RuntimeTest, LibraryPathFromEnvironment) {
  setenv("KAREUS_NVML_LIBRARY", testing::FakeNvmlPath().c_str(), 1);
  auto nvml = device::Nvml::Open();
  EXPECT_EQ(nvml->library_path(), testing::FakeNvmlPath());
  EXPECT_EQ(nvml->ClockMhz(0, device::ClockType::kSm), 1980);  // default clocks
  EXPECT_DOUBLE_EQ(nvml->PowerW(1), 250.0);
  unsetenv("KAREUS_NVML_LIBRARY");
}

TEST_F(RuntimeTest, SupportedClocksAndSnapping) {
  auto nvml = OpenNvml();
  device::FrequencyController controller(nvml, {.gpu = 0, .install_signal_handlers = false});
  const auto& clocks = controller.supported_clocks_mhz();
  ASSERT_FALSE(clocks.empty());
  EXPECT_EQ(clocks.front(), 1980);
  EXPECT_EQ(clocks.back(), 210);
  EXPECT_TRUE(std::is_sorted(clocks.rbegin(), clocks.rend()));
  EXPECT_EQ(controller.SnapToSupported(1000), 1005);  // 990 and 1005 on the grid
  EXPECT_EQ(controller.SnapToSupported(5000), 1980);
  EXPECT_EQ(controller.SnapToSupported(1410), 1410);
  // Invariant: the binary search equals the brute-force nearest clock (ties: the higher one).
  for (int mhz = 1; mhz <= 2600; ++mhz) {
    int best = clocks.front();
    for (int clock : clocks) {
      if (std::abs(clock - mhz) < std::abs(best - mhz)) best = clock;
    }
    ASSERT_EQ(controller.SnapToSupported(mhz), best) << mhz;
  }
  EXPECT_THROW(controller.RequestClock(0), InputError);
}

// The acceptance loop: 2 stages x 8 microbatches, each stage a "rank" on its own thread and
// GPU, three steps. Clocks are set in the plan's order, only on change, and reset at exit.
TEST_F(RuntimeTest, ClocksFollowThePlanOnlyOnChangeAndResetAtExit) {
  const plan::Plan plan = MakeTestPlan(kStages, kMicrobatches);
  const std::filesystem::path plan_path = dir_ / "plan.json";
  plan::WritePlanFile(plan_path, plan);
  constexpr int kSteps = 3;
  {
    auto nvml = OpenNvml();
    std::vector<std::thread> ranks;
    for (int stage = 0; stage < kStages; ++stage) {
      ranks.emplace_back([&, stage] {
        device::FrequencyController controller(nvml, {.gpu = stage, .coalesce = false});
        PlanExecutor executor(plan_path, {.stage = stage}, &controller);
        for (int step = 0; step < kSteps; ++step) RunStep(executor, stage);
        controller.WaitIdle();
        const device::FrequencyControllerStats stats = controller.stats();
        EXPECT_EQ(stats.requests, kSteps * 2 * kMicrobatches);
        EXPECT_EQ(stats.set_calls, static_cast<int64_t>(ExpectedSets(plan, stage, kSteps).size()));
        EXPECT_EQ(stats.failures, 0);
        EXPECT_EQ(stats.applied_mhz, plan.stages[stage].instructions.back().freq_mhz);
      });
    }
    for (auto& rank : ranks) rank.join();
  }
  for (int stage = 0; stage < kStages; ++stage) {
    std::vector<std::string> expected = ExpectedSets(plan, stage, kSteps);
    expected.push_back("reset");
    EXPECT_EQ(ClockCalls(log_, stage), expected) << "stage " << stage;
  }
}

TEST_F(RuntimeTest, CoalescingSkipsOnlyStaleClocksAndEndsOnTheLast) {
  auto nvml = OpenNvml();
  std::vector<int> requested;
  {
    device::FrequencyController controller(nvml, {.gpu = 0, .install_signal_handlers = false});
    for (int i = 0; i < 200; ++i) {
      const int mhz = 1200 + 15 * (i % 7);
      controller.RequestClock(mhz);
      requested.push_back(mhz);
    }
    controller.WaitIdle();
    EXPECT_EQ(controller.stats().applied_mhz, requested.back());
    FakeNvml fake;
    EXPECT_EQ(fake.locked_mhz(0), static_cast<unsigned>(requested.back()));
  }
  // The sets are a subsequence of the requests, in order, ending with the last request.
  const std::vector<std::string> calls = ClockCalls(log_, 0);
  ASSERT_GE(calls.size(), 2u);
  EXPECT_EQ(calls.back(), "reset");
  size_t next = 0;
  for (size_t c = 0; c + 1 < calls.size(); ++c) {
    while (next < requested.size() && calls[c] != "set " + std::to_string(requested[next])) ++next;
    ASSERT_LT(next, requested.size()) << "set out of request order: " << calls[c];
    ++next;
  }
  EXPECT_EQ(calls[calls.size() - 2], "set " + std::to_string(requested.back()));
}

TEST_F(RuntimeTest, ExceptionPathResetsClocks) {
  const plan::Plan plan = MakeTestPlan(kStages, kMicrobatches);
  auto nvml = OpenNvml();
  try {
    device::FrequencyController controller(nvml, {.gpu = 1, .install_signal_handlers = false});
    PlanExecutor executor(plan, {.stage = 1}, &controller);
    executor.OnStepBegin();
    executor.OnInstructionBegin("forward");
    controller.WaitIdle();
    throw std::runtime_error("out of memory in the model");
  } catch (const std::runtime_error&) {
  }
  EXPECT_THAT(
      ClockCalls(log_, 1),
      ElementsAre("set " + std::to_string(plan.stages[1].instructions[0].freq_mhz), "reset"));
  FakeNvml fake;
  EXPECT_EQ(fake.locked_mhz(1), 0u);
}

TEST_F(RuntimeTest, ResetClocksIsSynchronousAndIdempotent) {
  auto nvml = OpenNvml();
  device::FrequencyController controller(nvml, {.gpu = 0, .install_signal_handlers = false});
  controller.RequestClock(1410);
  controller.WaitIdle();
  controller.ResetClocks();
  FakeNvml fake;
  EXPECT_EQ(controller.stats().applied_mhz, 0);
  EXPECT_EQ(fake.locked_mhz(0), 0u);
  controller.ResetClocks();  // nothing locked: no call
  EXPECT_THAT(ClockCalls(log_, 0), ElementsAre("set 1410", "reset"));
}

// A child process runs the loop for ever; the parent kills it with `signal_number` and checks
// from the call log that the clocks were reset and nothing was set afterwards.
void KillChildAndCheckReset(const std::filesystem::path& plan_path,
                            const std::filesystem::path& log, int signal_number) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    try {
      auto nvml = device::Nvml::Open({.library_path = testing::FakeNvmlPath()});
      device::FrequencyController controller(nvml, {.gpu = 0});
      PlanExecutor executor(plan_path, {.stage = 0}, &controller);
      bool told = false;
      while (true) {
        executor.OnStepBegin();
        for (const auto& slot :
             schedule::StageOrder(schedule::ScheduleKind::k1F1B, kStages, 0, kMicrobatches)) {
          executor.OnInstructionBegin(schedule::ToString(slot.kind));
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          executor.OnInstructionEnd(schedule::ToString(slot.kind));
        }
        executor.OnStepEnd();
        if (!told) {
          controller.WaitIdle();
          told = write(ready[1], "x", 1) == 1;
        }
      }
    } catch (...) {
      _exit(3);
    }
  }
  close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1) << "child did not start its loop";
  close(ready[0]);
  kill(child, signal_number);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child status " << status;
  EXPECT_EQ(WTERMSIG(status), signal_number) << "the default action must follow the reset";
  const std::vector<std::string> calls = ClockCalls(log, 0);
  ASSERT_GE(calls.size(), 2u);
  EXPECT_EQ(calls.back(), "reset");
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "reset"), 1);
}

TEST_F(RuntimeTest, SigtermResetsClocksThenTerminates) {
  plan::WritePlanFile(dir_ / "plan.json", MakeTestPlan(kStages, kMicrobatches));
  KillChildAndCheckReset(dir_ / "plan.json", log_, SIGTERM);
}

TEST_F(RuntimeTest, SigintResetsClocksThenTerminates) {
  plan::WritePlanFile(dir_ / "plan.json", MakeTestPlan(kStages, kMicrobatches));
  KillChildAndCheckReset(dir_ / "plan.json", log_, SIGINT);
}

TEST_F(RuntimeTest, UncaughtExceptionResetsClocksThroughTerminate) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto nvml = device::Nvml::Open({.library_path = testing::FakeNvmlPath()});
    auto* controller = new device::FrequencyController(nvml, {.gpu = 0});  // never destroyed
    controller->RequestClock(1410);
    controller->WaitIdle();
    std::thread([] { throw std::runtime_error("uncaught"); }).join();  // std::terminate
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGABRT);
  EXPECT_THAT(ClockCalls(log_, 0), ElementsAre("set 1410", "reset"));
}

TEST_F(RuntimeTest, ExitWithoutDestructorResetsClocks) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto nvml = device::Nvml::Open({.library_path = testing::FakeNvmlPath()});
    auto* controller = new device::FrequencyController(nvml, {.gpu = 1});  // leaked on purpose
    controller->RequestClock(1605);
    controller->WaitIdle();
    std::exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_THAT(ClockCalls(log_, 1), ElementsAre("set 1605", "reset"));
}

TEST_F(RuntimeTest, PermissionRefusalWarnsOnceAndMeasuresOnly) {
  setenv("FAKE_NVML_SET_RETURN", "4", 1);  // NVML_ERROR_NO_PERMISSION
  const plan::Plan plan = MakeTestPlan(kStages, kMicrobatches);
  std::vector<std::string> warnings;
  std::mutex warnings_mutex;
  {
    auto nvml = OpenNvml();
    device::FrequencyController controller(nvml,
                                           {.gpu = 0,
                                            .install_signal_handlers = false,
                                            .coalesce = false,
                                            .warn = [&](const std::string& message) {
                                              std::lock_guard<std::mutex> lock(warnings_mutex);
                                              warnings.push_back(message);
                                            }});
    PlanExecutor executor(plan, {.stage = 0}, &controller);
    RunStep(executor, 0);
    controller.WaitIdle();
    RunStep(executor, 0);
    controller.WaitIdle();
    EXPECT_TRUE(controller.measure_only());
    EXPECT_EQ(controller.stats().set_calls, 1);
    EXPECT_EQ(controller.stats().applied_mhz, 0);
  }
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("Insufficient Permissions"));
  EXPECT_THAT(warnings[0], HasSubstr("measure-only"));
  // One refused set, nothing after it (not even a reset: nothing of ours was locked).
  EXPECT_THAT(
      ClockCalls(log_, 0),
      ElementsAre("set " + std::to_string(plan.stages[0].instructions[0].freq_mhz) + " -> 4"));
}

TEST_F(RuntimeTest, OtherSetFailuresWarnOncePerCodeAndKeepTrying) {
  auto nvml = OpenNvml();
  FakeNvml fake;
  fake.set_return("set", 15);  // GPU is lost
  int warnings = 0;
  device::FrequencyController controller(nvml, {.gpu = 0,
                                                .install_signal_handlers = false,
                                                .coalesce = false,
                                                .warn = [&](const std::string&) { ++warnings; }});
  controller.RequestClock(1410);
  controller.RequestClock(1200);
  controller.WaitIdle();
  fake.set_return("set", 0);
  controller.RequestClock(1605);
  controller.WaitIdle();
  EXPECT_EQ(warnings, 1);
  EXPECT_FALSE(controller.measure_only());
  EXPECT_EQ(controller.stats().failures, 2);
  EXPECT_EQ(controller.stats().applied_mhz, 1605);
}

TEST_F(RuntimeTest, EnergyWindowsReturnTheCounterDifference) {
  auto nvml = OpenNvml();
  FakeNvml fake;
  fake.set_energy_mj(0, 5'000);
  fake.set_energy_mj(1, 7'000);
  EnergyMonitor monitor(nvml);
  EXPECT_THAT(monitor.gpus(), ElementsAre(0, 1));
  EXPECT_TRUE(monitor.uses_energy_counter(0));
  monitor.BeginWindow("step");
  fake.set_energy_mj(0, 8'500);
  fake.set_energy_mj(1, 7'250);
  monitor.BeginWindow("forward");  // nested
  fake.set_energy_mj(0, 9'000);
  fake.set_energy_mj(1, 10'000);
  const EnergyMeasurement forward = monitor.EndWindow("forward");
  EXPECT_THAT(forward.gpu_energy_j, ElementsAre(0.5, 2.75));
  EXPECT_DOUBLE_EQ(forward.total_energy_j, 3.25);
  const EnergyMeasurement step = monitor.EndWindow("step");
  EXPECT_THAT(step.gpu_energy_j, ElementsAre(4.0, 3.0));
  EXPECT_DOUBLE_EQ(step.total_energy_j, 7.0);
  EXPECT_FALSE(step.power_integrated);
  EXPECT_GE(step.time_s, forward.time_s);
  EXPECT_GE(forward.time_s, 0.0);

  EnergyMonitor one(nvml, {.gpus = {1}});
  one.BeginWindow("w");
  EXPECT_THROW(one.BeginWindow("w"), InputError);
  fake.set_energy_mj(1, 10'125);
  EXPECT_THAT(one.EndWindow("w").gpu_energy_j, ElementsAre(0.125));
  EXPECT_THROW(one.EndWindow("w"), InputError);
  one.BeginWindow("cancelled");
  one.CancelWindow("cancelled");
  EXPECT_TRUE(one.open_windows().empty());
}

TEST_F(RuntimeTest, EnergyFallsBackToPowerIntegrationWithoutCounter) {
  setenv("FAKE_NVML_ENERGY_RETURN", "3", 1);  // NVML_ERROR_NOT_SUPPORTED (pre-Volta)
  setenv("FAKE_NVML_POWER_MW", "200000", 1);
  auto nvml = OpenNvml();
  EnergyMonitor monitor(nvml, {.gpus = {0}, .power_poll_period_s = 0.002});
  EXPECT_FALSE(monitor.uses_energy_counter(0));
  monitor.BeginWindow("w");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const EnergyMeasurement measurement = monitor.EndWindow("w");
  EXPECT_TRUE(measurement.power_integrated);
  ASSERT_GT(measurement.time_s, 0.0);
  // Constant 200 W: the integral is exactly power x window time, whatever the sampling.
  EXPECT_NEAR(measurement.total_energy_j / measurement.time_s, 200.0, 1e-6);
}

TEST_F(RuntimeTest, OrderMismatchNamesStepInstructionAndExpectation) {
  const plan::Plan plan = MakeTestPlan(kStages, kMicrobatches);
  auto nvml = OpenNvml();
  device::FrequencyController controller(nvml, {.gpu = 0, .install_signal_handlers = false});
  // The plan is for stage 0 (one warm-up forward) but the loop runs the last stage's order.
  PlanExecutor executor(plan, {.stage = 0}, &controller);
  RunStep(executor, 0);
  executor.OnStepBegin();
  executor.OnInstructionBegin("forward");
  executor.OnInstructionEnd("forward");
  try {
    executor.OnInstructionBegin("backward");
    FAIL() << "expected a mismatch";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("stage 0 at step 1, instruction 1"));
    EXPECT_THAT(e.what(), HasSubstr("began backward"));
    EXPECT_THAT(e.what(), HasSubstr("expects forward (microbatch 1)"));
  }
  controller.WaitIdle();
  EXPECT_EQ(controller.stats().applied_mhz, 0) << "a mismatched plan must not keep clocks";
  EXPECT_FALSE(executor.in_step());
  EXPECT_EQ(executor.step(), 2);
  RunStep(executor, 0);  // the next step starts clean

  // A step that ends early names what was still expected.
  executor.OnInstructionBegin("forward");
  executor.OnInstructionEnd("forward");
  try {
    executor.OnStepEnd();
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("after 1 of 16 instructions"));
    EXPECT_THAT(e.what(), HasSubstr("expects forward (microbatch 1) next"));
  }
  // More instructions than the plan has (a plan for fewer microbatches).
  PlanExecutor small(MakeTestPlan(kStages, 2), {.stage = 1});
  EXPECT_NO_THROW(RunStep(small, 1, kStages, 2));
  small.OnStepBegin();
  for (int i = 0; i < 2; ++i) {
    small.OnInstructionBegin("forward");
    small.OnInstructionEnd("forward");
    small.OnInstructionBegin("backward");
    small.OnInstructionEnd("backward");
  }
  EXPECT_THROW(small.OnInstructionBegin("forward"), InputError);
  // Hook misuse.
  EXPECT_THROW(small.OnInstructionEnd("forward"), InputError);
  small.OnInstructionBegin("forward");
  EXPECT_THROW(small.OnInstructionEnd("backward"), InputError);
  EXPECT_THROW(small.OnInstructionBegin("recompute"), InputError);
}

TEST_F(RuntimeTest, KnobsOfTheCurrentInstruction) {
  const plan::Plan plan = MakeTestPlan(kStages, kMicrobatches);
  PlanExecutor executor(plan, {.stage = 1});
  EXPECT_FALSE(executor.Knobs("fwd_attn").has_value());
  EXPECT_THROW(executor.current_instruction(), Error);
  executor.OnInstructionBegin("forward");  // opens the step implicitly (Zeus users)
  EXPECT_TRUE(executor.in_step());
  const auto attn = executor.Knobs("fwd_attn");
  ASSERT_TRUE(attn.has_value());
  EXPECT_EQ(attn->sms, 9);
  EXPECT_EQ(attn->slot, "rope_0");
  EXPECT_FALSE(executor.Knobs("bwd_mlp").has_value());
  EXPECT_EQ(executor.current_instruction().mode, schedule::ExecutionMode::kNanobatched);
  executor.OnInstructionEnd("forward");
  executor.OnInstructionBegin("backward");
  EXPECT_FALSE(executor.Knobs("fwd_attn").has_value());  // sequential backward: defaults
  EXPECT_EQ(executor.instruction_index(), 1);
}

TEST_F(RuntimeTest, BadPlanFilesAreRejectedAndClocksStayDefault) {
  const std::string good = DumpJson(plan::ToJson(MakeTestPlan(kStages, kMicrobatches)));
  Json wrong_version = plan::ToJson(MakeTestPlan(kStages, kMicrobatches));
  wrong_version["format"] = "kareus.plan/7";
  WriteFileAtomic(dir_ / "garbage.json", "PK\x03\x04 this is a zip file");
  WriteFileAtomic(dir_ / "truncated.json", good.substr(0, good.size() * 2 / 3));
  WriteFileAtomic(dir_ / "version.json", DumpJson(wrong_version));
  Json off_grid = plan::ToJson(MakeTestPlan(kStages, kMicrobatches));
  off_grid["stages"][0]["instructions"][3]["freq_mhz"] = 2500;
  WriteFileAtomic(dir_ / "too_fast.json", DumpJson(off_grid));
  {
    auto nvml = OpenNvml();
    device::FrequencyController controller(nvml, {.gpu = 0, .install_signal_handlers = false});
    for (const char* name :
         {"garbage.json", "truncated.json", "version.json", "too_fast.json", "absent.json"}) {
      try {
        PlanExecutor executor(dir_ / name, {.stage = 0}, &controller);
        ADD_FAILURE() << name << " accepted";
      } catch (const InputError& e) {
        EXPECT_THAT(e.what(), HasSubstr(name));
        if (std::string(name) == "version.json") {
          EXPECT_THAT(e.what(), HasSubstr("unsupported version 7"));
        }
        if (std::string(name) == "too_fast.json") {
          EXPECT_THAT(e.what(), HasSubstr("stages[0].instructions[3].freq_mhz = 2500"));
        }
      }
    }
    EXPECT_THROW(PlanExecutor(MakeTestPlan(kStages, kMicrobatches), {.stage = 2}, &controller),
                 InputError);
  }
  EXPECT_TRUE(ClockCalls(log_, 0).empty()) << "no set (and so no reset) may happen";
}

TEST(ChooseFrontierPoint, LowestEnergyWithinTargetElseFastestOrCheapest) {
  plan::FrontierFile frontier{.method = "kareus", .workload = Json::object(), .points = {}};
  frontier.points = {{.time_s = 1.0,
                      .energy_j = 100,
                      .static_energy_j = 0,
                      .plan_index = 0,
                      .plan_path = "plans/a.json"},
                     {.time_s = 1.1,
                      .energy_j = 90,
                      .static_energy_j = 0,
                      .plan_index = 1,
                      .plan_path = "plans/b.json"},
                     {.time_s = 1.2,
                      .energy_j = 95,
                      .static_energy_j = 0,
                      .plan_index = -1,
                      .plan_path = ""},  // no plan file: never chosen
                     {.time_s = 1.3,
                      .energy_j = 80,
                      .static_energy_j = 0,
                      .plan_index = 2,
                      .plan_path = "plans/c.json"},
                     {.time_s = 1.5,
                      .energy_j = 85,
                      .static_energy_j = 0,
                      .plan_index = 3,
                      .plan_path = "plans/d.json"}};
  EXPECT_EQ(ChooseFrontierPoint(frontier, 1.05, "f").point_index, 0);
  EXPECT_EQ(ChooseFrontierPoint(frontier, 1.25, "f").point_index, 1);
  const FrontierChoice at = ChooseFrontierPoint(frontier, 1.3, "f");
  EXPECT_EQ(at.point_index, 3);
  EXPECT_EQ(at.plan_path, std::filesystem::path("f/plans/c.json"));
  EXPECT_EQ(ChooseFrontierPoint(frontier, 9.0, "f").point_index, 3);  // cheapest overall
  const FrontierChoice too_fast = ChooseFrontierPoint(frontier, 0.5, "f");
  EXPECT_EQ(too_fast.point_index, 0);
  EXPECT_FALSE(too_fast.meets_target);
  // Invariant: the choice never exceeds the target when some point meets it, and no point
  // within the target is cheaper.
  for (double target = 0.9; target < 1.6; target += 0.01) {
    const FrontierChoice choice = ChooseFrontierPoint(frontier, target, "f");
    if (!choice.meets_target) continue;
    EXPECT_LE(choice.point.time_s, target);
    for (const auto& point : frontier.points) {
      if (!plan::FrontierPlanPath(point).empty() && point.time_s <= target) {
        EXPECT_GE(point.energy_j, choice.point.energy_j);
      }
    }
  }
  frontier.points = {frontier.points[2]};
  EXPECT_THROW(ChooseFrontierPoint(frontier, 1.0, "f"), InputError);
}

TEST_F(RuntimeTest, StragglerSwapTakesEffectAtTheStepBoundary) {
  // Frontier folder: three plans whose clocks differ by a fixed offset.
  const std::filesystem::path folder = dir_ / "frontier";
  plan::FrontierFile frontier{.method = "kareus", .workload = Json::object(), .points = {}};
  const int offsets[] = {0, 300, 600};
  for (int i = 0; i < 3; ++i) {
    const std::string relative = "plans/plan_" + std::to_string(i) + ".json";
    plan::WritePlanFile(folder / relative, MakeTestPlan(kStages, kMicrobatches, offsets[i]));
    frontier.points.push_back({.time_s = 1.0 + 0.2 * i,
                               .energy_j = 100.0 - 10.0 * i,
                               .static_energy_j = 0.0,
                               .plan_index = i,
                               .plan_path = relative});
  }
  plan::WriteFrontierFile(folder / "frontier.json", frontier);

  auto nvml = OpenNvml();
  device::FrequencyController controller(
      nvml, {.gpu = 0, .install_signal_handlers = false, .coalesce = false});
  PlanExecutor executor(folder / frontier.points[0].plan_path, {.stage = 0}, &controller);
  executor.OnStepBegin();
  executor.OnInstructionBegin("forward");
  executor.OnInstructionEnd("forward");
  const FrontierChoice choice = executor.SwapToFrontier(folder, 1.25);
  EXPECT_EQ(choice.point_index, 1);
  EXPECT_TRUE(executor.swap_pending());
  // The rest of this step still runs the old plan.
  const auto order = schedule::StageOrder(schedule::ScheduleKind::k1F1B, kStages, 0, kMicrobatches);
  for (size_t i = 1; i < order.size(); ++i) {
    executor.OnInstructionBegin(schedule::ToString(order[i].kind));
    EXPECT_EQ(executor.current_instruction().freq_mhz,
              testing::TestClockMhz(0, static_cast<int>(i)));
    executor.OnInstructionEnd(schedule::ToString(order[i].kind));
  }
  executor.OnStepEnd();
  EXPECT_FALSE(executor.swap_pending());
  executor.OnStepBegin();
  executor.OnInstructionBegin("forward");
  EXPECT_EQ(executor.current_instruction().freq_mhz, testing::TestClockMhz(0, 0) - 300);

  // A plan for another job is refused when asked, not at the boundary.
  EXPECT_THROW(executor.SwapPlan(MakeTestPlan(kStages, 4)), InputError);
  EXPECT_THROW(executor.SwapPlan(MakeTestPlan(3, kMicrobatches)), InputError);
}

// `kareus run` names kept plans by plan_index ("plans/plan_%05d.json") without plan_path.
TEST_F(RuntimeTest, StragglerSwapFindsPlansByIndexAsKareusRunWritesThem) {
  const std::filesystem::path folder = dir_ / "run";
  plan::FrontierFile frontier{.method = "kareus", .workload = Json::object(), .points = {}};
  plan::WritePlanFile(folder / "plans/plan_00007.json", MakeTestPlan(kStages, kMicrobatches, 0));
  plan::WritePlanFile(folder / "plans/plan_00003.json", MakeTestPlan(kStages, kMicrobatches, 150));
  frontier.points = {
      {.time_s = 1.0, .energy_j = 100, .static_energy_j = 0, .plan_index = 7, .plan_path = ""},
      {.time_s = 1.1, .energy_j = 95, .static_energy_j = 0, .plan_index = -1, .plan_path = ""},
      {.time_s = 1.2, .energy_j = 90, .static_energy_j = 0, .plan_index = 3, .plan_path = ""}};
  plan::WriteFrontierFile(folder / "frontier.json", frontier);
  PlanExecutor executor(folder / "plans/plan_00007.json", {.stage = 1});
  const FrontierChoice choice = executor.SwapToFrontier(folder, 1.5);
  EXPECT_EQ(choice.point_index, 2);
  EXPECT_EQ(choice.plan_path, folder / "plans/plan_00003.json");
  executor.OnInstructionBegin("forward");
  EXPECT_EQ(executor.current_instruction().freq_mhz, testing::TestClockMhz(1, 0) - 150);
}

TEST(RuntimeOptions, ValidateNamesTheField) {
  EXPECT_FALSE(device::FrequencyControllerOptions{}.Validate());
  EXPECT_FALSE(PlanExecutorOptions{}.Validate());
  EXPECT_FALSE(EnergyMonitorOptions{}.Validate());
  EXPECT_EQ(device::FrequencyControllerOptions{.gpu = -1}.Validate()->field, "gpu");
  EXPECT_EQ(PlanExecutorOptions{.stage = -2}.Validate()->field, "stage");
  const EnergyMonitorOptions twice{.gpus = {0, 0}};
  EXPECT_EQ(twice.Validate()->rule, "each GPU may be listed once");
  const EnergyMonitorOptions never{.gpus = {}, .power_poll_period_s = 0.0};
  EXPECT_EQ(never.Validate()->field, "power_poll_period_s");
}

TEST(NvmlIndexForCudaDevice, FollowsCudaVisibleDevices) {
  unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(device::NvmlIndexForCudaDevice(3), 3);
  setenv("CUDA_VISIBLE_DEVICES", "4, 6,7", 1);
  EXPECT_EQ(device::NvmlIndexForCudaDevice(0), 4);
  EXPECT_EQ(device::NvmlIndexForCudaDevice(1), 6);
  EXPECT_THROW(device::NvmlIndexForCudaDevice(3), EnvironmentError);
  setenv("CUDA_VISIBLE_DEVICES", "GPU-8a1b2c3d", 1);
  EXPECT_THROW(device::NvmlIndexForCudaDevice(0), EnvironmentError);
  unsetenv("CUDA_VISIBLE_DEVICES");
}

}  // namespace
}  // namespace kareus::runtime
