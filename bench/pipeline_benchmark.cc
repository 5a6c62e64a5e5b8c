// SPDX-License-Identifier: Apache-2.0
// Full iteration frontier (pipeline::Solve) on Perseus-sized problems: 20 clock options per
// instruction (1410 -> 840 MHz, step 30), time ~ 1/f^0.9, power = static + dynamic * (f/f_max)^2.5,
// stages slightly imbalanced, 1 ms quanta, 85 W static power (A100).
//
// Each case also runs the solver as it was before issue 17's speed work
// (pipeline_reference_solver.cc, pipeline_reference::Solve) on the same problem in the same
// process, and reports both medians (wall and this thread's CPU time) and their ratio:
// `speedup_cpu` = reference CPU time / current CPU time; `worst_energy_vs_ref_pct` and
// `median_energy_vs_ref_pct` compare the two frontiers at 400 deadlines (CompareFrontiers;
// positive: the current solver's plan costs more). The peak resident memory is read right
// after the current solver's runs (before the reference runs; cases run smallest first).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>

#include "kareus/pipeline/solver.h"
#include "pipeline_reference_solver.h"

namespace kareus::pipeline {
namespace {

// The problem in the frozen reference's own types (pipeline_reference_solver.h).
pipeline_reference::Problem ToReference(const Problem& problem) {
  const auto lists = [](const std::vector<std::vector<Alternative>>& from) {
    std::vector<std::vector<pipeline_reference::Option>> to;
    for (const auto& list : from) {
      auto& copy = to.emplace_back();
      for (const Alternative& o : list)
        copy.push_back({.time_s = o.time_s, .energy_j = o.energy_j});
    }
    return to;
  };
  return {.schedule = problem.schedule,
          .num_stages = problem.num_stages,
          .num_microbatches = problem.num_microbatches,
          .num_chunks = problem.num_chunks,
          .forward_options = lists(problem.forward_options),
          .backward_options = lists(problem.backward_options),
          .gradient_sync = problem.gradient_sync,
          .last_backward_options = lists(problem.last_backward_options),
          .gradient_sync_options = lists(problem.gradient_sync_options),
          .gpus_per_stage = problem.gpus_per_stage,
          .p2p_time_s = problem.p2p_time_s};
}

std::vector<Alternative> ClockOptions(double t_max_clock_s, double dynamic_w) {
  std::vector<Alternative> options;
  for (int f = 1410; f >= 840; f -= 30) {
    const double r = f / 1410.0;
    const double time_s = t_max_clock_s / std::pow(r, 0.9);
    options.push_back(
        {.time_s = time_s, .energy_j = (85.0 + dynamic_w * std::pow(r, 2.5)) * time_s});
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

// A problem written as JSON (bench/data/README.md): the solver's input of a `kareus run`.
Problem ReadProblem(const std::string& name) {
  const std::string path = std::string(KAREUS_BENCH_SOURCE_DIR) + "/bench/data/" + name;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  const nlohmann::json j = nlohmann::json::parse(in);
  const auto lists = [&](const char* key) {
    std::vector<std::vector<Alternative>> out;
    for (const auto& list : j.at(key)) {
      auto& options = out.emplace_back();
      for (const auto& o : list)
        options.push_back({.time_s = o.at(0).get<double>(), .energy_j = o.at(1).get<double>()});
    }
    return out;
  };
  return {.schedule = schedule::ScheduleKindFromString(j.at("schedule").get<std::string>()),
          .num_stages = j.at("num_stages").get<int>(),
          .num_microbatches = j.at("num_microbatches").get<int>(),
          .num_chunks = j.at("num_chunks").get<int>(),
          .forward_options = lists("forward_options"),
          .backward_options = lists("backward_options"),
          .gradient_sync = static_cast<schedule::GradientSync>(j.at("gradient_sync").get<int>()),
          .last_backward_options = lists("last_backward_options"),
          .gradient_sync_options = lists("gradient_sync_options"),
          .gpus_per_stage = j.at("gpus_per_stage").get<std::vector<int>>(),
          .p2p_time_s = j.at("p2p_time_s").get<double>()};
}

// Interleaved 1F1B with `chunks` model chunks per stage, each a 1/chunks share of the stage.
Problem MakeInterleavedProblem(int stages, int microbatches, int chunks, double forward_s) {
  Problem problem{.schedule = schedule::ScheduleKind::kInterleaved1F1B,
                  .num_stages = stages,
                  .num_microbatches = microbatches,
                  .num_chunks = chunks};
  for (int s = 0; s < stages; ++s) {
    for (int c = 0; c < chunks; ++c) {
      const double imbalance = 1.0 + 0.08 * std::sin(1.7 * (s * chunks + c) + 0.3);
      problem.forward_options.push_back(ClockOptions(forward_s * imbalance / chunks, 260.0));
      problem.backward_options.push_back(ClockOptions(2.2 * forward_s * imbalance / chunks, 280.0));
    }
    problem.gpus_per_stage.push_back(8);
  }
  return problem;
}

double ThreadCpuS() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times `solve` `runs` times: medians of wall and CPU seconds; the last result in `*out`.
template <typename F, typename R>
void TimeRuns(F solve, int runs, double* wall_s, double* cpu_s, R* out) {
  std::vector<double> wall;
  std::vector<double> cpu;
  for (int i = 0; i < runs; ++i) {
    const auto w0 = std::chrono::steady_clock::now();
    const double c0 = ThreadCpuS();
    *out = solve();
    cpu.push_back(ThreadCpuS() - c0);
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
  }
  *wall_s = Median(wall);
  *cpu_s = Median(cpu);
}

// Both frontiers as staircases (the least energy of a plan no slower than t), compared at 400
// deadlines evenly spread from the later of the two fastest times to the reference's slowest:
// current / reference - 1 in %, the worst (largest) and the median.
template <typename Points, typename ReferencePoints>
void CompareFrontiers(const Points& current, const ReferencePoints& reference, double* worst_pct,
                      double* median_pct) {
  std::vector<std::pair<double, double>> a;
  std::vector<std::pair<double, double>> b;
  for (const auto& p : current) a.emplace_back(p.cost.time_s, p.cost.energy_j);
  for (const auto& p : reference) b.emplace_back(p.cost.time_s, p.cost.energy_j);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  // Least energy at time <= t: a running minimum over the points sorted by time.
  const auto at = [](const std::vector<std::pair<double, double>>& front, double t) {
    double best = std::numeric_limits<double>::infinity();
    for (const auto& [time, energy] : front) {
      if (time > t) break;
      best = std::min(best, energy);
    }
    return best;
  };
  const double from = std::max(a.front().first, b.front().first);
  const double to = b.back().first;
  std::vector<double> ratios;
  for (int k = 0; k < 400; ++k) {
    const double t = from + (to - from) * k / 399.0;
    ratios.push_back(100.0 * (at(a, t) / at(b, t) - 1.0));
  }
  *worst_pct = *std::max_element(ratios.begin(), ratios.end());
  *median_pct = Median(ratios);
}

// `reference_runs` 0: no reference (the frozen solver takes too long on the case).
void Run(benchmark::State& state, const Problem& problem, int reference_runs) {
  const Options options{.unit_time_s = 1e-3, .p_static_w = 85.0};
  Result result;
  std::vector<double> cpu;
  for (auto _ : state) {
    const double c0 = ThreadCpuS();
    result = Solve(problem, options);
    cpu.push_back(ThreadCpuS() - c0);
    benchmark::DoNotOptimize(result.points.data());
  }
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  state.counters["peak_rss_mib"] = static_cast<double>(usage.ru_maxrss) / 1024.0;
  state.counters["plans_mib"] =
      static_cast<double>(result.points.size() * result.dag.nodes.size() * sizeof(int)) /
      (1024.0 * 1024.0);
  state.counters["cuts"] = static_cast<double>(result.summary.steps);
  state.counters["full_passes"] = static_cast<double>(result.summary.full_passes);
  state.counters["deadlines"] = static_cast<double>(result.summary.deadlines);
  state.counters["points"] = static_cast<double>(result.points.size());
  state.counters["critical_edges_max"] = static_cast<double>(result.summary.critical_edges_max);
  const double cpu_s = Median(cpu);
  state.counters["cpu_ms"] = 1e3 * cpu_s;
  // Where the time went (one run's split, wall).
  state.counters["descent_ms"] = 1e3 * result.summary.descent_wall_s;
  state.counters["realize_ms"] = 1e3 * result.summary.realize_wall_s;
  state.counters["fastest_ms"] = 1e3 * result.summary.fastest_point_wall_s;
  // KAREUS_BENCH_SKIP_REFERENCE=1 skips the frozen reference (profiling the current solver).
  if (reference_runs == 0 || std::getenv("KAREUS_BENCH_SKIP_REFERENCE") != nullptr) return;
  double reference_wall_s = 0.0;
  double reference_cpu_s = 0.0;
  pipeline_reference::Result reference;
  const pipeline_reference::Problem reference_problem = ToReference(problem);
  const pipeline_reference::Options reference_options{.unit_time_s = options.unit_time_s,
                                                      .p_static_w = options.p_static_w};
  TimeRuns([&] { return pipeline_reference::Solve(reference_problem, reference_options); },
           reference_runs, &reference_wall_s, &reference_cpu_s, &reference);
  state.counters["ref_cpu_ms"] = 1e3 * reference_cpu_s;
  state.counters["ref_points"] = static_cast<double>(reference.points.size());
  state.counters["speedup_cpu"] = reference_cpu_s / cpu_s;
  // The fastest plans' energies (current / reference - 1, in %): the speed-up's price, if any.
  if (!result.points.empty() && !reference.points.empty()) {
    state.counters["fastest_energy_vs_ref_pct"] =
        100.0 * (result.points.back().cost.energy_j / reference.points.back().cost.energy_j - 1.0);
    double worst = 0.0;
    double median = 0.0;
    CompareFrontiers(result.points, reference.points, &worst, &median);
    state.counters["worst_energy_vs_ref_pct"] = worst;
    state.counters["median_energy_vs_ref_pct"] = median;
  }
}

// The published evaluation's shape (PP=2, 8 microbatches, ~0.15 s forwards).
void BM_Frontier2Stages8Microbatches(benchmark::State& state) {
  Run(state, MakeProblem(2, 8, 0.15), 15);
}
BENCHMARK(BM_Frontier2Stages8Microbatches)->Unit(benchmark::kMillisecond)->Iterations(15);

void BM_Frontier4Stages16Microbatches(benchmark::State& state) {
  Run(state, MakeProblem(4, 16, 0.07), 7);
}
BENCHMARK(BM_Frontier4Stages16Microbatches)->Unit(benchmark::kMillisecond)->Iterations(7);

void BM_Frontier8Stages64Microbatches(benchmark::State& state) {
  Run(state, MakeProblem(8, 64, 0.04), 3);
}
BENCHMARK(BM_Frontier8Stages64Microbatches)->Unit(benchmark::kMillisecond)->Iterations(3);

// The 70B workload's scale (PP 16, 128 microbatches).
void BM_Frontier16Stages128Microbatches(benchmark::State& state) {
  Run(state, MakeProblem(16, 128, 0.02), 1);
}
BENCHMARK(BM_Frontier16Stages128Microbatches)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_Frontier8Stages256Microbatches(benchmark::State& state) {
  Run(state, MakeProblem(8, 256, 0.04), 1);
}
BENCHMARK(BM_Frontier8Stages256Microbatches)->Unit(benchmark::kMillisecond)->Iterations(1);

// Interleaved 1F1B, 2 model chunks per stage (8,192 instructions).
void BM_FrontierInterleaved16Stages128Microbatches(benchmark::State& state) {
  Run(state, MakeInterleavedProblem(16, 128, 2, 0.02), 1);
}
BENCHMARK(BM_FrontierInterleaved16Stages128Microbatches)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

// The solver's input of `kareus run examples/llama3.3-70b-at-scale.yaml` (interleaved PP 8 x 2,
// 64 microbatches, overlapped gradient sync; bench/data/README.md): Kareus's options per
// instruction (31 forward, 84 backward) against Perseus's (18 clocks) on the same DAG, solved
// in the same run; `kareus_over_perseus_cpu` is the ratio of their CPU times.
void BM_AtScaleKareusVsPerseus(benchmark::State& state) {
  const Problem kareus = ReadProblem("llama3.3-70b-at-scale.kareus.json");
  const Problem perseus = ReadProblem("llama3.3-70b-at-scale.perseus.json");
  Run(state, kareus, 0);
  const Options options{.unit_time_s = 1e-3, .p_static_w = 85.0};
  double wall_s = 0.0;
  double cpu_s = 0.0;
  Result result;
  TimeRuns([&] { return Solve(perseus, options); }, 1, &wall_s, &cpu_s, &result);
  state.counters["perseus_cpu_ms"] = 1e3 * cpu_s;
  state.counters["perseus_points"] = static_cast<double>(result.points.size());
  state.counters["kareus_over_perseus_cpu"] = state.counters["cpu_ms"] / (1e3 * cpu_s);
}
BENCHMARK(BM_AtScaleKareusVsPerseus)->Unit(benchmark::kMillisecond)->Iterations(1);

// Issue 33's pathology: an input fuzzer's 2-stage profile (tests/pipeline/data, from
// ../shared/cases/) solved with 1 ms deadlines for 1 to 256 microbatches. A smooth cost follows
// the work: `us_per_deadline_node` (CPU per realized deadline and DAG node) should stay flat.
// 1 and 2 microbatches are small problems (at most 160 node-options): their exact search covers
// the whole frontier (`exact_frontier`, `exact_search_work`).
void BM_DegenerateProfile(benchmark::State& state) {
  const auto microbatches = static_cast<int>(state.range(0));
  const std::string path =
      std::string(KAREUS_BENCH_SOURCE_DIR) + "/tests/pipeline/data/solver-degenerate-profile.csv";
  std::ifstream csv(path);
  if (!csv) throw std::runtime_error("cannot read " + path);
  Problem problem{.num_stages = 2, .num_microbatches = microbatches};
  problem.forward_options.resize(2);
  problem.backward_options.resize(2);
  std::string line;
  std::getline(csv, line);  // header: stage,instruction,frequency,time,energy
  while (std::getline(csv, line)) {
    std::istringstream row(line);
    std::string stage, kind, frequency, time, energy;
    std::getline(row, stage, ',');
    std::getline(row, kind, ',');
    std::getline(row, frequency, ',');
    std::getline(row, time, ',');
    std::getline(row, energy, ',');
    auto& lists = kind == "forward" ? problem.forward_options : problem.backward_options;
    lists[static_cast<std::size_t>(std::stoi(stage))].push_back(
        {.time_s = std::stod(time), .energy_j = std::stod(energy)});
  }
  Run(state, problem, 0);
  const Result result = Solve(problem, {.unit_time_s = 1e-3, .p_static_w = 85.0});
  state.counters["us_per_deadline_node"] = 1e3 * state.counters["cpu_ms"] /
                                           (static_cast<double>(result.summary.deadlines) *
                                            static_cast<double>(result.dag.nodes.size()));
  state.counters["exact_search_work"] = static_cast<double>(result.summary.exact_search_work);
  state.counters["exact_frontier"] = result.summary.exact_frontier ? 1.0 : 0.0;
}
BENCHMARK(BM_DegenerateProfile)
    ->Arg(1)
    ->Arg(2)
    ->Arg(3)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Arg(32)
    ->Arg(64)
    ->Arg(256)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
}  // namespace kareus::pipeline
