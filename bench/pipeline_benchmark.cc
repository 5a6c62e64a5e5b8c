// SPDX-License-Identifier: Apache-2.0
// Full iteration frontier (pipeline::Solve) on Perseus-sized problems: 20 clock options per
// instruction (1410 -> 840 MHz, step 30), time ~ 1/f^0.9, power = static + dynamic * (f/f_max)^2.5,
// stages slightly imbalanced, 1 ms quanta, 85 W static power (A100).
#include <sys/resource.h>

#include <cmath>

#include <benchmark/benchmark.h>

#include "kareus/pipeline/solver.h"

namespace kareus::pipeline {
namespace {

std::vector<Option> ClockOptions(double t_max_clock_s, double dynamic_w) {
  std::vector<Option> options;
  for (int f = 1410; f >= 840; f -= 30) {
    const double r = f / 1410.0;
    const double time_s = t_max_clock_s / std::pow(r, 0.9);
    options.push_back({.time_s = time_s,
                       .energy_j = (85.0 + dynamic_w * std::pow(r, 2.5)) * time_s});
  }
  return options;
}

Problem MakeProblem(int stages, int microbatches, double forward_s) {
  Problem problem{.num_stages = stages, .num_microbatches = microbatches};
  for (int s = 0; s < stages; ++s) {
    const double imbalance = 1.0 + 0.08 * std::sin(1.7 * s + 0.3);
    problem.forward_options.push_back(ClockOptions(forward_s * imbalance, 260.0));
    problem.backward_options.push_back(ClockOptions(2.2 * forward_s * imbalance, 280.0));
    problem.gpus_per_stage.push_back(8);
  }
  return problem;
}

void Run(benchmark::State& state, const Problem& problem) {
  Result result;
  for (auto _ : state) {
    result = Solve(problem, {.unit_time_s = 1e-3, .p_static_w = 85.0});
    benchmark::DoNotOptimize(result.points.data());
  }
  state.counters["cuts"] = static_cast<double>(result.summary.steps);
  state.counters["deadlines"] = static_cast<double>(result.summary.deadlines);
  state.counters["points"] = static_cast<double>(result.points.size());
  state.counters["critical_edges_max"] = static_cast<double>(result.summary.critical_edges_max);
  // The process's peak resident memory so far (cases run smallest first, so the last case's
  // figure is its own peak) and the frontier's plan storage.
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  state.counters["peak_rss_mib"] = static_cast<double>(usage.ru_maxrss) / 1024.0;
  state.counters["plans_mib"] = static_cast<double>(result.points.size() * result.dag.nodes.size() *
                                                    sizeof(int)) / (1024.0 * 1024.0);
}

// The published evaluation's shape (PP=2, 8 microbatches, ~0.15 s forwards).
void BM_Frontier2Stages8Microbatches(benchmark::State& state) {
  Run(state, MakeProblem(2, 8, 0.15));
}
BENCHMARK(BM_Frontier2Stages8Microbatches)->Unit(benchmark::kMillisecond);

void BM_Frontier4Stages16Microbatches(benchmark::State& state) {
  Run(state, MakeProblem(4, 16, 0.07));
}
BENCHMARK(BM_Frontier4Stages16Microbatches)->Unit(benchmark::kMillisecond);

void BM_Frontier8Stages64Microbatches(benchmark::State& state) {
  Run(state, MakeProblem(8, 64, 0.04));
}
BENCHMARK(BM_Frontier8Stages64Microbatches)->Unit(benchmark::kMillisecond)->Iterations(1);

// The 70B workload's scale (PP 16, 128 microbatches).
void BM_Frontier16Stages128Microbatches(benchmark::State& state) {
  Run(state, MakeProblem(16, 128, 0.02));
}
BENCHMARK(BM_Frontier16Stages128Microbatches)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace kareus::pipeline
