// SPDX-License-Identifier: Apache-2.0
#include "kareus/methods/run.h"

#include <gtest/gtest.h>

#include "kareus/common/error.h"
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
      "microbatch_size: " + std::to_string(microbatch_size) + "\n"
      "sequence_length: 2048\nmicrobatches: 4\nrecompute: full\n",
      "small.yaml");
}

RunOptions SmallOptions() {
  RunOptions options;
  options.methods = {Method::kMegatron, Method::kNanobatching, Method::kPerseus,
                     Method::kNanobatchingPerseus, Method::kKareus, Method::kKareusOracle};
  options.profile.budget_fraction = 0.12;
  options.quiet = true;
  return options;
}

std::vector<TimeEnergy> Frontier(const MethodResult& m) {
  std::vector<TimeEnergy> out;
  for (const auto& e : m.measured) out.push_back({e.time_s, e.energy_j});
  return out;
}

const MethodResult& Get(const RunResult& run, Method method) {
  for (const auto& m : run.methods) {
    if (m.method == method) return m;
  }
  throw std::runtime_error("method missing");
}

class RunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { run_ = new RunResult(RunWorkload(Small(), SmallOptions(), Context{.seed = 7})); }
  static void TearDownTestSuite() { delete run_; }
  static RunResult* run_;
};
RunResult* RunTest::run_ = nullptr;

TEST_F(RunTest, EveryMethodHasAFrontierEndingAtItsFastestPlan) {
  ASSERT_EQ(run_->methods.size(), 6u);
  for (const auto& m : run_->methods) {
    ASSERT_FALSE(m.measured.empty()) << ToString(m.method);
    ASSERT_EQ(m.measured.size(), m.solved.solve.points.size());
    EXPECT_FALSE(m.solved.sampled.empty());
    EXPECT_LE(m.solved.sampled.size(), 10u);
    EXPECT_EQ(m.solved.sampled.back(), m.Fastest());
    for (const auto& e : m.measured) {
      EXPECT_GT(e.time_s, 0.0);
      EXPECT_NEAR(e.energy_j, e.static_energy_j + e.dynamic_energy_j, 1e-6);
    }
    // The emulated run of the fastest plan agrees with the planner's prediction (composition
    // from denoised measurements is nearly exact; noise is 0.3 % on time).
    const auto& predicted = m.solved.solve.points[m.Fastest()].cost;
    EXPECT_NEAR(m.measured[m.Fastest()].time_s / predicted.time_s, 1.0, 0.03) << ToString(m.method);
  }
  EXPECT_EQ(Get(*run_, Method::kMegatron).measured.size(), 1u);
  EXPECT_GT(Get(*run_, Method::kPerseus).measured.size(), 2u);
}

TEST_F(RunTest, PerseusSavesEnergyAtMegatronsSpeed) {
  // Perseus only slows non-critical instructions: same time, less energy (within the quantum).
  const auto& megatron = Get(*run_, Method::kMegatron).measured.back();
  const auto& perseus = Get(*run_, Method::kPerseus).measured.back();
  EXPECT_NEAR(perseus.time_s, megatron.time_s, 0.01 * megatron.time_s);
  EXPECT_LT(perseus.energy_j, megatron.energy_j);
}

TEST_F(RunTest, KareusIsNowhereWorseThanThePerseusMethodsBeyondNoise) {
  const auto kareus = Frontier(Get(*run_, Method::kKareus));
  for (Method ref : {Method::kPerseus, Method::kNanobatchingPerseus}) {
    const auto cmp = CompareAtEqualTime(Frontier(Get(*run_, ref)), kareus);
    ASSERT_TRUE(cmp.overlap);
    EXPECT_GE(cmp.min_percent, -0.5) << ToString(ref);
  }
  // And the oracle (exhaustive, noise-free partition frontiers) is close at iso-time.
  const auto perseus = Frontier(Get(*run_, Method::kPerseus));
  const auto k = IsoTimeEnergyReduction(perseus, kareus);
  const auto o = IsoTimeEnergyReduction(perseus, Frontier(Get(*run_, Method::kKareusOracle)));
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
      EXPECT_DOUBLE_EQ(back.iteration.time_s, m.measured[index].time_s);
      for (const auto& stage : back.stages) {
        for (const auto& ins : stage.instructions) {
          EXPECT_TRUE(run_->model.workload.gpu.clock.Contains(ins.freq_mhz));
          if (m.method == Method::kMegatron || m.method == Method::kPerseus) {
            EXPECT_EQ(ins.mode, plan::ExecutionMode::kSequential);
          }
        }
      }
    }
  }
}

TEST_F(RunTest, SummaryCarriesTheTables) {
  const Json& s = run_->summary;
  EXPECT_EQ(s["format"], "kareus.summary/1");
  EXPECT_EQ(s["max_throughput"].size(), 6u);
  EXPECT_EQ(s["max_throughput"][0]["delta_time_pct"], 0.0);
  EXPECT_EQ(s["frontier_table"].size(), 5u);  // every method but Perseus
  EXPECT_FALSE(s["timeline"]["stages"].empty());
  EXPECT_EQ(s["partition_frontiers"].size(), 4u);  // the four tunable TP types
}

TEST(Run, SameSeedSameResult) {
  RunOptions options = SmallOptions();
  options.methods = {Method::kPerseus, Method::kKareus};
  const auto a = RunWorkload(Small(), options, Context{.seed = 3});
  const auto b = RunWorkload(Small(), options, Context{.seed = 3});
  Json sa = a.summary, sb = b.summary;
  for (Json* s : {&sa, &sb}) {
    for (auto& m : (*s)["methods"]) m.erase("phase_wall_s");  // wall clock differs
  }
  EXPECT_EQ(sa, sb);
}

TEST(Run, MicrobatchOfOnePlansSequentially) {
  RunOptions options = SmallOptions();
  options.methods = {Method::kNanobatching, Method::kKareus};
  const auto run = RunWorkload(Small(1), options, Context{.seed = 1});
  for (const auto& m : run.methods) {
    EXPECT_FALSE(m.note.empty());
    for (size_t index : m.solved.sampled) {
      for (const auto& stage : MakePlan(m, index).stages) {
        for (const auto& ins : stage.instructions) EXPECT_EQ(ins.mode, plan::ExecutionMode::kSequential);
      }
    }
  }
}

TEST(Run, MethodNamesAreValidated) {
  EXPECT_EQ(MethodFromString("nanobatching+perseus"), Method::kNanobatchingPerseus);
  try {
    MethodFromString("zeus");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kareus-oracle"), std::string::npos);
  }
  RunOptions options = SmallOptions();
  options.methods.clear();
  EXPECT_THROW(RunWorkload(Small(), options, Context{}), InputError);
}

}  // namespace
}  // namespace kareus::methods
