// SPDX-License-Identifier: Apache-2.0
#include <random>

#include <benchmark/benchmark.h>

#include "kareus/pareto/pareto.h"

namespace kareus::pareto {
namespace {

// n mutually non-dominated points on a convex-ish curve with jitter (a partition frontier).
std::vector<Point> RandomFront(std::size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<Point> points;
  for (std::size_t i = 0; i < n; ++i) {
    const double t = u(rng);
    points.push_back({t, 1.0 / (0.05 + t)});
  }
  return Filter(points);
}

void BM_Filter(benchmark::State& state) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<Point> points(static_cast<std::size_t>(state.range(0)));
  for (Point& p : points) p = {u(rng), u(rng)};
  for (auto _ : state) benchmark::DoNotOptimize(Filter(points));
}
BENCHMARK(BM_Filter)->Arg(1000)->Arg(100000);

void BM_MinPlusSum(benchmark::State& state) {
  const auto a = RandomFront(static_cast<std::size_t>(state.range(0)), 2);
  const auto b = RandomFront(static_cast<std::size_t>(state.range(0)), 3);
  for (auto _ : state) benchmark::DoNotOptimize(MinPlusSum(a, b));
  state.counters["front"] = static_cast<double>(a.size());
}
BENCHMARK(BM_MinPlusSum)->Arg(30)->Arg(300);

void BM_Hypervolume(benchmark::State& state) {
  const auto front = RandomFront(static_cast<std::size_t>(state.range(0)), 4);
  const Point reference{2.0, 100.0};
  for (auto _ : state) benchmark::DoNotOptimize(Hypervolume(front, reference));
}
BENCHMARK(BM_Hypervolume)->Arg(1000);

}  // namespace
}  // namespace kareus::pareto
