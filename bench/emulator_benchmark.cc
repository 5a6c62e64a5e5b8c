// SPDX-License-Identifier: Apache-2.0
// Emulator speed (DESIGN.md §5: an exhaustive sweep of a partition's space must take well under
// a second). Baseline figures: docs/arch-emulator.md.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "kareus/emulator/emulator.h"
#include "kareus/workload/ops.h"
#include "kareus/workload/workload.h"

namespace {

using kareus::emulator::SimulatePartition;
using kareus::emulator::SweepPartition;

const kareus::workload::WorkloadModel& Model(const char* file) {
  static std::map<std::string, kareus::workload::WorkloadModel> models;
  auto it = models.find(file);
  if (it == models.end()) {
    const char* dir = std::getenv("KAREUS_SOURCE_DIR");
    const std::filesystem::path root = dir != nullptr ? dir : KAREUS_BENCH_SOURCE_DIR;
    it = models
             .emplace(file, kareus::workload::BuildWorkloadModel(
                                kareus::workload::LoadWorkloadFile(root / "examples/paper" / file)))
             .first;
  }
  return it->second;
}

constexpr const char* kTp8 = "01-llama3.2-3b-tp8-mbs8-seq4096.yaml";
constexpr const char* kCp2Tp4 = "02-llama3.2-3b-cp2-tp4-mbs8-seq4096.yaml";

// One partition simulation (Llama 3.2 3B TP 8 fwd_attn, 12 SMs at norm_0, 1410 MHz: the power
// cap binds, so this includes the cap bisection).
void BM_SimulatePartition(benchmark::State& state) {
  const auto& model = Model(kTp8);
  const auto& type = kareus::emulator::FindPartitionType(model, "fwd_attn");
  const int freq = static_cast<int>(state.range(0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(SimulatePartition(model.workload.gpu, type,
                                               {.freq_mhz = freq, .sms = 12, .slot = "norm_0"}));
  }
}
BENCHMARK(BM_SimulatePartition)->Arg(1410)->Arg(1110);

// The exhaustive sweep of a 1,080-point space: CP2+TP4 fwd_qkv_ag, 18 clocks x 20 SMs x 3 slots
// (kareus-official.md §2.2).
void BM_SweepFwdQkvAg1080(benchmark::State& state) {
  const auto& model = Model(kCp2Tp4);
  const auto& type = kareus::emulator::FindPartitionType(model, "fwd_qkv_ag");
  size_t points = 0;
  for (auto _ : state) {
    const auto sweep = SweepPartition(model.workload.gpu, type);
    points = sweep.size();
    benchmark::DoNotOptimize(sweep.data());
  }
  state.counters["points"] = static_cast<double>(points);
  state.counters["points_per_s"] = benchmark::Counter(
      static_cast<double>(points), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SweepFwdQkvAg1080)->Unit(benchmark::kMillisecond);

// A whole backward instruction of stage 0 (15 layers; nanobatched, library-default knobs).
void BM_SimulateInstruction(benchmark::State& state) {
  const auto& model = Model(kTp8);
  const auto knobs = kareus::emulator::DefaultInstructionKnobs(
      model, 1410, kareus::emulator::ExecutionMode::kNanobatched);
  for (auto _ : state) {
    benchmark::DoNotOptimize(kareus::emulator::SimulateInstruction(
        model, 0, kareus::schedule::Direction::kBackward, knobs));
  }
}
BENCHMARK(BM_SimulateInstruction)->Unit(benchmark::kMicrosecond);

}  // namespace
