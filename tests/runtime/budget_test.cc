// SPDX-License-Identifier: Apache-2.0
// Energy budgets in the runtime (issue 28): a 2-stage job on the fake NVML switches plans under
// a changing power budget and follows a 3-interval timetable; both stages must move at one step
// boundary to the plan chosen, and the clocks the GPUs get must be that plan's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kareus/device/frequency_controller.h"
#include "kareus/device/nvml.h"
#include "kareus/plan/plan_file.h"
#include "kareus/plan/timetable.h"
#include "kareus/runtime/plan_executor.h"
#include "kareus/runtime/timetable_follower.h"
#include "runtime_test_util.h"

namespace kareus::runtime {
namespace {

using testing::ClockCalls;
using testing::MakeTestPlan;

constexpr int kStages = 2;
constexpr int kMicrobatches = 4;

// Three plans of the job told apart by a clock offset; 2 GPUs (one per stage).
struct TestPlan {
  const char* file;
  int offset_mhz;
  double time_s;
  double energy_j;  // the job's: power per GPU = energy / time / 2
};
constexpr TestPlan kPlans[] = {{"plans/fast.json", 0, 1.0, 600.0},      // 300 W per GPU
                               {"plans/middle.json", 300, 1.2, 540.0},  // 225 W per GPU
                               {"plans/slow.json", 600, 1.5, 510.0}};   // 170 W per GPU

class BudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDirWithNvmlLog("kareus_budget_test", &log_);
    unsetenv("FAKE_NVML_DEVICES");
    plan::FrontierFile frontier{.method = "kareus", .workload = Json::object(), .points = {}};
    for (int i = 0; i < 3; ++i) {
      plan::WritePlanFile(dir_ / kPlans[i].file,
                          MakeTestPlan(kStages, kMicrobatches, kPlans[i].offset_mhz));
      frontier.points.push_back({.time_s = kPlans[i].time_s,
                                 .energy_j = kPlans[i].energy_j,
                                 .static_energy_j = 100.0 * kPlans[i].time_s,
                                 .plan_index = i,
                                 .plan_path = kPlans[i].file});
    }
    plan::WriteFrontierFile(dir_ / "frontier.json", frontier);
    nvml_ = device::Nvml::Open({.library_path = testing::FakeNvmlPath()});
    for (int s = 0; s < kStages; ++s) {
      controllers_.push_back(std::make_unique<device::FrequencyController>(
          nvml_, device::FrequencyControllerOptions{
                     .gpu = s, .install_signal_handlers = false, .coalesce = false}));
      executors_.push_back(std::make_unique<PlanExecutor>(
          dir_ / kPlans[0].file, PlanExecutorOptions{.stage = s}, controllers_.back().get()));
    }
  }
  void TearDown() override {
    unsetenv("FAKE_NVML_LOG");
    std::filesystem::remove_all(dir_);
  }

  // One step on every stage (stage 0 first, as a pipeline's steps overlap); returns, per stage,
  // the offset of the plan that ran (from its first instruction's clock).
  std::vector<int> Step() {
    std::vector<int> offsets;
    for (int s = 0; s < kStages; ++s) {
      PlanExecutor& e = *executors_[s];
      e.OnStepBegin();
      bool first = true;
      for (const auto& slot :
           schedule::StageOrder(schedule::ScheduleKind::k1F1B, kStages, s, kMicrobatches)) {
        const char* kind = schedule::ToString(slot.kind);
        e.OnInstructionBegin(kind);
        if (first)
          offsets.push_back(testing::TestClockMhz(s, 0) - e.current_instruction().freq_mhz);
        first = false;
        served_[s].push_back(e.current_instruction().freq_mhz);
        e.OnInstructionEnd(kind);
      }
      e.OnStepEnd();
    }
    return offsets;
  }

  // The controllers must have set exactly the clocks the executors served, in order, and reset
  // at the end.
  void ExpectClocksAsServed() {
    for (auto& c : controllers_) c->WaitIdle();
    controllers_.clear();
    for (int s = 0; s < kStages; ++s) {
      std::vector<std::string> expected;
      int last = -1;
      for (int mhz : served_[s]) {
        if (mhz != last) expected.push_back("set " + std::to_string(mhz));
        last = mhz;
      }
      expected.push_back("reset");
      EXPECT_EQ(ClockCalls(log_, s), expected) << "stage " << s;
    }
  }

  std::filesystem::path dir_, log_;
  std::shared_ptr<device::Nvml> nvml_;
  std::vector<std::unique_ptr<device::FrequencyController>> controllers_;
  std::vector<std::unique_ptr<PlanExecutor>> executors_;
  std::vector<int> served_[kStages];
};

TEST(ChooseFrontierPointForPower, FastestThatFitsElseLowestPower) {
  plan::FrontierFile frontier{.method = "kareus", .workload = Json::object(), .points = {}};
  for (int i = 0; i < 3; ++i) {
    frontier.points.push_back({.time_s = kPlans[i].time_s,
                               .energy_j = kPlans[i].energy_j,
                               .static_energy_j = 0,
                               .plan_index = i,
                               .plan_path = kPlans[i].file});
  }
  frontier.points.push_back({.time_s = 0.9,
                             .energy_j = 700,
                             .static_energy_j = 0,
                             .plan_index = -1,
                             .plan_path = ""});  // no plan: never chosen
  EXPECT_EQ(ChooseFrontierPointForPower(frontier, 1000, 2, "f").point_index, 0);
  EXPECT_EQ(ChooseFrontierPointForPower(frontier, 300, 2, "f").point_index, 0);
  const PowerChoice middle = ChooseFrontierPointForPower(frontier, 299.9, 2, "f");
  EXPECT_EQ(middle.point_index, 1);
  EXPECT_DOUBLE_EQ(middle.power_w_per_gpu, 225.0);
  EXPECT_EQ(middle.plan_path, std::filesystem::path("f/plans/middle.json"));
  EXPECT_EQ(ChooseFrontierPointForPower(frontier, 200, 2, "f").point_index, 2);
  const PowerChoice none = ChooseFrontierPointForPower(frontier, 100, 2, "f");
  EXPECT_EQ(none.point_index, 2);
  EXPECT_FALSE(none.fits);
  // Invariant over budgets: a fitting choice fits, and no faster point fits.
  for (double budget = 100; budget < 400; budget += 2.5) {
    const PowerChoice c = ChooseFrontierPointForPower(frontier, budget, 2, "f");
    if (!c.fits) continue;
    EXPECT_LE(c.power_w_per_gpu, budget);
    for (int i = 0; i < 3; ++i) {
      if (frontier.points[i].energy_j / frontier.points[i].time_s / 2 <= budget) {
        EXPECT_GE(frontier.points[i].time_s, c.point.time_s);
      }
    }
  }
  EXPECT_THROW(ChooseFrontierPointForPower(frontier, 0, 2, "f"), InputError);
  EXPECT_THROW(ChooseFrontierPointForPower(frontier, std::nan(""), 2, "f"), InputError);
}

TEST_F(BudgetTest, PowerBudgetChangesSwapBothStagesAtOneStepBoundary) {
  EXPECT_EQ(Step(), (std::vector<int>{0, 0}));
  // The budget drops between steps: every stage is told, and both run the middle plan next.
  for (auto& e : executors_) {
    const PowerChoice c = e->SwapToPowerBudget(dir_, 250.0);
    EXPECT_EQ(c.plan_path, dir_ / "plans/middle.json");
    EXPECT_TRUE(c.fits);
  }
  EXPECT_EQ(Step(), (std::vector<int>{300, 300}));
  EXPECT_EQ(Step(), (std::vector<int>{300, 300}));
  // Below every plan: the lowest-power one, and it says so.
  for (auto& e : executors_) EXPECT_FALSE(e->SwapToPowerBudget(dir_, 100.0).fits);
  EXPECT_EQ(Step(), (std::vector<int>{600, 600}));
  // The budget comes back: back to the fastest plan.
  for (auto& e : executors_) EXPECT_TRUE(e->SwapToPowerBudget(dir_, 400.0).fits);
  EXPECT_EQ(Step(), (std::vector<int>{0, 0}));
  ExpectClocksAsServed();
}

// A timetable of three intervals by hand: 5 s of the fast plan; 3 s of the slow plan then a
// 2 s pause; 6 s of the middle plan. 12 iterations. Written as kareus schedule writes it.
std::filesystem::path WriteTimetable(const std::filesystem::path& dir, double start) {
  plan::ScheduleProblem problem;
  for (const TestPlan& p : kPlans) {
    problem.plans.push_back({.name = p.file, .time_s = p.time_s, .energy_j = p.energy_j});
  }
  problem.idle_power_w = 200.0;
  problem.gpus = 2;
  problem.iterations = 12;
  plan::Timetable timetable;
  const double lengths[] = {5.0, 5.0, 6.0};
  double t = start;
  for (int k = 0; k < 3; ++k) {
    plan::TimetableInterval in;
    in.interval = {.start = t, .end = t + lengths[k], .signal = 1.0};
    const int plan = k == 0 ? 0 : k == 1 ? 2 : 1;
    const double seconds = k == 1 ? 3.0 : lengths[k];
    in.entries.push_back({.plan = plan,
                          .seconds = seconds,
                          .iterations = seconds / kPlans[plan].time_s,
                          .energy_j = seconds / kPlans[plan].time_s * kPlans[plan].energy_j,
                          .cost = 0.0});
    in.pause_s = k == 1 ? 2.0 : 0.0;
    problem.intervals.push_back(in.interval);
    timetable.intervals.push_back(in);
    t += lengths[k];
  }
  timetable.finish = t;
  timetable.total_iterations = 12;
  const std::filesystem::path path = dir / "timetable.json";
  WriteJsonFile(path, plan::TimetableToJson(problem, timetable, Json::object()));
  return path;
}

TEST_F(BudgetTest, ThreeIntervalTimetableMovesBothStagesTogether) {
  const double start = 1.8e9;
  auto follower = std::make_shared<const TimetableFollower>(WriteTimetable(dir_, start));
  // One clock for the job: a step takes the time of the plan it ran; a pause jumps to its end.
  double now = start;
  std::vector<double> sleeps;
  for (auto& e : executors_) {
    e->FollowTimetable(follower, 0.0,
                       {.now = [&] { return now; },
                        .sleep_until =
                            [&](double until) {
                              sleeps.push_back(until - start);
                              now = until;
                            }});
  }
  std::vector<int> ran;
  for (int step = 0; step < 12; ++step) {
    const std::vector<int> offsets = Step();
    ASSERT_EQ(offsets[0], offsets[1]) << "the stages ran different plans at step " << step;
    ran.push_back(offsets[0]);
    for (const TestPlan& p : kPlans) {
      if (p.offset_mhz == offsets[0]) now += p.time_s;
    }
    EXPECT_FALSE(executors_[0]->timetable_step()->behind) << step;
  }
  // 5 fast (5 s), 2 slow (3 s), the pause to 10 s, then 5 middle (6 s).
  EXPECT_EQ(ran, (std::vector<int>{0, 0, 0, 0, 0, 600, 600, 300, 300, 300, 300, 300}));
  EXPECT_EQ(sleeps, (std::vector<double>{10.0}));  // one pause, taken by the first stage there
  EXPECT_EQ(executors_[0]->timetable_swaps(), 3);
  EXPECT_EQ(executors_[1]->timetable_swaps(), 3);
  // The 13th step finds the iterations done.
  executors_[0]->OnStepBegin();
  EXPECT_TRUE(executors_[0]->timetable_step()->done);
  executors_[0]->StopFollowingTimetable();
  for (const auto& slot :
       schedule::StageOrder(schedule::ScheduleKind::k1F1B, kStages, 0, kMicrobatches)) {
    executors_[0]->OnInstructionBegin(schedule::ToString(slot.kind));
    served_[0].push_back(executors_[0]->current_instruction().freq_mhz);
    executors_[0]->OnInstructionEnd(schedule::ToString(slot.kind));
  }
  executors_[0]->OnStepEnd();
  ExpectClocksAsServed();
}

TEST_F(BudgetTest, BehindTheTimetableRunsTheFastestPlanAndSaysWhenLate) {
  const double start = 1.8e9;
  const TimetableFollower follower(WriteTimetable(dir_, start));
  // On time in the slow part of interval 1 (6 planned by 6 s).
  TimetableStep on = follower.Decide(start + 6.0, 6.0);
  EXPECT_FALSE(on.behind);
  EXPECT_EQ(on.plan, dir_ / "plans/slow.json");
  EXPECT_NEAR(on.planned_iterations, 5.0 + 1.0 / 1.5, 1e-9);
  // 2.7 iterations behind: the fastest plan (no cap here) until caught up.
  TimetableStep behind = follower.Decide(start + 7.5, 4.0);
  EXPECT_TRUE(behind.behind);
  EXPECT_FALSE(behind.late);
  EXPECT_EQ(behind.plan, dir_ / "plans/fast.json");
  EXPECT_THAT(behind.message, ::testing::HasSubstr("behind by 2.7 iterations"));
  // Far behind near the deadline: late, and says by how much.
  TimetableStep late = follower.Decide(start + 14.0, 3.0);
  EXPECT_TRUE(late.late);
  EXPECT_THAT(late.message, ::testing::HasSubstr("cannot finish by the deadline"));
  // In the pause, on time: wait until the interval's end.
  TimetableStep pause = follower.Decide(start + 8.5, 7.0);
  EXPECT_TRUE(pause.plan.empty());
  EXPECT_DOUBLE_EQ(pause.pause_until, start + 10.0);
  EXPECT_TRUE(follower.Decide(start + 3.0, 12.0).done);
  // Before the start it runs the first interval's plan.
  EXPECT_EQ(follower.Decide(start - 100.0, 0.0).plan, dir_ / "plans/fast.json");
}

TEST_F(BudgetTest, ATimetableWhosePlansAreMissingIsRefused) {
  const std::filesystem::path path = WriteTimetable(dir_, 1.8e9);
  // A plan for another job (3 stages) is refused when the executor is told to follow it.
  plan::WritePlanFile(dir_ / "plans/slow.json", MakeTestPlan(3, kMicrobatches, 600));
  try {
    executors_[0]->FollowTimetable(std::make_shared<const TimetableFollower>(path));
    ADD_FAILURE() << "a timetable with a plan for another job was followed";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("for the same job"));
  }
  EXPECT_FALSE(executors_[0]->timetable_step().has_value());
  std::filesystem::remove(dir_ / "plans/middle.json");
  EXPECT_THROW(TimetableFollower{path}, InputError);
  WriteJsonFile(path, Json{{"format", "kareus-plan"}});
  EXPECT_THROW(TimetableFollower{path}, InputError);
}

}  // namespace
}  // namespace kareus::runtime
