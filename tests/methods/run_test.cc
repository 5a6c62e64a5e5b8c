// SPDX-License-Identifier: Apache-2.0
#include "kareus/methods/run.h"

#include <algorithm>
#include <set>

#include <gtest/gtest.h>

#include "kareus/common/error.h"
#include "kareus/measure/emulator_backend.h"
#include "kareus/methods/metrics.h"

namespace kareus::methods {
namespace {

workload::Workload Small(int microbatch_size = 4) {
  return workload::WorkloadFromYaml(
      "name: small\n"
      "model: {name: small, hidden: 2048, heads: 16, kv_groups: 8, head_dim: 128, ffn: 8192, "
      "layers: 4, vocab: 32000}\n"
      "gpu: A100-SXM4-40GB\n"
      "parallelism: {tp: 4, pp: 2}\n"
      "microbatch_size: " +
          std::to_string(microbatch_size) +
          "\n"
          "sequence_length: 2048\nmicrobatches: 4\nrecompute: full\n",
      "small.yaml");
}

RunOptions SmallOptions() {
  RunOptions options;
  options.methods = MethodTable();
  options.profile.budget_fraction = 0.12;
  options.quiet = true;
  return options;
}

std::vector<TimeEnergy> Frontier(const MethodResult& m) {
  std::vector<TimeEnergy> out;
  for (const auto& e : m.evaluated) out.push_back({e.time_s, e.energy_j});
  return out;
}

const MethodResult& Get(const RunResult& run, const std::string& method) {
  for (const auto& m : run.methods) {
    if (m.method.name == method) return m;
  }
  throw std::runtime_error("method missing: " + method);
}

RunResult RunEmulated(const workload::Workload& w, const RunOptions& options, uint64_t seed) {
  return RunWorkload(w, options, measure::EmulatorBackendFactory(), Context{.seed = seed});
}

class RunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { run_ = new RunResult(RunEmulated(Small(), SmallOptions(), 7)); }
  static void TearDownTestSuite() { delete run_; }
  static RunResult* run_;
};
RunResult* RunTest::run_ = nullptr;

TEST_F(RunTest, EveryMethodHasAFrontierEndingAtItsFastestPlan) {
  ASSERT_EQ(run_->methods.size(), 6u);
  for (const auto& m : run_->methods) {
    ASSERT_FALSE(m.evaluated.empty()) << m.method.name;
    ASSERT_EQ(m.evaluated.size(), m.solved.solve.points.size());
    EXPECT_FALSE(m.solved.sampled.empty());
    EXPECT_LE(m.solved.sampled.size(), 10u);
    // The fastest plan is the one with the lowest evaluated time.
    for (const auto& e : m.evaluated) EXPECT_GE(e.time_s, m.evaluated[m.Fastest()].time_s);
    for (const auto& e : m.evaluated) {
      EXPECT_GT(e.time_s, 0.0);
      EXPECT_NEAR(e.energy_j, e.static_energy_j + e.dynamic_energy_j, 1e-6);
    }
    // The emulated run of the fastest plan agrees with the planner's prediction (composition
    // from denoised measurements is nearly exact; noise is 0.3 % on time).
    const auto& predicted = m.solved.solve.points[m.Fastest()].cost;
    EXPECT_NEAR(m.evaluated[m.Fastest()].time_s / predicted.time_s, 1.0, 0.03) << m.method.name;
  }
  EXPECT_EQ(Get(*run_, "megatron").evaluated.size(), 1u);
  EXPECT_GT(Get(*run_, "perseus").evaluated.size(), 2u);
}

// The solver's frontier is Pareto-optimal on predictions; once evaluated, a plan another plan
// beats on both time and energy is dropped and recorded, never presented as a frontier plan.
// Checks `run`'s frontiers and returns how many points its evaluation dropped.
std::size_t CheckDropped(const RunResult& run) {
  std::size_t dropped = 0;
  for (const auto& m : run.methods) {
    for (std::size_t i = 0; i < m.evaluated.size(); ++i) {
      if (i > 0) {  // slowest evaluated time first, so energies rise
        EXPECT_LT(m.evaluated[i].time_s, m.evaluated[i - 1].time_s) << m.method.name << " " << i;
        EXPECT_GT(m.evaluated[i].energy_j, m.evaluated[i - 1].energy_j)
            << m.method.name << " " << i;
      }
    }
    for (std::size_t k : m.solved.sampled) EXPECT_LT(k, m.evaluated.size());
    EXPECT_EQ(m.Fastest(), m.evaluated.size() - 1) << m.method.name;
    for (const auto& d : m.dropped) {
      if (d.dominated_by >= m.evaluated.size()) {
        ADD_FAILURE() << m.method.name << " " << d.solver_index << ": no such kept point";
        continue;
      }
      const auto& by = m.evaluated[d.dominated_by];
      EXPECT_LE(by.time_s, d.evaluated.time_s) << m.method.name << " " << d.solver_index;
      EXPECT_LE(by.energy_j, d.evaluated.energy_j) << m.method.name << " " << d.solver_index;
      EXPECT_TRUE(by.time_s < d.evaluated.time_s || by.energy_j < d.evaluated.energy_j);
    }
    // Each dropped point is a distinct point of the solver's frontier.
    std::set<std::size_t> solver_indices;
    for (const auto& d : m.dropped) {
      EXPECT_LT(d.solver_index, m.evaluated.size() + m.dropped.size());
      EXPECT_TRUE(solver_indices.insert(d.solver_index).second);
    }
    dropped += m.dropped.size();
  }
  const Json summary = ToJson(run.summary);
  std::size_t listed = 0;
  for (const Json& m : summary["methods"]) listed += m["dropped_after_evaluation"].size();
  EXPECT_EQ(listed, dropped);
  return dropped;
}

TEST_F(RunTest, NoEvaluatedDominatedPlanIsOnTheFrontier) {
  CheckDropped(*run_);
  // Valued by their first readings alone (the winner's curse: RunOptions::confirm_readings),
  // this workload has such plans, so the test can fail: at seed 7 the evaluation drops some.
  RunOptions first_readings = SmallOptions();
  first_readings.confirm_readings = 0;
  EXPECT_GT(CheckDropped(RunEmulated(Small(), first_readings, 7)), 0u);
}

TEST_F(RunTest, PerseusSavesEnergyAtMegatronsSpeed) {
  // Perseus only slows non-critical instructions: same time, less energy (within the quantum).
  const auto& megatron = Get(*run_, "megatron").evaluated.back();
  const auto& perseus = Get(*run_, "perseus").evaluated.back();
  EXPECT_NEAR(perseus.time_s, megatron.time_s, 0.01 * megatron.time_s);
  EXPECT_LT(perseus.energy_j, megatron.energy_j);
}

TEST_F(RunTest, KareusIsNowhereWorseThanThePerseusMethodsBeyondNoise) {
  const auto kareus = Frontier(Get(*run_, "kareus"));
  for (const char* ref : {"perseus", "nanobatching+perseus"}) {
    const auto cmp = CompareAtEqualTime(Frontier(Get(*run_, ref)), kareus);
    ASSERT_TRUE(cmp.overlap);
    EXPECT_GE(cmp.min_percent, -0.5) << ref;
  }
  // And the oracle (exhaustive, noise-free partition frontiers) is close at iso-time.
  const auto perseus = Frontier(Get(*run_, "perseus"));
  const auto k = IsoTimeEnergyReduction(perseus, kareus);
  const auto o = IsoTimeEnergyReduction(perseus, Frontier(Get(*run_, "kareus-oracle")));
  ASSERT_TRUE(k && o);
  EXPECT_LT(*o - *k, 1.5);
}

TEST_F(RunTest, PlansRoundTripThroughTheValidatedFileFormat) {
  for (const auto& m : run_->methods) {
    for (size_t index : m.solved.sampled) {
      const plan::Plan p = MakePlan(m, index);
      const plan::Plan back = plan::PlanFromJson(plan::ToJson(p));  // validates order and counts
      ASSERT_EQ(back.stages.size(), 2u);
      EXPECT_EQ(back.stages[0].instructions.size(), 8u);  // 4 forwards + 4 backwards
      EXPECT_DOUBLE_EQ(back.iteration.time_s, m.evaluated[index].time_s);
      for (const auto& stage : back.stages) {
        for (const auto& ins : stage.instructions) {
          EXPECT_TRUE(run_->model.workload.gpu.clock.Contains(ins.freq_mhz));
          if (m.method.execution == Execution::kSequential) {
            EXPECT_EQ(ins.mode, schedule::ExecutionMode::kSequential);
          }
        }
      }
    }
  }
}

TEST_F(RunTest, SummaryCarriesTheTables) {
  const Json s = ToJson(run_->summary);
  EXPECT_EQ(s["format"], "kareus.summary/2");
  EXPECT_EQ(s["backend"], "emulator(v2,time_noise=0.003,energy_noise=0.01)");
  EXPECT_EQ(s["evaluator"], "noise-free re-run on emulator(v2,noise_free)");
  EXPECT_EQ(s["evaluated"], true);
  EXPECT_EQ(s["max_throughput"].size(), 6u);
  EXPECT_EQ(s["max_throughput"][0]["delta_time_pct"], 0.0);
  EXPECT_EQ(s["frontier_table"].size(), 5u);  // every method but Perseus
  EXPECT_FALSE(s["timeline"]["stages"].empty());
  EXPECT_EQ(s["partition_frontiers"].size(), 4u);  // the four tunable TP types
}

// summary.json lists the cost kinds and phases by name (the enums' order is another), and
// each method's costs by kind sum to its total.
TEST_F(RunTest, SummaryListsCostKindsAndPhasesByName) {
  const Json s = ToJson(run_->summary);
  for (const auto& m : s["methods"]) {
    for (const char* map : {"profiling_by_kind", "phase_wall_s"}) {
      std::vector<std::string> names;
      for (const auto& [name, value] : m[map].items()) names.push_back(name);
      EXPECT_FALSE(names.empty()) << m["method"] << " " << map;
      EXPECT_TRUE(std::is_sorted(names.begin(), names.end())) << m["method"] << " " << map;
    }
  }
  const MethodResult& kareus = Get(*run_, "kareus");
  EXPECT_TRUE(kareus.profiling_by_kind.contains(CostKind::kPartitionsProfiled));
  EXPECT_TRUE(kareus.phase_wall_s.contains(Phase::kCompose));
  int64_t measurements = 0;
  for (const auto& [kind, cost] : kareus.profiling_by_kind) measurements += cost.measurements;
  EXPECT_EQ(measurements, kareus.measurements);
}

TEST(Run, SameSeedSameResult) {
  RunOptions options = SmallOptions();
  options.methods = {FindMethod("perseus"), FindMethod("kareus")};
  const auto a = RunEmulated(Small(), options, 3);
  const auto b = RunEmulated(Small(), options, 3);
  Json sa = ToJson(a.summary), sb = ToJson(b.summary);
  for (Json* s : {&sa, &sb}) {
    for (auto& m : (*s)["methods"]) m.erase("phase_wall_s");  // wall clock differs
    // The process's peak RSS (getrusage) is a high-water mark of the whole process: the second
    // run starts from the first one's heap, so it may only be higher, whatever the seed.
    s->erase("peak_rss_mib");
  }
  EXPECT_EQ(sa, sb);
}

TEST(Run, MicrobatchOfOnePlansSequentially) {
  RunOptions options = SmallOptions();
  options.methods = {FindMethod("nanobatching"), FindMethod("kareus")};
  const auto run = RunEmulated(Small(1), options, 1);
  for (const auto& m : run.methods) {
    EXPECT_FALSE(m.note.empty());
    for (size_t index : m.solved.sampled) {
      for (const auto& stage : MakePlan(m, index).stages) {
        for (const auto& ins : stage.instructions)
          EXPECT_EQ(ins.mode, schedule::ExecutionMode::kSequential);
      }
    }
  }
}

TEST(Run, MethodNamesAreValidated) {
  EXPECT_EQ(FindMethod("nanobatching+perseus").label, "Nanobatching+Perseus");
  try {
    FindMethod("zeus");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kareus-oracle"), std::string::npos);
  }
  RunOptions options = SmallOptions();
  options.methods.clear();
  EXPECT_THROW(RunEmulated(Small(), options, 1), InputError);
  options.methods = {FindMethod("kareus"), FindMethod("kareus")};
  EXPECT_THROW(RunEmulated(Small(), options, 1), InputError);
}

}  // namespace
}  // namespace kareus::methods
