// SPDX-License-Identifier: Apache-2.0
// The measurement seam of `kareus run`: every measurement comes from the backend it is given
// (a synthetic one here, not the emulator), plans are evaluated by a named step, methods are
// table entries, and options validate themselves.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/measure/emulator_backend.h"
#include "kareus/methods/run.h"
#include "kareus/pareto/pareto.h"
#include "kareus/plan/perseus.h"
#include "kareus/plan/plan_file.h"
#include "measure/synthetic_backend.h"

namespace kareus::methods {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

workload::Workload Small() {
  return workload::WorkloadFromYaml(
      "name: small\n"
      "model: {name: small, hidden: 2048, heads: 16, kv_groups: 8, head_dim: 128, ffn: 8192, "
      "layers: 4, vocab: 32000}\n"
      "gpu: A100-SXM4-40GB\n"
      "parallelism: {tp: 4, pp: 2}\n"
      "microbatch_size: 4\nsequence_length: 2048\nmicrobatches: 4\nrecompute: full\n",
      "small.yaml");
}

measure::BackendFactory Synthetic(bool has_twin = true) {
  return [has_twin](const workload::WorkloadModel&,
                    uint64_t seed) -> std::unique_ptr<measure::Backend> {
    return std::make_unique<testing::SyntheticBackend>(seed, false, has_twin);
  };
}

RunOptions AllMethods() {
  RunOptions options;
  options.methods = MethodTable();
  options.profile.budget_fraction = 0.12;
  options.quiet = true;
  return options;
}

const MethodResult& Get(const RunResult& run, const std::string& name) {
  for (const auto& m : run.methods) {
    if (m.method.name == name) return m;
  }
  throw std::runtime_error("no method " + name);
}

// The synthetic backend's noise-free value of a plan: each instruction's truth, the DAG's
// longest path, static power over the iteration on every GPU.
double SyntheticIterationTime(const RunResult& run, const MethodResult& m, std::size_t point) {
  const auto& dag = m.solved.solve.dag;
  std::vector<double> durations(dag.nodes.size());
  for (std::size_t v = 0; v < dag.nodes.size(); ++v) {
    const auto& ins = dag.nodes[v];
    const auto& stage = m.problem.stages[ins.stage];
    const auto& option =
        (ins.kind == schedule::Direction::kForward ? stage.forward
                                                   : stage.backward)[m.Choice(point)[v]];
    measure::InstructionRequest request{
        .stage = ins.stage,
        .direction = ins.kind,
        .knobs = {.freq_mhz = option.freq_mhz, .mode = option.mode, .partitions = {}}};
    for (const auto& p : option.partitions)
      request.knobs.partitions[p.type] = {.sms = p.sms, .slot = p.slot};
    durations[v] = testing::SyntheticBackend::InstructionTruth(run.model, request).time_s;
  }
  return schedule::StartTimes(dag, durations, m.problem.p2p_time_s).makespan;
}

class SyntheticRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_ = new RunResult(RunWorkload(Small(), AllMethods(), Synthetic(), Context{.seed = 5}));
  }
  static void TearDownTestSuite() { delete run_; }
  static RunResult* run_;
};
RunResult* SyntheticRun::run_ = nullptr;

TEST_F(SyntheticRun, EveryMethodRunsOnTheSyntheticBackend) {
  ASSERT_EQ(run_->methods.size(), MethodTable().size());
  EXPECT_EQ(run_->backend, "synthetic(noise)");
  EXPECT_EQ(run_->evaluator, "noise-free re-run on synthetic(noise_free)");
  for (const auto& m : run_->methods) {
    ASSERT_FALSE(m.evaluated.empty()) << m.method.name;
    EXPECT_GT(m.profiling_gpu_seconds, 0.0) << m.method.name;
    EXPECT_GT(m.measurements, 0) << m.method.name;
    // Every evaluated point is the synthetic backend's own value of that plan.
    for (std::size_t i : m.solved.sampled) {
      EXPECT_NEAR(m.evaluated[i].time_s, SyntheticIterationTime(*run_, m, i),
                  1e-12 * m.evaluated[i].time_s)
          << m.method.name << " point " << i;
    }
  }
  // Kareus's partition knobs came from profiling the synthetic backend.
  const MethodResult& kareus = Get(*run_, "kareus");
  ASSERT_TRUE(kareus.profile.has_value());
  EXPECT_EQ(kareus.profile->backend, "synthetic(noise)");
}

TEST_F(SyntheticRun, ItsValuesAppearInTheOutputs) {
  const Json summary = ToJson(run_->summary);
  EXPECT_EQ(summary["backend"], "synthetic(noise)");
  EXPECT_EQ(summary["settings"]["backend"], "synthetic(noise)");
  EXPECT_THAT(summary["source_note"].get<std::string>(), HasSubstr("synthetic(noise)"));
  const MethodResult& megatron = Get(*run_, "megatron");
  EXPECT_DOUBLE_EQ(summary["max_throughput"][0]["time_s"].get<double>(),
                   SyntheticIterationTime(*run_, megatron, 0));
  const fs::path dir = fs::temp_directory_path() / ("kareus_seam_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  WriteRunOutputs(*run_, dir);
  const MethodResult& kareus = Get(*run_, "kareus");
  const plan::Plan plan = plan::ReadPlanFile(dir / "plan.json");
  EXPECT_DOUBLE_EQ(plan.iteration.time_s, kareus.evaluated[kareus.Fastest()].time_s);
  EXPECT_DOUBLE_EQ(plan.iteration.time_s, SyntheticIterationTime(*run_, kareus, kareus.Fastest()));
  EXPECT_EQ(ReadJsonFile(dir / "summary.json")["evaluator"],
            "noise-free re-run on synthetic(noise_free)");
  fs::remove_all(dir);
}

TEST_F(SyntheticRun, CostsAreGpuSecondsOfTheMeasuredGroups) {
  // Megatron: per stage one batch (10 s warm-up) of 2 instructions x 12 s, then one of their
  // RunOptions::confirm_readings (2) fresh readings each, on TP x CP = 4 GPUs.
  ASSERT_EQ(RunOptions{}.confirm_readings, 2);
  const MethodResult& megatron = Get(*run_, "megatron");
  EXPECT_DOUBLE_EQ(megatron.profiling_gpu_seconds,
                   2 * ((10.0 + 2 * 12.0) + (10.0 + 2 * 2 * 12.0)) * 4);
  EXPECT_EQ(megatron.measurements, 4 + 2 * 4);
  // The oracle's cost includes its exhaustive sweep of every partition configuration.
  const MethodResult& oracle = Get(*run_, "kareus-oracle");
  int64_t space = 0;
  for (const auto& type : run_->model.partition_types) {
    space +=
        type.tunable
            ? type.SpaceSize(static_cast<int>(run_->model.workload.gpu.clock.ProfileGrid().size()))
            : static_cast<int64_t>(run_->model.workload.gpu.clock.ProfileGrid().size());
  }
  EXPECT_GT(oracle.measurements, space);
  EXPECT_GT(oracle.profiling_gpu_seconds, 12.0 * static_cast<double>(space));
}

// A noise-free synthetic backend whose first reading of a whole instruction at `low_mhz` comes
// out 10 % low in energy and at `high_mhz` 50 % high: the winner's curse in one option, and an
// option the filter drops on its first reading.
class FirstReadingOff : public testing::SyntheticBackend {
 public:
  static constexpr int low_mhz = 1110, high_mhz = 1230;
  FirstReadingOff() : SyntheticBackend(1, /*noise_free=*/true) {}
  void MeasureInstructions(const workload::WorkloadModel& model,
                           const std::vector<measure::InstructionRequest>& batch,
                           const measure::SampleCallback& on_sample) override {
    SyntheticBackend::MeasureInstructions(
        model, batch, [&](std::size_t i, const measure::Sample& truth) {
          measure::Sample s = truth;
          const int f = batch[i].knobs.freq_mhz;
          if (batch[i].repeat == 0 && (f == low_mhz || f == high_mhz)) {
            s.energy_j *= f == low_mhz ? 0.9 : 1.5;
            s.dynamic_energy_j = s.energy_j - s.static_energy_j;
          }
          on_sample(i, s);
        });
  }
};

// RunOptions::confirm_readings: the options the filter keeps are read again and valued by the
// fresh readings alone; an option the filter dropped is neither re-read nor offered.
TEST(ConfirmReadings, TheKeptOptionsAreValuedByFreshReadings) {
  auto run_with = [](int confirm) {
    RunOptions options = AllMethods();
    options.methods = {FindMethod("perseus")};
    options.confirm_readings = confirm;
    return RunWorkload(
        Small(), options,
        [](const workload::WorkloadModel&, uint64_t) -> std::unique_ptr<measure::Backend> {
          return std::make_unique<FirstReadingOff>();
        },
        Context{.seed = 1});
  };
  const RunResult first = run_with(0), confirmed = run_with(3);
  const MethodResult& a = Get(first, "perseus");
  const MethodResult& b = Get(confirmed, "perseus");
  int64_t kept = 0;
  bool low_seen = false;
  for (std::size_t u = 0; u < b.problem.stages.size(); ++u) {
    for (const auto* list : {&b.problem.stages[u].forward, &b.problem.stages[u].backward}) {
      const auto direction = list == &b.problem.stages[u].forward ? schedule::Direction::kForward
                                                                  : schedule::Direction::kBackward;
      for (const auto& o : *list) {
        ++kept;
        EXPECT_NE(o.freq_mhz, FirstReadingOff::high_mhz) << "dropped on its first reading";
        const measure::Sample truth = testing::SyntheticBackend::InstructionTruth(
            confirmed.model, {.stage = static_cast<int>(u),
                              .direction = direction,
                              .knobs = {.freq_mhz = o.freq_mhz, .mode = o.mode, .partitions = {}}});
        EXPECT_NEAR(o.energy_j, truth.energy_j, 1e-12 * truth.energy_j) << o.freq_mhz;
        EXPECT_NEAR(o.time_s, truth.time_s, 1e-12 * truth.time_s) << o.freq_mhz;
        low_seen = low_seen || o.freq_mhz == FirstReadingOff::low_mhz;
      }
    }
  }
  EXPECT_TRUE(low_seen);
  // Without confirmation the low first reading is the option's value.
  bool cursed = false;
  for (const auto& o : a.problem.stages[0].forward) {
    if (o.freq_mhz != FirstReadingOff::low_mhz) continue;
    const measure::Sample truth = testing::SyntheticBackend::InstructionTruth(
        first.model, {.stage = 0,
                      .direction = schedule::Direction::kForward,
                      .knobs = {.freq_mhz = o.freq_mhz, .mode = o.mode, .partitions = {}}});
    cursed = std::abs(o.energy_j / truth.energy_j - 0.9) < 1e-12;
  }
  EXPECT_TRUE(cursed);
  // Three fresh readings of each kept option, nothing else.
  const int64_t extra = b.profiling_by_kind.at(CostKind::kInstructions).measurements -
                        a.profiling_by_kind.at(CostKind::kInstructions).measurements;
  EXPECT_EQ(extra, 3 * kept);
  EXPECT_EQ(confirmed.summary.settings.confirm_readings, 3);
}

TEST(ConfirmReadings, ANegativeCountIsRefused) {
  RunOptions options;
  options.confirm_readings = -1;
  ASSERT_TRUE(options.Validate().has_value());
  EXPECT_EQ(options.Validate()->field, "confirm_readings");
}

// A method is one MethodSpec: "tuned overlap without clock control" is not in the table, and
// needs nothing but this entry to run through the whole flow (on the emulator here, whose
// partition and instruction measurements agree, so the tuned knobs win where overlap pays).
TEST(Methods, ANewMethodIsOneEntry) {
  const MethodSpec overlap_only{.name = "kareus-default-clock",
                                .label = "Kareus at the default clock",
                                .execution = Execution::kNanobatched,
                                .clock = ClockControl::kDefault,
                                .comm = CommSource::kProfiled};
  RunOptions options = AllMethods();
  options.methods = {FindMethod("megatron"), overlap_only};
  const RunResult run =
      RunWorkload(Small(), options, measure::EmulatorBackendFactory(), Context{.seed = 2});
  const MethodResult& m = Get(run, "kareus-default-clock");
  ASSERT_TRUE(m.profile.has_value());
  const int default_mhz = run.model.workload.gpu.clock.default_mhz;
  bool tuned = false;
  for (std::size_t i : m.solved.sampled) {
    for (const auto& stage : MakePlan(m, i).stages) {
      for (const auto& ins : stage.instructions) {
        EXPECT_EQ(ins.freq_mhz, default_mhz);
        EXPECT_EQ(ins.mode, schedule::ExecutionMode::kNanobatched);
        tuned = tuned || !ins.partitions.empty();
      }
    }
  }
  EXPECT_TRUE(tuned) << "the profiled comm knobs reach the plan";
  const Json summary = ToJson(run.summary);
  EXPECT_EQ(summary["methods"][1]["label"], "Kareus at the default clock");
  EXPECT_EQ(summary["methods"][1]["traits"]["comm"], "profiled");
  EXPECT_EQ(summary["max_throughput"].size(), 2u);
}

TEST(Methods, TableNamesAndDefaults) {
  std::vector<std::string> names;
  for (const MethodSpec& m : DefaultMethods()) names.push_back(m.name);
  EXPECT_EQ(names, (std::vector<std::string>{"megatron", "nanobatching", "perseus",
                                             "nanobatching+perseus", "kareus"}));
  EXPECT_TRUE(FindMethod("kareus-oracle").noise_free);
  EXPECT_THAT(MethodNames(), HasSubstr("kareus-oracle"));
}

// Plans that cannot be evaluated say so, and carry the planner's predictions.
TEST(Evaluation, NotEvaluatedIsExplicit) {
  RunOptions options = AllMethods();
  options.methods = {FindMethod("perseus"), FindMethod("kareus")};
  options.evaluation = EvaluationMode::kNone;
  const RunResult run = RunWorkload(Small(), options, Synthetic(), Context{.seed = 5});
  EXPECT_FALSE(run.evaluated);
  const Json summary = ToJson(run.summary);
  EXPECT_EQ(summary["evaluated"], false);
  EXPECT_THAT(summary["evaluator"].get<std::string>(), HasSubstr("not evaluated"));
  EXPECT_THAT(summary["source_note"].get<std::string>(), HasSubstr("NOT EVALUATED"));
  for (const auto& m : run.methods) {
    EXPECT_DOUBLE_EQ(m.evaluation_gpu_seconds, 0.0);
    for (std::size_t i = 0; i < m.evaluated.size(); ++i) {
      EXPECT_EQ(m.evaluated[i].time_s, m.solved.solve.points[i].cost.time_s);
      EXPECT_EQ(m.evaluated[i].energy_j, m.solved.solve.points[i].cost.energy_j);
    }
  }
}

// A backend without a noise-free twin (a real GPU): plans are evaluated by measured runs, and
// what needs the twin is refused before anything is measured.
TEST(Evaluation, WithoutATwinPlansAreMeasured) {
  RunOptions options = AllMethods();
  options.methods = {FindMethod("megatron")};
  const RunResult run =
      RunWorkload(Small(), options, Synthetic(/*has_twin=*/false), Context{.seed = 5});
  EXPECT_EQ(run.evaluator, "measured runs on synthetic(noise)");
  EXPECT_GT(run.methods[0].evaluation_gpu_seconds, 0.0);
  {
    // A measured evaluation is a run of its own (MethodRun::EvaluationRepeat), not a replay of
    // the reading that valued the option: with that first reading alone as the value, each
    // used option's evaluated reading still differs from it.
    RunOptions first = options;
    first.confirm_readings = 0;
    const RunResult replayed = RunWorkload(Small(), first, Synthetic(false), Context{.seed = 5});
    const MethodResult& m = replayed.methods[0];
    int compared = 0;
    for (std::size_t u = 0; u < m.option_evaluations.size(); ++u) {
      for (int kind = 0; kind < 2; ++kind) {
        const auto& list = kind == 0 ? m.problem.stages[u].forward : m.problem.stages[u].backward;
        for (const auto& [option, sample] : m.option_evaluations[u][kind]) {
          EXPECT_NE(sample.energy_j, list[static_cast<std::size_t>(option)].energy_j);
          ++compared;
        }
      }
    }
    EXPECT_GT(compared, 0);
  }
  options.evaluation = EvaluationMode::kNoiseFree;
  EXPECT_THROW(RunWorkload(Small(), options, Synthetic(false), Context{.seed = 5}), InputError);
  options.evaluation = EvaluationMode::kAuto;
  options.methods = {FindMethod("kareus-oracle")};
  try {
    RunWorkload(Small(), options, Synthetic(false), Context{.seed = 5});
    FAIL() << "the oracle ran without noise-free values";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("kareus-oracle"));
  }
}

TEST(Options, ValidateNamesTheField) {
  EXPECT_FALSE(RunOptions{}.Validate());
  RunOptions options;
  options.profile.budget_fraction = -0.1;  // 0 is automatic (mobo::ProfileOptions::BudgetFraction)
  ASSERT_TRUE(options.Validate());
  EXPECT_EQ(options.Validate()->field, "profile.budget_fraction");
  EXPECT_EQ(options.Validate()->rule, "must be in (0, 1], or 0 (automatic)");
  options = RunOptions{};
  options.unit_time_s = -1.0;
  EXPECT_EQ(options.Validate()->field, "unit_time_s");
  options = RunOptions{};
  options.methods.clear();
  EXPECT_EQ(options.Validate()->field, "methods");
  EXPECT_THROW(RunWorkload(Small(), options, Synthetic(), Context{}), InputError);
  EXPECT_EQ(EvaluationModeFromString("measured"), EvaluationMode::kMeasured);
  EXPECT_THROW(EvaluationModeFromString("maybe"), InputError);
}

// Every component's Options struct names its own invalid field; defaults are valid.
TEST(Options, EveryComponentValidates) {
  EXPECT_FALSE(mobo::ProfileOptions{}.Validate());
  EXPECT_FALSE(mobo::SurrogateOptions{}.Validate());
  EXPECT_FALSE(pipeline::Options{}.Validate());
  EXPECT_FALSE(plan::ComposeOptions{}.Validate());
  EXPECT_FALSE(pareto::SumOptions{}.Validate());
  EXPECT_FALSE(emulator::MeasurementOptions{}.Validate());
  mobo::ProfileOptions profile;
  profile.initial_design = 1;
  EXPECT_EQ(profile.Validate()->field, "initial_design");
  mobo::SurrogateOptions surrogate;
  surrogate.xgb_eta = 0.0;
  EXPECT_EQ(surrogate.Validate()->field, "xgb_eta");
  mobo::SurrogateOptions noisy;
  noisy.gp_min_energy_noise = -0.01;
  EXPECT_EQ(noisy.Validate()->field, "gp_min_energy_noise");
  pipeline::Options solver;
  solver.p_static_w = std::nan("");
  EXPECT_EQ(solver.Validate()->field, "p_static_w");
  EXPECT_EQ(pipeline::Solve({}, solver).summary.status, pipeline::Status::kInvalidInput);
  plan::ComposeOptions compose;
  compose.epsilon = -1.0;
  EXPECT_EQ(compose.Validate()->field, "epsilon");
  EXPECT_THROW(plan::ComposeInstruction({}, compose), InputError);
  pareto::SumOptions sum;
  sum.epsilon = std::numeric_limits<double>::infinity();
  EXPECT_EQ(sum.Validate()->field, "epsilon");
  plan::SolveProfileOptions solve;
  solve.num_stages = 2;
  EXPECT_EQ(solve.Validate()->field, "num_microbatches");
  EXPECT_EQ(plan::ExportOptions{}.Validate()->field, "plan");
  emulator::MeasurementOptions measurement;
  measurement.window_s = 0.0;
  EXPECT_EQ(measurement.Validate()->field, "window_s");
}

// The seam holds in the source: code under src/methods/ reaches the emulator only through a
// measure::Backend, never directly.
TEST(Seam, MethodsNeverCallTheEmulator) {
  const char* source = std::getenv("KAREUS_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "KAREUS_SOURCE_DIR is set by CTest";
  const std::regex forbidden(
      R"(#include\s*"kareus/(emulator/|measure/emulator_backend)|\bemulator::|EmulatorBackend)");
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(fs::path(source) / "src" / "methods")) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    ++files;
    std::string line;
    int number = 0;
    while (std::getline(text, line)) {
      ++number;
      EXPECT_FALSE(std::regex_search(line, forbidden))
          << entry.path().string() << ":" << number << ": " << line;
    }
  }
  EXPECT_GE(files, 5);
}

}  // namespace
}  // namespace kareus::methods
