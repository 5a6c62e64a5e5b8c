// SPDX-License-Identifier: Apache-2.0
// What the runtime costs the training thread: the instruction hooks (order check + clock
// request), a clock request, an energy window. Against the fake NVML of tests/runtime, so NVML's
// own latency (10-20 ms per set on real GPUs) is not in these numbers: it is on the setter
// thread, which is the point.
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <vector>

#include "kareus/device/frequency_controller.h"
#include "kareus/device/nvml.h"
#include "kareus/plan/plan_file.h"
#include "kareus/runtime/energy_monitor.h"
#include "kareus/runtime/plan_executor.h"

namespace kareus::runtime {
namespace {

std::shared_ptr<device::Nvml> OpenFake() {
  return device::Nvml::Open({.library_path = KAREUS_FAKE_NVML_PATH});
}

plan::Plan BenchPlan(int num_stages, int num_microbatches) {
  static constexpr int kClocks[] = {1980, 1410, 1200, 1605};
  plan::Plan plan{.method = "bench",
                  .workload = Json::object(),
                  .schedule = schedule::ScheduleKind::k1F1B,
                  .num_microbatches = num_microbatches,
                  .iteration = {},
                  .stages = {}};
  for (int s = 0; s < num_stages; ++s) {
    plan::PlannedStage stage{.stage = s, .gpus = 1, .instructions = {}};
    int i = 0;
    for (const auto& slot :
         schedule::StageOrder(schedule::ScheduleKind::k1F1B, num_stages, s, num_microbatches)) {
      stage.instructions.push_back({.kind = slot.kind,
                                    .chunk = 0,
                                    .microbatch = slot.microbatch,
                                    .freq_mhz = kClocks[(i++ / 2) % 4],
                                    .mode = schedule::ExecutionMode::kSequential,
                                    .partitions = {},
                                    .time_s = 0.0,
                                    .energy_j = 0.0});
    }
    plan.stages.push_back(stage);
  }
  return plan;
}

// One pipeline step of stage 0 (4 stages x 16 microbatches = 32 instructions), hooks only.
void BM_StepHooks(benchmark::State& state) {
  auto nvml = OpenFake();
  device::FrequencyController controller(nvml, {.gpu = 0, .install_signal_handlers = false});
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
  state.counters["per_instruction"] =
      benchmark::Counter(static_cast<double>(state.iterations() * order.size()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_StepHooks);

void BM_RequestClockUnchanged(benchmark::State& state) {
  auto nvml = OpenFake();
  device::FrequencyController controller(nvml, {.gpu = 0, .install_signal_handlers = false});
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

// Resident memory of this process, KiB (/proc/self/statm's second field).
double ResidentKib() {
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1024.0;
}

// The soak (issue 31): the instruction hooks called 10^6 times, the clock changing every other
// instruction (four clocks in turn), against the fake NVML. Reports each hook's latency (p50,
// p99, max) and resident memory at the start and the end: the hooks allocate nothing per call
// and nothing grows. One iteration; its time is the soak's, not a figure to compare.
void BM_SoakInstructionHooks(benchmark::State& state) {
  constexpr std::size_t kHookCalls = 1'000'000;
  auto nvml = OpenFake();
  device::FrequencyController controller(nvml, {.gpu = 0, .install_signal_handlers = false});
  PlanExecutor executor(BenchPlan(4, 16), {.stage = 0}, &controller);
  const auto order = schedule::StageOrder(schedule::ScheduleKind::k1F1B, 4, 0, 16);
  std::vector<float> latency_ns(kHookCalls);
  using Clock = std::chrono::steady_clock;
  const auto step = [&](std::size_t* calls, bool record) {
    executor.OnStepBegin();
    for (const auto& slot : order) {
      for (const bool begin : {true, false}) {
        const auto t0 = Clock::now();
        if (begin) {
          executor.OnInstructionBegin(schedule::ToString(slot.kind));
        } else {
          executor.OnInstructionEnd(schedule::ToString(slot.kind));
        }
        const auto t1 = Clock::now();
        if (record && *calls < kHookCalls) {
          latency_ns[*calls] =
              static_cast<float>(std::chrono::duration<double, std::nano>(t1 - t0).count());
        }
        ++*calls;
      }
    }
    executor.OnStepEnd();
  };
  std::size_t warm = 0;
  for (int i = 0; i < 100; ++i) step(&warm, false);  // warm-up: first allocations, threads
  controller.WaitIdle();
  const double rss_start = ResidentKib();
  std::size_t calls = 0;
  double rss_tenth = 0.0;  // after 10^5 calls: what the first steps settled at
  for (auto _ : state) {
    while (calls < kHookCalls) {
      step(&calls, true);
      if (rss_tenth == 0.0 && calls >= kHookCalls / 10) rss_tenth = ResidentKib();
    }
  }
  controller.WaitIdle();
  const double rss_end = ResidentKib();
  std::sort(latency_ns.begin(), latency_ns.end());
  const auto at = [&](double q) {
    return latency_ns[static_cast<std::size_t>(q * (kHookCalls - 1))];
  };
  state.counters["hook_calls"] = static_cast<double>(calls);
  state.counters["p50_ns"] = at(0.50);
  state.counters["p99_ns"] = at(0.99);
  state.counters["max_ns"] = latency_ns.back();
  state.counters["rss_start_kib"] = rss_start;
  state.counters["rss_tenth_kib"] = rss_tenth;
  state.counters["rss_end_kib"] = rss_end;
  std::printf(
      "soak: %zu hook calls, latency p50 %.0f ns, p99 %.0f ns, max %.0f ns; resident "
      "memory %.0f KiB at the start, %.0f KiB after 10^5 calls, %.0f KiB at the end "
      "(%+.0f KiB over the last 9 x 10^5)\n",
      calls, at(0.50), at(0.99), static_cast<double>(latency_ns.back()), rss_start, rss_tenth,
      rss_end, rss_end - rss_tenth);
}
BENCHMARK(BM_SoakInstructionHooks)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kareus::runtime
