// SPDX-License-Identifier: Apache-2.0
#include "kareus/plan/plan_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "kareus/common/error.h"
#include "kareus/common/io.h"

namespace kareus::plan {
namespace {

using ::testing::HasSubstr;

// A valid plan: S stages x M microbatches in 1F1B order, clocks that differ per instruction so
// a swapped field would show, knobs on nanobatched instructions.
Plan MakePlan(int num_stages, int num_microbatches) {
  Plan plan;
  plan.method = "kareus";
  plan.workload = Json{{"model", "llama3.2-3b"}, {"tp", 8}};
  plan.num_microbatches = num_microbatches;
  plan.iteration = {
      .time_s = 1.5, .energy_j = 4000.0, .static_energy_j = 1000.0, .dynamic_energy_j = 3000.0};
  for (int s = 0; s < num_stages; ++s) {
    PlannedStage stage{.stage = s, .gpus = 8, .instructions = {}};
    int i = 0;
    for (const schedule::Instruction& slot :
         schedule::StageOrder(ScheduleKind::k1F1B, num_stages, s, num_microbatches)) {
      PlannedInstruction instruction{.kind = slot.kind,
                                     .chunk = 0,
                                     .microbatch = slot.microbatch,
                                     .freq_mhz = 900 + 30 * ((i + s) % 10),
                                     .mode = ExecutionMode::kSequential,
                                     .partitions = {},
                                     .time_s = 0.01 * (i + 1),
                                     .energy_j = 2.5 * (i + 1)};
      if (i % 2 == 0) {
        instruction.mode = ExecutionMode::kNanobatched;
        instruction.partitions = {{.type = "fwd_attn", .sms = 12, .slot = "rope_0"},
                                  {.type = "fwd_mlp", .sms = 6, .slot = "norm_0"}};
      }
      stage.instructions.push_back(instruction);
      ++i;
    }
    plan.stages.push_back(stage);
  }
  return plan;
}

// The message of the InputError that parsing `json` throws (fails the test if none).
std::string PlanError(const Json& json) {
  try {
    PlanFromJson(json);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected InputError for " << json.dump();
  return "";
}

std::filesystem::path TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("kareus_plan_file_test_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(PlanFile, RoundTripThroughJsonAndFile) {
  const Plan plan = MakePlan(3, 5);
  const Json json = ToJson(plan);
  EXPECT_EQ(json["format"], kPlanFormat);
  const Plan parsed = PlanFromJson(json);
  EXPECT_EQ(ToJson(parsed), json);  // every field survives

  const auto dir = TempDir("roundtrip");
  WritePlanFile(dir / "plan.json", plan);
  const Plan read = ReadPlanFile(dir / "plan.json");
  EXPECT_EQ(ToJson(read), json);
  ASSERT_EQ(read.stages.size(), 3u);
  EXPECT_EQ(read.stages[2].gpus, 8);
  EXPECT_EQ(read.stages[1].instructions[0].partitions[1].slot, "norm_0");
  EXPECT_EQ(read.workload["tp"], 8);
  std::filesystem::remove_all(dir);
}

// Files written before chunks existed (kareus.plan/1) read as the same plan; they may only be
// 1F1B, and a chunk field there is not part of the format (ignored).
TEST(PlanFile, ReadsVersion1Files) {
  Json json = ToJson(MakePlan(2, 3));
  json["format"] = "kareus.plan/1";
  for (Json& stage : json["stages"]) {
    for (Json& instruction : stage["instructions"]) instruction.erase("chunk");
  }
  const Plan plan = PlanFromJson(json);
  EXPECT_EQ(ToJson(plan), ToJson(MakePlan(2, 3)));
  Json gpipe = json;
  gpipe["schedule"] = "gpipe";
  EXPECT_THAT(PlanError(gpipe), HasSubstr("must be \"1f1b\" in a kareus.plan/1 file"));
}

// GPipe plans (version 2) follow GPipe's order: every forward, then every backward.
TEST(PlanFile, GPipePlansFollowTheirOrder) {
  Plan plan = MakePlan(2, 3);
  plan.schedule = ScheduleKind::kGPipe;
  for (PlannedStage& stage : plan.stages) {
    std::stable_partition(
        stage.instructions.begin(), stage.instructions.end(),
        [](const PlannedInstruction& i) { return i.kind == Direction::kForward; });
    std::stable_sort(stage.instructions.begin(), stage.instructions.end(),
                     [](const PlannedInstruction& a, const PlannedInstruction& b) {
                       return a.kind == b.kind && a.microbatch < b.microbatch;
                     });
  }
  const Plan parsed = PlanFromJson(ToJson(plan));
  EXPECT_EQ(parsed.schedule, ScheduleKind::kGPipe);
  EXPECT_EQ(ToJson(parsed)["schedule"], "gpipe");
  // The 1F1B order is not a GPipe order.
  Json wrong = ToJson(MakePlan(2, 3));
  wrong["schedule"] = "gpipe";
  EXPECT_THAT(PlanError(wrong), HasSubstr("GPipe order of stage 0 of 2 with 3 microbatches"));
}

TEST(PlanFile, OptionalFieldsTakeTheirDefaults) {
  Json json = ToJson(MakePlan(1, 2));
  json.erase("workload");
  json.erase("schedule");
  json.erase("iteration");
  for (Json& instruction : json["stages"][0]["instructions"]) {
    instruction.erase("mode");
    instruction.erase("time_s");
    instruction.erase("energy_j");
    instruction.erase("partitions");
  }
  json["stages"][0].erase("gpus");
  json["future_field"] = 42;  // ignored within the same version
  const Plan plan = PlanFromJson(json);
  EXPECT_EQ(plan.schedule, ScheduleKind::k1F1B);
  EXPECT_EQ(plan.stages[0].gpus, 1);
  EXPECT_EQ(plan.stages[0].instructions[0].mode, ExecutionMode::kSequential);
  EXPECT_TRUE(plan.stages[0].instructions[0].partitions.empty());
}

TEST(PlanFile, WrongFormatOrVersionIsRejectedByName) {
  Json json = ToJson(MakePlan(2, 2));
  json["format"] = "kareus.plan/3";
  EXPECT_THAT(PlanError(json), HasSubstr("unsupported version 3"));
  EXPECT_THAT(PlanError(json), HasSubstr("kareus.plan/2 and kareus.plan/1"));
  json["format"] = "kareus.frontier/1";
  EXPECT_THAT(PlanError(json), HasSubstr("expected kareus.plan/2"));
  json.erase("format");
  EXPECT_THAT(PlanError(json), HasSubstr("format = (missing): required field"));
  EXPECT_THAT(PlanError(Json::array()), HasSubstr("must be a JSON object"));
}

TEST(PlanFile, FieldRulesAreNamed) {
  const Json good = ToJson(MakePlan(2, 3));
  struct Case {
    std::string pointer;  // JSON pointer of the field to change
    Json value;
    std::string message;  // substring expected in the error
  };
  const std::vector<Case> cases{
      {"/num_microbatches", 0, "num_microbatches = 0: must be >= 1"},
      {"/num_microbatches", 2.5, "num_microbatches = 2.5: must be an integer"},
      {"/schedule", "zero-bubble",
       "schedule = zero-bubble: must be \"1f1b\", \"gpipe\" or \"interleaved-1f1b\""},
      {"/stages/0/instructions/1/chunk", -1, "stages[0].instructions[1].chunk = -1: must be >= 0"},
      {"/stages/0/instructions/1/chunk", 1, "expects forward 1 here"},
      {"/stages", Json::array(), "at least one stage"},
      {"/stages/1/stage", 0, "stages[1].stage = 0: stages must be numbered 0..1"},
      {"/stages/0/gpus", 0, "stages[0].gpus = 0: must be >= 1"},
      {"/stages/0/instructions/2/freq_mhz", 0, "stages[0].instructions[2].freq_mhz = 0"},
      {"/stages/0/instructions/2/freq_mhz", -1410, "must be a positive clock"},
      {"/stages/0/instructions/2/freq_mhz", "1410", "must be an integer"},
      {"/stages/0/instructions/2/freq_mhz", 1e12, "must be an integer"},
      {"/stages/0/instructions/1/kind", "recompute", "stages[0].instructions[1].kind = recompute"},
      {"/stages/0/instructions/1/mode", "overlap", "must be \"nanobatched\" or \"sequential\""},
      {"/stages/0/instructions/0/partitions/0/sms", 0, "partitions[0].sms = 0: must be >= 1"},
      {"/stages/0/instructions/0/partitions/1/type", "fwd_attn", "at most once"},
      {"/stages/0/instructions/0/partitions/0/slot", "", "slot = \"\": must not be empty"},
      {"/stages/0/instructions/0/microbatch", 3, "must be < num_microbatches (3)"},
      {"/stages/0/instructions/0/time_s", -1.0, "time_s = -1.0: must be a finite number >= 0"},
      {"/iteration/energy_j", "a lot", "iteration.energy_j = \"a lot\": must be a number"},
  };
  for (const Case& c : cases) {
    Json bad = good;
    bad[Json::json_pointer(c.pointer)] = c.value;
    EXPECT_THAT(PlanError(bad), HasSubstr(c.message)) << c.pointer;
  }
}

TEST(PlanFile, OrderAndCountsFollow1F1B) {
  const Json good = ToJson(MakePlan(2, 3));
  // Stage 0 of 2 with 3 microbatches: F0 F1 B0 F2 B1 B2. Swap F1 and B0.
  Json swapped = good;
  std::swap(swapped["stages"][0]["instructions"][1], swapped["stages"][0]["instructions"][2]);
  EXPECT_THAT(PlanError(swapped),
              HasSubstr("stages[0].instructions[1] = backward 0: 1F1B order of stage 0 of 2 "
                        "with 3 microbatches expects forward 1 here"));
  // One instruction too few.
  Json missing = good;
  missing["stages"][1]["instructions"].erase(5);
  EXPECT_THAT(PlanError(missing), HasSubstr("3 forwards and 2 backwards"));
  // A forward listed twice instead of a backward.
  Json twice = good;
  twice["stages"][1]["instructions"][1] = twice["stages"][1]["instructions"][0];
  EXPECT_THAT(PlanError(twice), HasSubstr("4 forwards and 2 backwards"));
}

TEST(PlanFile, GarbageAndTruncatedFilesAreInputErrorsNamingThePath) {
  const auto dir = TempDir("garbage");
  const std::string text = DumpJson(ToJson(MakePlan(2, 4)));
  WriteFileAtomic(dir / "truncated.json", text.substr(0, text.size() / 2));
  WriteFileAtomic(dir / "garbage.json",
                  "\x7f"
                  "ELF\x02\x01 not json at all");
  WriteFileAtomic(dir / "empty.json", "");
  Json wrong = ToJson(MakePlan(2, 4));
  wrong["format"] = "kareus.plan/0";
  WriteFileAtomic(dir / "old.json", DumpJson(wrong));
  for (const char* name : {"truncated.json", "garbage.json", "empty.json", "old.json"}) {
    try {
      ReadPlanFile(dir / name);
      ADD_FAILURE() << name << " was accepted";
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr((dir / name).string())) << name;
    }
  }
  EXPECT_THROW(ReadPlanFile(dir / "absent.json"), InputError);
  std::filesystem::remove_all(dir);
}

TEST(PlanFile, DeeplyNestedFilesAreInputErrors) {
  // A plan nested 100,000 levels deep crashed the message that showed the value.
  const auto path = std::filesystem::temp_directory_path() / "kareus_deep_plan.json";
  WriteFileAtomic(path, std::string(100000, '[') + std::string(100000, ']'));
  try {
    ReadPlanFile(path);
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than 64"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(PlanFile, WriteRefusesAnInvalidPlan) {
  Plan plan = MakePlan(2, 2);
  plan.stages[1].instructions[0].freq_mhz = 0;
  const auto dir = TempDir("write_invalid");
  EXPECT_THROW(WritePlanFile(dir / "plan.json", plan), InputError);
  EXPECT_FALSE(std::filesystem::exists(dir / "plan.json"));
  std::filesystem::remove_all(dir);
}

TEST(FrontierFile, RoundTripAndRules) {
  FrontierFile frontier{.method = "kareus", .workload = Json{{"model", "x"}}, .points = {}};
  frontier.points = {{.time_s = 1.0,
                      .energy_j = 900.0,
                      .static_energy_j = 300.0,
                      .plan_index = 0,
                      .plan_path = "plans/plan_00000.json"},
                     {.time_s = 1.2,
                      .energy_j = 800.0,
                      .static_energy_j = 320.0,
                      .plan_index = 1,
                      .plan_path = "plans/plan_00001.json"},
                     {.time_s = 1.5,
                      .energy_j = 790.0,
                      .static_energy_j = 350.0,
                      .plan_index = -1,
                      .plan_path = ""}};
  const auto dir = TempDir("frontier");
  WriteFrontierFile(dir / "frontier.json", frontier);
  const FrontierFile read = ReadFrontierFile(dir / "frontier.json");
  EXPECT_EQ(ToJson(read), ToJson(frontier));

  Json unsorted = ToJson(frontier);
  std::swap(unsorted["points"][0], unsorted["points"][2]);
  EXPECT_THROW(FrontierFromJson(unsorted), InputError);
  Json absolute = ToJson(frontier);
  absolute["points"][0]["plan_path"] = "/etc/passwd";
  EXPECT_THROW(FrontierFromJson(absolute), InputError);
  Json version = ToJson(frontier);
  version["format"] = "kareus.frontier/9";
  try {
    FrontierFromJson(version);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("unsupported version 9"));
  }
  EXPECT_THROW(PlanFromJson(ToJson(frontier)), InputError);  // a frontier is not a plan
  EXPECT_EQ(FrontierPlanPath(frontier.points[0]), "plans/plan_00000.json");
  EXPECT_EQ(FrontierPlanPath(frontier.points[2]), "");
  EXPECT_EQ(
      FrontierPlanPath(
          {.time_s = 1, .energy_j = 1, .static_energy_j = 0, .plan_index = 42, .plan_path = ""}),
      "plans/plan_00042.json");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kareus::plan
