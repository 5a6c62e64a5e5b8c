// SPDX-License-Identifier: Apache-2.0
// kareus schedule's solver (plan/timetable.h) by horizon: hourly intervals x 10 plans, the
// frontier of examples/paper/01 (3.75 to 4.06 s per iteration), a daily carbon-like signal, the
// iterations set so that the deadline leaves 20 % slack. The solver's first step (the least cost
// of finishing in each interval) incrementally, O(K H log(K H)), against its baseline, filling
// every finish interval from scratch, O(K^2 H log(K H)), in the same run.
#include <benchmark/benchmark.h>

#include <cmath>

#include "kareus/plan/timetable.h"

namespace {

kareus::plan::ScheduleProblem Problem(int hours) {
  kareus::plan::ScheduleProblem p;
  p.gpus = 16;
  p.idle_power_w = 1360.0;
  for (int i = 0; i < 10; ++i) {
    const double t = 3.75 + 0.034 * i;
    p.plans.push_back(
        {.name = "plan" + std::to_string(i), .time_s = t, .energy_j = 18578.0 - 310.0 * i});
  }
  for (int k = 0; k < hours; ++k) {
    p.intervals.push_back({.start = 3600.0 * k,
                           .end = 3600.0 * (k + 1),
                           .signal = 300 + 130 * std::sin(k * 2 * M_PI / 24)});
  }
  p.iterations = std::floor(0.8 * 3600.0 * hours / p.plans.back().time_s);
  return p;
}

void BM_SolveSchedule(benchmark::State& state) {
  const kareus::plan::ScheduleProblem problem = Problem(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(kareus::plan::SolveSchedule(problem));
  state.SetLabel(std::to_string(state.range(0)) + " hourly intervals");
}
BENCHMARK(BM_SolveSchedule)->Arg(48)->Arg(168)->Arg(720)->Arg(8760)->Unit(benchmark::kMillisecond);

void BM_FinishCosts(benchmark::State& state) {
  const kareus::plan::ScheduleProblem problem = Problem(static_cast<int>(state.range(0)));
  const bool incremental = state.range(1) != 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(kareus::plan::internal::FinishIntervalCosts(problem, incremental));
  }
  state.SetLabel(incremental ? "incremental" : "from scratch (baseline)");
}
BENCHMARK(BM_FinishCosts)
    ->Args({168, 0})
    ->Args({168, 1})
    ->Args({720, 0})
    ->Args({720, 1})
    ->Unit(benchmark::kMillisecond);

}  // namespace
