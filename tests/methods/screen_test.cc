// SPDX-License-Identifier: Apache-2.0
// Kareus's screened sweeps (RunOptions::sweep_anchor_stride, methods/compose.h SweepScreen):
// fewer whole-instruction and gradient-sync measurements, every option still a measurement.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "kareus/measure/emulator_backend.h"
#include "kareus/methods/run.h"
#include "methods/compose.h"

namespace kareus::methods {
namespace {

using internal::NearFront;
using internal::SweepScreen;

TEST(SweepScreen, AnchorsAreEveryStrideThClockAndTheLast) {
  const std::vector<int> clocks{1410, 1380, 1350, 1320, 1290, 1260, 1230};
  const SweepScreen screen{.clocks = clocks, .stride = 4};
  std::vector<int> anchors;
  for (int f : clocks) {
    if (screen.IsAnchor(f)) anchors.push_back(f);
  }
  EXPECT_EQ(anchors, (std::vector<int>{1410, 1290, 1230}));
  EXPECT_EQ(screen.Neighbours(1380), (std::pair<int, int>{1410, 1290}));
  EXPECT_EQ(screen.Neighbours(1260), (std::pair<int, int>{1290, 1230}));
  EXPECT_EQ(screen.Neighbours(1290), (std::pair<int, int>{1290, 1290}));
  const SweepScreen every{.clocks = clocks, .stride = 1};
  for (int f : clocks) EXPECT_TRUE(every.IsAnchor(f)) << f;
}

TEST(SweepScreen, NearFrontDropsOnlyWhatIsDominatedBeyondTheMargin) {
  const std::vector<std::pair<double, double>> front{{1.0, 10.0}, {2.0, 5.0}};
  EXPECT_FALSE(NearFront(1.5, 12.0, front, 0.02));   // (1, 10) is better on both
  EXPECT_FALSE(NearFront(1.01, 11.0, front, 0.02));  // as fast up to the margin, 10 % less energy
  EXPECT_TRUE(NearFront(1.01, 10.1, front, 0.02));   // within the margin on both: noise
  EXPECT_TRUE(NearFront(0.9, 20.0, front, 0.02));    // the fastest
  EXPECT_TRUE(NearFront(3.0, 4.0, front, 0.02));     // the least energy
  EXPECT_TRUE(NearFront(1.5, 7.0, front, 0.02));     // between the two
  EXPECT_TRUE(NearFront(1.0, 10.0, {}, 0.02));
}

// A workload with context parallelism: a gradient sync over the CP ranks, so both screened
// sweeps (fallback instructions and gradient-sync SM counts) run.
workload::Workload SmallCp() {
  return workload::WorkloadFromYaml(
      "name: small-cp\n"
      "model: {name: small, hidden: 2048, heads: 16, kv_groups: 8, head_dim: 128, ffn: 8192, "
      "layers: 4, vocab: 32000}\n"
      "gpu: A100-SXM4-40GB\n"
      "parallelism: {tp: 2, cp: 2, pp: 2}\n"
      "microbatch_size: 4\nsequence_length: 2048\nmicrobatches: 4\nrecompute: full\n",
      "small-cp.yaml");
}

// Without confirmation readings by default: the screen's counts and "every option is a reading"
// are about the first readings (confirmed ones: ConfirmReadings below).
RunResult RunWithStride(int stride, int confirm_readings = 0) {
  RunOptions options;
  options.methods = {FindMethod("kareus")};
  options.profile.budget_fraction = 0.12;
  options.quiet = true;
  options.sweep_anchor_stride = stride;
  options.confirm_readings = confirm_readings;
  return RunWorkload(SmallCp(), options, measure::EmulatorBackendFactory(), Context{.seed = 3});
}

// The mean of the emulator's repeat 1 .. k readings of `request` (as the run computes it).
measure::Sample FreshMean(measure::Backend& backend, const workload::WorkloadModel& model,
                          measure::InstructionRequest request, int k) {
  std::vector<measure::InstructionRequest> batch;
  for (int r = 1; r <= k; ++r) {
    request.repeat = r;
    batch.push_back(request);
  }
  const std::vector<measure::Sample> readings = backend.MeasureAll(model, batch);
  measure::Sample mean;
  for (const measure::Sample& s : readings) {
    mean.time_s += s.time_s;
    mean.energy_j += s.energy_j;
  }
  mean.time_s /= k;
  mean.energy_j /= k;
  return mean;
}

// Every instruction option of `m` that is not a composition (a sequential or library-default
// fallback), with the request that reads it.
std::vector<std::pair<const plan::InstructionOption*, measure::InstructionRequest>>
FallbackReadings(const RunResult& run, const MethodResult& m) {
  std::vector<std::pair<const plan::InstructionOption*, measure::InstructionRequest>> out;
  for (std::size_t u = 0; u < m.problem.stages.size(); ++u) {
    const auto& unit = run.model.stages[u];
    for (const auto d : {schedule::Direction::kForward, schedule::Direction::kBackward}) {
      const auto& list = d == schedule::Direction::kForward ? m.problem.stages[u].forward
                                                            : m.problem.stages[u].backward;
      for (const auto& o : list) {
        if (!o.partitions.empty() || o.gradient_sync) continue;
        out.push_back({&o,
                       {.stage = unit.stage,
                        .direction = d,
                        .knobs = {.freq_mhz = o.freq_mhz, .mode = o.mode, .partitions = {}},
                        .chunk = unit.chunk}});
      }
    }
  }
  return out;
}

// Every sync node option of `m`, with the request that reads it (callers check that each
// option has its gradient_sync).
std::vector<std::pair<const plan::InstructionOption*, measure::GradientSyncRequest>>
SyncNodeReadings(const MethodResult& m) {
  std::vector<std::pair<const plan::InstructionOption*, measure::GradientSyncRequest>> out;
  const int per_stage = m.problem.SyncNodesPerStage();
  for (std::size_t i = 0; i < m.problem.sync_nodes.size(); ++i) {
    for (const auto& o : m.problem.sync_nodes[i]) {
      out.push_back({&o,
                     {.stage = static_cast<int>(i) / per_stage,
                      .chunk = static_cast<int>(i) % per_stage,
                      .work = measure::GradientSyncWork::kSyncNode,
                      .freq_mhz = o.freq_mhz,
                      .sms = o.gradient_sync ? o.gradient_sync->sms : 0}});
    }
  }
  return out;
}

TEST(SweepScreen, FewerMeasurementsEveryOptionMeasuredResultKept) {
  const RunResult full = RunWithStride(1);
  const RunResult screened = RunWithStride(4);
  const MethodResult& a = full.methods.at(0);
  const MethodResult& b = screened.methods.at(0);
  ASSERT_TRUE(full.model.gradient_sync.enabled);

  // The cost by kind adds up to the totals.
  for (const MethodResult* m : {&a, &b}) {
    double seconds = 0.0;
    int64_t count = 0;
    for (const auto& [kind, cost] : m->profiling_by_kind) {
      seconds += cost.gpu_seconds;
      count += cost.measurements;
    }
    EXPECT_NEAR(seconds, m->profiling_gpu_seconds, 1e-6 * m->profiling_gpu_seconds);
    EXPECT_EQ(count, m->measurements);
  }
  // Stride 1 sweeps every clock: per distinct unit, both directions sequential and library
  // default at each planning clock.
  const int clocks = static_cast<int>(full.model.workload.gpu.clock.ProfileGrid().size());
  const int64_t instructions = a.profiling_by_kind.at(CostKind::kInstructions).measurements;
  EXPECT_EQ(instructions % (4 * clocks), 0);
  // The screen leaves the partitions alone and measures fewer fallbacks and sync options.
  EXPECT_EQ(b.profiling_by_kind.at(CostKind::kPartitionsProfiled).measurements,
            a.profiling_by_kind.at(CostKind::kPartitionsProfiled).measurements);
  EXPECT_EQ(b.profiling_by_kind.at(CostKind::kFixedWork).measurements,
            a.profiling_by_kind.at(CostKind::kFixedWork).measurements);
  EXPECT_LT(b.profiling_by_kind.at(CostKind::kInstructions).measurements, instructions);
  EXPECT_LT(b.profiling_by_kind.at(CostKind::kGradientSync).measurements,
            a.profiling_by_kind.at(CostKind::kGradientSync).measurements);
  EXPECT_LT(b.profiling_gpu_seconds, a.profiling_gpu_seconds);

  // Nothing derived: every option of the screened run that is not a composition is, to the
  // bit, a reading of the same backend (the emulator's noise is keyed by the configuration).
  const auto backend = measure::EmulatorBackendFactory()(screened.model, 3);
  int checked = 0;
  for (const auto& [o, request] : FallbackReadings(screened, b)) {
    const measure::Sample reading =
        backend->MeasureAll(screened.model, std::vector<measure::InstructionRequest>{request})[0];
    EXPECT_EQ(o->time_s, reading.time_s) << o->freq_mhz;
    EXPECT_EQ(o->energy_j, reading.energy_j) << o->freq_mhz;
    ++checked;
  }
  for (const auto& [o, request] : SyncNodeReadings(b)) {
    ASSERT_TRUE(o->gradient_sync);
    const measure::Sample reading =
        backend->MeasureAll(screened.model, std::vector<measure::GradientSyncRequest>{request})[0];
    EXPECT_EQ(o->time_s, reading.time_s) << o->freq_mhz << " MHz, " << request.sms << " SMs";
    ++checked;
  }
  EXPECT_GT(checked, 0);
  // The fastest plan stays as fast, and the frontier's least energy within noise.
  EXPECT_LE(b.evaluated[b.Fastest()].time_s, a.evaluated[a.Fastest()].time_s * 1.003);
  auto least_energy = [](const MethodResult& m) {
    double e = m.evaluated.front().energy_j;
    for (const auto& p : m.evaluated) e = std::min(e, p.energy_j);
    return e;
  };
  EXPECT_LE(least_energy(b), least_energy(a) * 1.003);
}

// RunOptions::confirm_readings on the emulator: every instruction option that is not a
// composition (the sequential and library-default fallbacks) is, to the bit, the mean of its
// configuration's fresh readings (repeats 1 .. k, each with noise of its own), not its first
// reading.
TEST(ConfirmReadings, OptionsAreTheMeanOfTheirFreshReadings) {
  constexpr int k = 2;
  const RunResult plain = RunWithStride(4);
  const RunResult run = RunWithStride(4, k);
  const MethodResult& m = run.methods.at(0);
  const auto backend = measure::EmulatorBackendFactory()(run.model, 3);
  int checked = 0, differs = 0;
  for (const auto& [o, request] : FallbackReadings(run, m)) {
    const measure::Sample mean = FreshMean(*backend, run.model, request, k);
    EXPECT_EQ(o->time_s, mean.time_s) << o->freq_mhz;
    EXPECT_EQ(o->energy_j, mean.energy_j) << o->freq_mhz;
    const measure::Sample first =
        backend->MeasureAll(run.model, std::vector<measure::InstructionRequest>{request})[0];
    differs += first.energy_j != mean.energy_j;
    ++checked;
  }
  EXPECT_GT(checked, 10);
  EXPECT_GT(differs, 0);  // the first readings are not the values
  // The sync nodes keep their first readings; a repeat of one (a measured evaluation's,
  // MethodRun::EvaluationRepeat) is a reading of its own.
  int syncs = 0;
  for (auto [o, r] : SyncNodeReadings(m)) {
    ASSERT_TRUE(o->gradient_sync);
    const measure::Sample first =
        backend->MeasureAll(run.model, std::vector<measure::GradientSyncRequest>{r})[0];
    EXPECT_EQ(o->energy_j, first.energy_j) << o->freq_mhz << " MHz, " << r.sms << " SMs";
    r.repeat = k + 1;
    const measure::Sample later =
        backend->MeasureAll(run.model, std::vector<measure::GradientSyncRequest>{r})[0];
    EXPECT_NE(later.energy_j, first.energy_j) << o->freq_mhz << " MHz, " << r.sms << " SMs";
    ++syncs;
  }
  EXPECT_GT(syncs, 0);
  // The partitions and the fixed work are measured as without confirmation (the gradient
  // sync's screen between anchors looks at the backward options, so its count may move).
  const MethodResult& p = plain.methods.at(0);
  for (CostKind kind : {CostKind::kPartitionsProfiled, CostKind::kFixedWork}) {
    EXPECT_EQ(m.profiling_by_kind.at(kind).measurements, p.profiling_by_kind.at(kind).measurements);
  }
  EXPECT_GT(m.profiling_by_kind.at(CostKind::kInstructions).measurements,
            p.profiling_by_kind.at(CostKind::kInstructions).measurements);
}

TEST(SweepScreen, StrideIsValidated) {
  RunOptions options;
  options.sweep_anchor_stride = 0;
  ASSERT_TRUE(options.Validate());
  EXPECT_EQ(options.Validate()->field, "sweep_anchor_stride");
}

}  // namespace
}  // namespace kareus::methods
