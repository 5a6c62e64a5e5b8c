// SPDX-License-Identifier: Apache-2.0
// One partition type's profiling phases (mobo::internal::TypeState, src/mobo/type_state.h) on
// the synthetic backend: the phase each NextBatch call leaves, for an unstaged design, a fixed
// type and a prior's staged design (kept by its check, and failing it); kComplete is terminal;
// a rerun from the store walks every phase within one call.
#include "mobo/type_state.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "kareus/common/progress.h"
#include "kareus/measure/store.h"
#include "kareus/mobo/prior.h"
#include "kareus/mobo/profiler.h"
#include "measure/synthetic_backend.h"

namespace kareus::mobo::internal {

// gtest prints phases by name.
void PrintTo(TypePhase phase, std::ostream* os) { *os << ToString(phase); }

namespace {

namespace fs = std::filesystem;

constexpr TypePhase kStart = TypePhase::kStart;
constexpr TypePhase kSecondStage = TypePhase::kSecondStage;
constexpr TypePhase kRecheck = TypePhase::kRecheck;
constexpr TypePhase kAcquire = TypePhase::kAcquire;
constexpr TypePhase kComplete = TypePhase::kComplete;

// 40 evaluations in batches of 8: without a prior an initial design of 8 (a fifth of the
// budget) and four batches; with one a staged design (2 points of the no-prior design of 8,
// then the prior's design or the other 6).
ProfileOptions Options() {
  ProfileOptions options;
  options.budget = 40;
  options.batch_size = 8;
  return options;
}

// The synthetic backend's noise-free model, distorted by `perturbation` ("": exact), as the
// prior of `options` (not calibrated: PriorModel::make_calibrated is empty).
void SetPrior(const std::string& perturbation, ProfileOptions* options) {
  const ModelPerturbation p =
      perturbation.empty() ? ModelPerturbation{} : ParsePerturbation(perturbation);
  options->prior.description = "synthetic model " + p.ToString();
  options->prior.make = [p](const workload::WorkloadModel&) {
    return DistortModel(std::make_unique<testing::SyntheticBackend>(0, true), p);
  };
}

// What one type's profiling went through.
struct Walk {
  std::vector<TypePhase> phases;  // before the first NextBatch call, then after each call
  std::vector<int> numbers;       // the batches' numbers
  PartitionResult result;
};

class TypeStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kareus-type-state-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<measure::MeasurementStore> OpenStore() {
    return measure::MeasurementStore::Open(dir_ / "store.sqlite",
                                           {.gpu = backend_.Gpu().name,
                                            .workload_signature = model_.workload.Signature(),
                                            .backend = backend_.Description()});
  }

  // Type `type` of model_ profiled with `options` (seed 5) through TypeState alone, as
  // WorkloadProfiler drives it: every batch measured by backend_ and recorded in order.
  // `state_out`, when given, receives the state once complete.
  Walk Profile(int type, const ProfileOptions& options, measure::MeasurementStore* store = nullptr,
               std::unique_ptr<TypeState>* state_out = nullptr) {
    const workload::PartitionType& t = model_.partition_types[type];
    plans_.push_back(std::make_unique<Plan>(PlanType(t, backend_.Gpu(), options)));
    const Plan& plan = *plans_.back();
    TypeKnowledge knowledge;
    if (options.prior && t.tunable) {
      knowledge.prior = PredictSpace(*options.prior.make(model_), t, plan.space);
    }
    auto state = std::make_unique<TypeState>(plan, options, backend_, store, 5,
                                             std::move(knowledge), model_);
    Progress progress(false);
    Walk walk;
    walk.phases.push_back(state->phase());
    while (std::optional<MeasurementBatch> batch = state->NextBatch(0)) {
      walk.phases.push_back(state->phase());
      walk.numbers.push_back(batch->number);
      EXPECT_FALSE(state->complete());
      backend_.MeasureBatch(t, batch->knobs, [&](std::size_t j, const measure::Sample& sample) {
        state->Record(j, sample, progress, "[1/1]", 1.0);
      });
    }
    walk.phases.push_back(state->phase());
    EXPECT_TRUE(state->complete());
    walk.result = state->result();
    if (state_out != nullptr) *state_out = std::move(state);
    return walk;
  }

  fs::path dir_;
  workload::WorkloadModel model_ =
      testing::SyntheticModel({testing::SyntheticPartition("fwd_attn", 4),
                               testing::SyntheticPartition("fwd_trail", 1, false)});
  testing::SyntheticBackend backend_{5};
  std::vector<std::unique_ptr<Plan>> plans_;  // outlive the states (TypeState keeps a reference)
};

TEST(TypePhase, ToStringNamesEveryPhase) {
  EXPECT_STREQ(ToString(kStart), "start");
  EXPECT_STREQ(ToString(kSecondStage), "second_stage");
  EXPECT_STREQ(ToString(kRecheck), "recheck");
  EXPECT_STREQ(ToString(kAcquire), "acquire");
  EXPECT_STREQ(ToString(kComplete), "complete");
}

// No prior: the initial design, then acquisition until the budget is spent, then complete.
TEST_F(TypeStateTest, UnstagedDesignStartsThenAcquiresUntilTheBudgetIsSpent) {
  const Walk walk = Profile(0, Options());
  EXPECT_EQ(walk.phases, (std::vector<TypePhase>{kStart, kAcquire, kAcquire, kAcquire, kAcquire,
                                                 kAcquire, kComplete}));
  EXPECT_EQ(walk.numbers, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(walk.result.initial_design, 8);
  EXPECT_EQ(walk.result.evaluations.size(), 40u);
  EXPECT_EQ(walk.result.prior_design, PriorDesignOutcome::kNone);
}

// A fixed type: every clock at once (the start), then the acquisition completes it.
TEST_F(TypeStateTest, FixedTypeMeasuresEveryClockThenCompletes) {
  const Walk walk = Profile(1, Options());
  EXPECT_EQ(walk.phases, (std::vector<TypePhase>{kStart, kAcquire, kComplete}));
  EXPECT_EQ(walk.numbers, (std::vector<int>{0}));
  EXPECT_EQ(walk.result.evaluations.size(), 18u);
  for (const Evaluation& e : walk.result.evaluations) EXPECT_EQ(e.reason, "exhaustive");
}

// The exact prior passes the first check: its design (the second stage) and the re-check
// follow; the re-check agrees, picks nothing, and the same call goes on to the acquisition.
TEST_F(TypeStateTest, StagedDesignKeptByItsCheckIsRecheckedThenAcquires) {
  ProfileOptions options = Options();
  SetPrior("", &options);
  const Walk walk = Profile(0, options);
  EXPECT_EQ(walk.phases, (std::vector<TypePhase>{kStart, kSecondStage, kRecheck, kAcquire, kAcquire,
                                                 kAcquire, kAcquire, kAcquire, kComplete}));
  EXPECT_EQ(walk.result.prior_design, PriorDesignOutcome::kPrior);
  EXPECT_LE(walk.result.prior_recheck_log_rms, 0.03);  // the re-check ran and agreed
  // Batch 0: the first stage, 1: the prior's design, then the acquisition's from 2 (the
  // re-check added none).
  EXPECT_EQ(walk.numbers, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(walk.result.evaluations.size(), 40u);
  int design = 0;
  for (const Evaluation& e : walk.result.evaluations) design += e.batch <= 1 ? 1 : 0;
  EXPECT_EQ(design, walk.result.initial_design);
  EXPECT_GT(design, 2);
}

// An inverted clock trend fails the first check: the rest of the no-prior design is the second
// stage and no re-check follows.
TEST_F(TypeStateTest, StagedDesignFailingItsCheckFallsBackWithoutARecheck) {
  ProfileOptions options = Options();
  SetPrior("invert_clock_trend=1", &options);
  const Walk walk = Profile(0, options);
  EXPECT_EQ(walk.phases, (std::vector<TypePhase>{kStart, kSecondStage, kAcquire, kAcquire, kAcquire,
                                                 kAcquire, kAcquire, kComplete}));
  EXPECT_EQ(walk.numbers, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(walk.result.prior_design, PriorDesignOutcome::kFallback);
  EXPECT_TRUE(std::isnan(walk.result.prior_recheck_log_rms));  // no re-check
  EXPECT_EQ(walk.result.initial_design, 8);  // the no-prior design: its first 2, then 6
  EXPECT_EQ(walk.result.batch_size, 8);
}

// Once complete a type stays complete: NextBatch returns nullopt and changes nothing.
TEST_F(TypeStateTest, CompleteIsTerminal) {
  std::unique_ptr<TypeState> state;
  const Walk walk = Profile(0, Options(), nullptr, &state);
  ASSERT_EQ(state->phase(), kComplete);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(state->NextBatch(0).has_value());
    EXPECT_EQ(state->phase(), kComplete);
    EXPECT_TRUE(state->complete());
  }
  EXPECT_EQ(state->result().evaluations.size(), walk.result.evaluations.size());
  EXPECT_EQ(state->result().hypervolume_trace, walk.result.hypervolume_trace);
  EXPECT_EQ(state->result().frontier.size(), walk.result.frontier.size());
}

// Everything in the store: the first call walks every phase of the staged design (each batch
// read, none to measure) and returns nullopt, complete, with the same evaluations.
TEST_F(TypeStateTest, RerunFromTheStoreWalksEveryPhaseInOneCall) {
  ProfileOptions options = Options();
  SetPrior("", &options);
  const std::unique_ptr<measure::MeasurementStore> store = OpenStore();
  const Walk first = Profile(0, options, store.get());
  const Walk rerun = Profile(0, options, store.get());
  EXPECT_EQ(rerun.phases, (std::vector<TypePhase>{kStart, kComplete}));
  EXPECT_TRUE(rerun.numbers.empty());
  EXPECT_EQ(rerun.result.prior_design, PriorDesignOutcome::kPrior);
  EXPECT_EQ(rerun.result.measured, 0);
  EXPECT_EQ(rerun.result.reused, 40);
  ASSERT_EQ(rerun.result.evaluations.size(), first.result.evaluations.size());
  for (std::size_t i = 0; i < first.result.evaluations.size(); ++i) {
    EXPECT_EQ(rerun.result.evaluations[i].index, first.result.evaluations[i].index) << i;
    EXPECT_EQ(rerun.result.evaluations[i].batch, first.result.evaluations[i].batch) << i;
  }
  EXPECT_EQ(rerun.result.hypervolume_trace, first.result.hypervolume_trace);
}

}  // namespace
}  // namespace kareus::mobo::internal
