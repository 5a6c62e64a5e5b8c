// SPDX-License-Identifier: Apache-2.0
// Cost of one optimizer step on a paper workload's largest space: surrogate fit and prediction
// over the space, and batch selection. Baseline (Release, 2-core CI box) in
// docs/arch-profiler.md.
#include <benchmark/benchmark.h>

#include <filesystem>

#include "kareus/measure/emulator_backend.h"
#include "kareus/mobo/acquisition.h"
#include "kareus/mobo/search_space.h"
#include "kareus/mobo/surrogate.h"
#include "kareus/workload/ops.h"

namespace {

using namespace kareus;

struct Fixture {
  workload::WorkloadModel model;
  const workload::PartitionType* type = nullptr;
  mobo::SearchSpace space{{1410}, {3}, {"norm_0"}};
  std::vector<std::vector<double>> all_x;
  std::vector<measure::Sample> truth;
};

const Fixture& Data() {
  static const Fixture fixture = [] {
    Fixture f;
    f.model = workload::BuildWorkloadModel(
        workload::LoadWorkloadFile(std::filesystem::path(KAREUS_BENCH_SOURCE_DIR) /
                                   "examples/paper/02-llama3.2-3b-cp2-tp4-mbs8-seq4096.yaml"));
    f.type = &f.model.Type("fwd_qkv_ag");  // 1,080 configurations, the largest published space
    f.space = mobo::SearchSpace::For(f.model.workload.gpu, *f.type, false);
    measure::EmulatorBackendOptions options;
    options.measurement.noise_free = true;
    auto oracle = measure::MakeEmulatorBackend(f.model.workload.gpu, options);
    std::vector<measure::PartitionKnobs> knobs;
    for (int64_t i = 0; i < f.space.Size(); ++i) {
      knobs.push_back(f.space.At(i));
      f.all_x.push_back(f.space.Encode(i));
    }
    f.truth = oracle->MeasureAll(*f.type, knobs);
    return f;
  }();
  return fixture;
}

void Fit(benchmark::State& state, mobo::SurrogateKind kind) {
  const Fixture& f = Data();
  const int n = static_cast<int>(state.range(0));
  std::vector<std::vector<double>> x;
  std::vector<double> t, e;
  for (int i = 0; i < n; ++i) {
    const int64_t index = (static_cast<int64_t>(i) * 7919) % f.space.Size();
    x.push_back(f.all_x[index]);
    t.push_back(f.truth[index].time_s);
    e.push_back(f.truth[index].dynamic_energy_j);
  }
  for (auto _ : state) {
    auto surrogate = mobo::MakeSurrogate(kind, {});
    surrogate->Fit(x, t, e);
    benchmark::DoNotOptimize(surrogate->Predict(f.all_x));
  }
}

void BM_GpFitPredict(benchmark::State& state) { Fit(state, mobo::SurrogateKind::kGaussianProcess); }
void BM_XgbFitPredict(benchmark::State& state) { Fit(state, mobo::SurrogateKind::kXgbEnsemble); }
BENCHMARK(BM_GpFitPredict)->Arg(32)->Arg(96)->Arg(162)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_XgbFitPredict)->Arg(32)->Arg(96)->Arg(162)->Unit(benchmark::kMillisecond);

void BM_SelectBatch(benchmark::State& state) {
  const Fixture& f = Data();
  const auto strategy = static_cast<mobo::Strategy>(state.range(0));
  mobo::AcquisitionInput input;
  input.space = &f.space;
  input.static_power_w = f.model.workload.gpu.power.static_w;
  std::vector<std::vector<double>> candidates_x;
  for (int64_t i = 0; i < f.space.Size(); ++i) {
    if (i % 9 == 0) {
      input.measured.push_back(i);
      input.measured_time_s.push_back(f.truth[i].time_s);
      input.measured_energy_j.push_back(f.truth[i].energy_j);
      input.measured_dynamic_energy_j.push_back(f.truth[i].dynamic_energy_j);
    } else {
      input.candidates.push_back(i);
      candidates_x.push_back(f.all_x[i]);
    }
  }
  auto surrogate = mobo::MakeSurrogate(mobo::SurrogateKind::kGaussianProcess, {});
  std::vector<std::vector<double>> x;
  for (int64_t i : input.measured) x.push_back(f.all_x[i]);
  surrogate->Fit(x, input.measured_time_s, input.measured_dynamic_energy_j);
  input.predictions = surrogate->Predict(candidates_x);
  for (auto _ : state) benchmark::DoNotOptimize(mobo::SelectBatch(strategy, input, 16));
}
BENCHMARK(BM_SelectBatch)
    ->Arg(static_cast<int>(mobo::Strategy::kPublished))
    ->Arg(static_cast<int>(mobo::Strategy::kPerClock))
    ->Arg(static_cast<int>(mobo::Strategy::kBeliever))
    ->Unit(benchmark::kMillisecond);

}  // namespace
