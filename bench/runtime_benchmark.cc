// SPDX-License-Identifier: Apache-2.0
// What the runtime costs the training thread: the instruction hooks (order check + clock
// request), a clock request, an energy window. Against the fake NVML of tests/runtime, so NVML's
// own latency (10-20 ms per set on real GPUs) is not in these numbers: it is on the setter
// thread, which is the point.
#include <benchmark/benchmark.h>

#include <memory>

#include "kareus/plan/plan_file.h"
#include "kareus/runtime/energy_monitor.h"
#include "kareus/runtime/frequency_controller.h"
#include "kareus/runtime/nvml.h"
#include "kareus/runtime/plan_executor.h"

namespace kareus::runtime {
namespace {

std::shared_ptr<Nvml> OpenFake() { return Nvml::Open({.library_path = KAREUS_FAKE_NVML_PATH}); }

plan::Plan BenchPlan(int num_stages, int num_microbatches) {
  static constexpr int kClocks[] = {1980, 1410, 1200, 1605};
  plan::Plan plan{.method = "bench", .workload = Json::object(), .schedule = schedule::ScheduleKind::k1F1B,
                  .num_microbatches = num_microbatches, .iteration = {}, .stages = {}};
  for (int s = 0; s < num_stages; ++s) {
    plan::PlannedStage stage{.stage = s, .gpus = 1, .instructions = {}};
    int i = 0;
    for (const auto& slot : schedule::StageOrder(schedule::ScheduleKind::k1F1B, num_stages, s, num_microbatches)) {
      stage.instructions.push_back({.kind = slot.kind, .chunk = 0, .microbatch = slot.microbatch,
                                    .freq_mhz = kClocks[(i++ / 2) % 4],
                                    .mode = schedule::ExecutionMode::kSequential, .partitions = {},
                                    .time_s = 0.0, .energy_j = 0.0});
    }
    plan.stages.push_back(stage);
  }
  return plan;
}

// One pipeline step of stage 0 (4 stages x 16 microbatches = 32 instructions), hooks only.
void BM_StepHooks(benchmark::State& state) {
  auto nvml = OpenFake();
  FrequencyController controller(nvml, {.gpu = 0, .install_signal_handlers = false});
  PlanExecutor executor(BenchPlan(4, 16), {.stage = 0}, &controller);
  const auto order = schedule::StageOrder(schedule::ScheduleKind::k1F1B, 4, 0, 16);
  for (auto _ : state) {
    executor.OnStepBegin();
    for (const auto& slot : order) {
      executor.OnInstructionBegin(schedule::ToString(slot.kind));
      executor.OnInstructionEnd(schedule::ToString(slot.kind));
    }
    executor.OnStepEnd();
  }
  controller.WaitIdle();
  state.counters["per_instruction"] = benchmark::Counter(
      static_cast<double>(state.iterations() * order.size()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_StepHooks);

void BM_RequestClockUnchanged(benchmark::State& state) {
  auto nvml = OpenFake();
  FrequencyController controller(nvml, {.gpu = 0, .install_signal_handlers = false});
  controller.RequestClock(1410);
  for (auto _ : state) controller.RequestClock(1410);
}
BENCHMARK(BM_RequestClockUnchanged);

void BM_EnergyWindow(benchmark::State& state) {
  auto nvml = OpenFake();
  EnergyMonitor monitor(nvml, {.gpus = {0, 1}});
  for (auto _ : state) {
    monitor.BeginWindow("w");
    benchmark::DoNotOptimize(monitor.EndWindow("w"));
  }
}
BENCHMARK(BM_EnergyWindow);

}  // namespace
}  // namespace kareus::runtime
