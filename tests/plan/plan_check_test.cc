// SPDX-License-Identifier: Apache-2.0
// plan::CheckPlan: the plan check export, the runtime and the executor share (issue 31's
// reproducers: clocks no GPU runs, a stage list that disagrees with the recorded workload,
// unknown slots and SM counts were accepted).
#include "kareus/plan/check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <climits>
#include <functional>

#include "kareus/common/error.h"
#include "plan/plan_for.h"

namespace kareus::plan {
namespace {

using testing::PlanFor;

// The message of the InputError CheckPlan throws after `edit`, or "" when it accepts.
std::string Refusal(Plan plan, const std::function<void(Plan&)>& edit) {
  edit(plan);
  try {
    CheckPlan(PlanFromJson(ToJson(plan)));  // as a reader sees it, through the file format
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(PlanCheck, AcceptsWhatTheFlowWrites) {
  for (const char* file :
       {"01-llama3.2-3b-tp8-mbs8-seq4096.yaml", "08-qwen3-1.7b-cp2-tp4-mbs8-seq4096.yaml"}) {
    EXPECT_EQ(Refusal(PlanFor(file), [](Plan&) {}), "") << file;
  }
  // A plan without a workload record (kareus solve) has nothing to be checked against.
  Plan bare = PlanFor("01-llama3.2-3b-tp8-mbs8-seq4096.yaml");
  bare.workload = Json::object();
  EXPECT_NO_THROW(CheckPlan(bare));
}

TEST(PlanCheck, ClocksMustBeTheGpusOwn) {
  const Plan plan = PlanFor("01-llama3.2-3b-tp8-mbs8-seq4096.yaml");
  for (int freq : {1, 5000, INT_MAX, 1407}) {  // 1407: in range, off the 15 MHz grid
    const std::string refusal = Refusal(plan, [&](Plan& p) {
      for (auto& stage : p.stages) {
        for (auto& inst : stage.instructions) inst.freq_mhz = freq;
      }
    });
    EXPECT_THAT(refusal, ::testing::HasSubstr("stages[0].instructions[0].freq_mhz = " +
                                              std::to_string(freq)));
    EXPECT_THAT(refusal, ::testing::HasSubstr("not a clock the A100"));
  }
  EXPECT_THAT(Refusal(plan,
                      [](Plan& p) {
                        p.stages[1].gradient_sync = StageGradientSync{
                            .freq_mhz = 5000, .sms = 8, .time_s = 0, .energy_j = 0};
                        p.stages[0].gradient_sync = StageGradientSync{
                            .freq_mhz = 1410, .sms = 8, .time_s = 0, .energy_j = 0};
                      }),
              ::testing::HasSubstr("stages[1].gradient_sync.freq_mhz = 5000"));
}

TEST(PlanCheck, StageListMustBeTheRecordedWorkloads) {
  const Plan plan = PlanFor("01-llama3.2-3b-tp8-mbs8-seq4096.yaml");
  EXPECT_THAT(Refusal(plan, [](Plan& p) { p.workload["parallelism"]["pp"] = 3; }),
              ::testing::HasSubstr("workload.parallelism.pp = 3: the plan lists 2 stages"));
  EXPECT_THAT(Refusal(plan, [](Plan& p) { p.workload["microbatches"] = 16; }),
              ::testing::HasSubstr("workload.microbatches = 16"));
  EXPECT_THAT(Refusal(plan, [](Plan& p) { p.workload["parallelism"]["virtual_stages"] = 2; }),
              ::testing::HasSubstr("workload.parallelism.virtual_stages = 2"));
  EXPECT_THAT(Refusal(plan, [](Plan& p) { p.stages[1].gpus = 4; }),
              ::testing::HasSubstr("stages[1].gpus = 4"));
}

TEST(PlanCheck, PartitionsMustBeTheWorkloads) {
  const Plan plan = PlanFor("01-llama3.2-3b-tp8-mbs8-seq4096.yaml");
  EXPECT_THAT(
      Refusal(plan, [](Plan& p) { p.stages[0].instructions[0].partitions[0].slot = "x\"y"; }),
      ::testing::HasSubstr(".partitions[0].slot = x\"y: not a slot of fwd_"));
  EXPECT_THAT(Refusal(plan, [](Plan& p) { p.stages[0].instructions[0].partitions[0].sms = 7777; }),
              ::testing::HasSubstr(".partitions[0].sms = 7777: must be 1..108"));
  EXPECT_THAT(Refusal(plan, [](Plan& p) { p.stages[0].instructions[0].partitions[0].sms = 0; }),
              ::testing::HasSubstr(".partitions[0].sms = 0: must be >= 1"));  // the file format
  EXPECT_THAT(
      Refusal(plan,
              [](Plan& p) { p.stages[0].instructions[0].partitions[0].type = "fwd_nothing"; }),
      ::testing::HasSubstr("type = fwd_nothing: not a forward partition type"));
  // A forward type in a backward without recompute (with full recompute it runs there).
  EXPECT_THAT(Refusal(plan,
                      [](Plan& p) {
                        p.workload["recompute"] = "none";
                        for (auto& inst : p.stages[1].instructions) {
                          if (inst.kind == Direction::kBackward) {
                            inst.partitions[0].type =
                                p.stages[1].instructions[0].partitions[0].type;
                            break;
                          }
                        }
                      }),
              ::testing::HasSubstr("not a backward partition type"));
}

}  // namespace
}  // namespace kareus::plan
