// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/pareto/pareto.h"
#include "kareus/plan/compose.h"
#include "kareus/plan/perseus.h"
#include "kareus/plan/solve.h"

namespace kareus::plan {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("kareus_plan_solver_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<ClockInput> RandomClocks(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.5, 1.5);
  std::vector<ClockInput> clocks;
  for (int f : {1410, 1200, 1020}) {
    ClockInput clock{.freq_mhz = f,
                     .nonpartition_time_s = 0.002 * u(rng),
                     .nonpartition_energy_j = 0.5 * u(rng),
                     .has_sequential = true,
                     .sequential_time_s = 0.06 * u(rng),
                     .sequential_energy_j = 15.0 * u(rng)};
    for (const char* type : {"fwd_attn", "fwd_mlp", "fwd_trail"}) {
      PartitionTypeInput input{.type = type, .count = 1 + static_cast<int>(rng() % 4)};
      const int points = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < points; ++i) {
        input.frontier.push_back({.time_s = 0.004 * u(rng),
                                  .energy_j = 1.0 * u(rng),
                                  .sms = 3 * (1 + i),
                                  .slot = "norm_" + std::to_string(i)});
      }
      clock.partitions.push_back(input);
    }
    clocks.push_back(clock);
  }
  return clocks;
}

TEST(Compose, EqualsEnumerationThenEffectiveFilter) {
  std::mt19937_64 rng(11);
  const double p_static = 80.0;
  for (int trial = 0; trial < 100; ++trial) {
    const auto clocks = RandomClocks(rng);
    // Enumerate every per-type choice at every clock, plus the sequential runs.
    std::vector<pareto::Point> all;
    for (const ClockInput& clock : clocks) {
      const auto& p = clock.partitions;
      for (const auto& a : p[0].frontier) {
        for (const auto& b : p[1].frontier) {
          for (const auto& c : p[2].frontier) {
            const double t = clock.nonpartition_time_s + p[0].count * a.time_s +
                             p[1].count * b.time_s + p[2].count * c.time_s;
            const double e = clock.nonpartition_energy_j + p[0].count * a.energy_j +
                             p[1].count * b.energy_j + p[2].count * c.energy_j;
            all.push_back({t, e - p_static * t});
          }
        }
      }
      all.push_back({clock.sequential_time_s,
                     clock.sequential_energy_j - p_static * clock.sequential_time_s});
    }
    const auto expected = pareto::Filter(all);
    const ComposeResult result = ComposeInstruction(clocks, {.p_static_w = p_static});
    ASSERT_EQ(result.options.size(), expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const InstructionOption& o = result.options[i];
      EXPECT_NEAR(o.time_s, expected[i].time_s, 1e-12);
      EXPECT_NEAR(o.energy_j - p_static * o.time_s, expected[i].energy_j, 1e-9);
      // The knobs reproduce the option.
      const auto clock = std::find_if(clocks.begin(), clocks.end(), [&](const ClockInput& c) {
        return c.freq_mhz == o.freq_mhz;
      });
      ASSERT_NE(clock, clocks.end());
      if (o.mode == ExecutionMode::kSequential) {
        EXPECT_TRUE(o.partitions.empty());
        EXPECT_DOUBLE_EQ(o.time_s, clock->sequential_time_s);
        continue;
      }
      ASSERT_EQ(o.partitions.size(), 3u);
      double t = clock->nonpartition_time_s;
      for (std::size_t k = 0; k < 3; ++k) {
        const auto& type = clock->partitions[k];
        EXPECT_EQ(o.partitions[k].type, type.type);
        const auto point =
            std::find_if(type.frontier.begin(), type.frontier.end(), [&](const PartitionPoint& q) {
              return q.sms == o.partitions[k].sms && q.slot == o.partitions[k].slot;
            });
        ASSERT_NE(point, type.frontier.end());
        t += type.count * point->time_s;
      }
      EXPECT_NEAR(t, o.time_s, 1e-12);
    }
  }
}

TEST(Compose, EffectiveFilterKeepsSlowerCheaperToIdleOptions) {
  // B is slower and costs more total energy than A, but less effective energy: it must stay.
  ClockInput clock{.freq_mhz = 1000,
                   .has_sequential = true,
                   .sequential_time_s = 2.0,
                   .sequential_energy_j = 150.0};
  clock.partitions.push_back({.type = "x", .count = 1, .frontier = {{1.0, 100.0, 3, "norm_0"}}});
  const auto with_static = ComposeInstruction({clock}, {.p_static_w = 80.0});
  EXPECT_EQ(with_static.options.size(), 2u);
  const auto without = ComposeInstruction({clock}, {.p_static_w = 0.0});
  EXPECT_EQ(without.options.size(), 1u);
}

TEST(Compose, RejectsBadInput) {
  EXPECT_THROW(ComposeInstruction({}, {}), InputError);
  ClockInput clock{.freq_mhz = 1000};
  clock.partitions.push_back({.type = "x", .count = 0, .frontier = {{1.0, 1.0, 3, "norm_0"}}});
  EXPECT_THROW(ComposeInstruction({clock}, {}), InputError);
}

TEST(Sampling, MatchesPublishedWorkedExample) {
  // reference/kareus-official.md §4.7: N = 2496.
  EXPECT_EQ(SamplePlanIndices(2496),
            (std::vector<std::size_t>{324, 658, 992, 1326, 1660, 1827, 1994, 2161, 2328, 2495}));
  EXPECT_EQ(SamplePlanIndices(5), (std::vector<std::size_t>{0, 1, 2, 3, 4}));
  for (std::size_t n = 1; n < 400; ++n) {
    const auto kept = SamplePlanIndices(n);
    ASSERT_FALSE(kept.empty());
    EXPECT_EQ(kept.back(), n - 1);
    EXPECT_EQ(kept.size(), std::min<std::size_t>(n, 10)) << n;
    EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
    EXPECT_EQ(std::set<std::size_t>(kept.begin(), kept.end()).size(), kept.size()) << n;
  }
}

std::string ProfileCsv(int stages) {
  std::string text = "stage,instruction,frequency,time,energy\n";
  for (int s = 0; s < stages; ++s) {
    for (int f = 1410; f >= 900; f -= 30) {
      const double r = f / 1410.0;
      const double tf = (0.05 + 0.005 * s) / std::pow(r, 0.9);
      const double tb = 2.1 * tf;
      text += std::to_string(s) + ",forward," + std::to_string(f) + "," + std::to_string(tf) + "," +
              std::to_string((85 + 250 * std::pow(r, 2.5)) * tf) + "\n";
      text += std::to_string(s) + ",backward," + std::to_string(f) + "," + std::to_string(tb) +
              "," + std::to_string((85 + 260 * std::pow(r, 2.5)) * tb) + "\n";
    }
  }
  return text;
}

void WriteText(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

TEST(SolveProfile, WritesPlansFrontierAndSampledPlans) {
  const fs::path dir = TempDir("solve");
  WriteText(dir / "profile.csv", ProfileCsv(2));
  const auto summary = SolveProfile({.profile = dir / "profile.csv",
                                     .num_stages = 2,
                                     .num_microbatches = 8,
                                     .p_static_w = 85.0,
                                     .gpus_per_stage = 8,
                                     .out = dir / "out"});
  EXPECT_EQ(summary.solver.status, pipeline::Status::kReachedMinimumTime);
  ASSERT_GT(summary.points, 10u);
  const Plan plan = ReadPlanFile(dir / "out" / "plan.json");
  EXPECT_NEAR(plan.iteration.time_s, summary.fastest.time_s, 1e-9);
  EXPECT_EQ(plan.stages.size(), 2u);
  EXPECT_EQ(plan.stages[0].gpus, 8);
  const FrontierFile frontier = ReadFrontierFile(dir / "out" / "frontier.json");
  ASSERT_EQ(frontier.points.size(), summary.points);
  int with_plan = 0;
  for (const FrontierPoint& point : frontier.points) {
    EXPECT_NEAR(point.static_energy_j, 85.0 * 16 * point.time_s, 1e-6);
    if (point.plan_index < 0) continue;
    ++with_plan;
    const Plan sampled = ReadPlanFile(dir / "out" / FrontierPlanPath(point));
    EXPECT_NEAR(sampled.iteration.time_s, point.time_s, 1e-9);
    EXPECT_NEAR(sampled.iteration.energy_j, point.energy_j, 1e-6);
  }
  EXPECT_EQ(with_plan, 10);
  EXPECT_EQ(frontier.points.front().plan_index, static_cast<int>(summary.points) - 1);

  // Export both formats from the plans folder.
  const auto zeus = ExportPlans(
      {.plan = dir / "out" / "plans", .format = ExportFormat::kZeus, .out = dir / "zeus"});
  EXPECT_EQ(zeus.files.size(), 10u);
  char last[64];
  std::snprintf(last, sizeof(last), "freqs_pipeline_%05zu.py", summary.points - 1);
  EXPECT_TRUE(fs::exists(dir / "zeus" / last));
  const std::string text = ReadTextFile(dir / "zeus" / last);
  EXPECT_THAT(text, ::testing::StartsWith("[\n  [('forward', "));
  EXPECT_THAT(text, ::testing::HasSubstr("('backward', "));
  const auto scheds = ExportPlans({.plan = dir / "out" / "plan.json",
                                   .format = ExportFormat::kKareusScheds,
                                   .out = dir / "scheds"});
  ASSERT_EQ(scheds.files.size(), 1u);
  EXPECT_EQ(scheds.files[0].filename(), "scheds_pipeline_00000.py");
}

TEST(SolvePlans, GPipeSolveWritesGPipePlans) {
  // Plan files (kareus.plan/2) carry the schedule: a GPipe solve writes plans in GPipe order
  // that read back as GPipe plans.
  const fs::path dir = TempDir("gpipe");
  WriteText(dir / "profile.csv", ProfileCsv(2));
  PlanProblem problem{.schedule = ScheduleKind::kGPipe,
                      .num_microbatches = 4,
                      .stages = ReadPerseusProfile(dir / "profile.csv", 2)};
  const PlanResult result = SolvePlans(problem, {.p_static_w = 85.0});
  ASSERT_FALSE(result.solve.points.empty());
  const WrittenFiles files = WriteSolveOutputs(dir / "out", problem, result);
  const Plan plan = ReadPlanFile(files.plan);
  EXPECT_EQ(plan.schedule, ScheduleKind::kGPipe);
  for (const PlannedStage& stage : plan.stages) {
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(stage.instructions[i].kind, i < 4 ? Direction::kForward : Direction::kBackward);
      EXPECT_EQ(stage.instructions[i].microbatch, i % 4);
    }
  }
  fs::remove_all(dir);
}

TEST(Export, SchedsTextUsesPublishedConfigStrings) {
  Plan plan;
  plan.method = "kareus";
  plan.num_microbatches = 1;
  plan.stages.push_back({.stage = 0, .gpus = 8, .instructions = {}});
  plan.stages[0].instructions.push_back(
      {.kind = schedule::Direction::kForward,
       .microbatch = 0,
       .freq_mhz = 1410,
       .mode = ExecutionMode::kNanobatched,
       .partitions = {{"fwd_attn", 12, "rope_0"}, {"fwd_mlp", 6, "norm_0"}}});
  plan.stages[0].instructions.push_back({.kind = schedule::Direction::kBackward,
                                         .microbatch = 0,
                                         .freq_mhz = 1260,
                                         .partitions = {}});
  const std::string text = KareusSchedsText(plan);
  EXPECT_THAT(text,
              ::testing::HasSubstr(
                  "[('forward', 'rope_0-none-12-1024', 'norm_0-none-6-1024'), ('backward',)]"));
  EXPECT_THAT(ZeusFreqsText(plan), ::testing::HasSubstr("[('forward', 1410), ('backward', 1260)]"));
}

TEST(Export, PythonStringLiteralIsData) {
  EXPECT_EQ(PythonStringLiteral("rope_0-none-12-1024"), "'rope_0-none-12-1024'");
  EXPECT_EQ(PythonStringLiteral("a'b\\c\nd"), "'a\\x27b\\x5cc\\x0ad'");
  EXPECT_EQ(PythonStringLiteral("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
            "'caf\\xe9 \\u20ac \\U0001f600'");
  EXPECT_EQ(PythonStringLiteral(std::string("\0\xFF", 2)), "'\\x00\\xff'");
  // Whatever the method and slot hold, the texts stay one literal list and one comment line.
  Plan plan;
  plan.method = "x')\nimport os\n#";
  plan.num_microbatches = 1;
  plan.stages.push_back({.stage = 0, .gpus = 1, .instructions = {}});
  plan.stages[0].instructions.push_back({.kind = schedule::Direction::kForward,
                                         .microbatch = 0,
                                         .freq_mhz = 1410,
                                         .mode = ExecutionMode::kNanobatched,
                                         .partitions = {{"fwd_attn", 3, "s')\nimport os #"}}});
  // [ / stage / ] / cost comment; the Zeus text also says its clocks are for a nanobatched plan.
  const std::string scheds = KareusSchedsText(plan), zeus = ZeusFreqsText(plan);
  EXPECT_EQ(std::count(scheds.begin(), scheds.end(), '\n'), 4) << scheds;
  EXPECT_EQ(std::count(zeus.begin(), zeus.end(), '\n'), 5) << zeus;
  EXPECT_THAT(zeus,
              ::testing::HasSubstr("\n# Clocks only: 1 instructions were planned nanobatched"));
  for (const std::string& text : {scheds, zeus}) {
    EXPECT_EQ(text.find("\nimport"), std::string::npos) << text;
  }
}

TEST(Export, ZeusFilesOfSequentialPlansCarryNoClocksOnlyNote) {
  Plan plan;
  plan.method = "perseus";
  plan.num_microbatches = 1;
  plan.stages.push_back({.stage = 0, .gpus = 1, .instructions = {}});
  plan.stages[0].instructions.push_back(
      {.kind = schedule::Direction::kForward, .microbatch = 0, .freq_mhz = 1410, .partitions = {}});
  plan.stages[0].instructions.push_back({.kind = schedule::Direction::kBackward,
                                         .microbatch = 0,
                                         .freq_mhz = 1260,
                                         .partitions = {}});
  EXPECT_EQ(NanobatchedInstructions(plan), 0);
  EXPECT_FALSE(SequentialJobRefusal(plan, "p.json").has_value());
  EXPECT_THAT(ZeusFreqsText(plan), ::testing::Not(::testing::HasSubstr("Clocks only")));
  plan.stages[0].instructions[1].mode = ExecutionMode::kNanobatched;
  EXPECT_EQ(NanobatchedInstructions(plan), 1);
  const auto refusal = SequentialJobRefusal(plan, "p.json");
  ASSERT_TRUE(refusal.has_value());
  EXPECT_THAT(*refusal, ::testing::HasSubstr("p.json: 1 of the 2 instructions"));
  EXPECT_THAT(*refusal, ::testing::HasSubstr("kareus.torch"));
  EXPECT_THAT(*refusal, ::testing::HasSubstr("methods/perseus/plan.json"));
  EXPECT_THAT(*refusal, ::testing::HasSubstr("--clocks-only"));
}

TEST(SolvePlans, ProgressIsReportedAfterEveryStep) {
  const fs::path dir = TempDir("progress");
  WriteText(dir / "profile.csv", ProfileCsv(2));
  PlanProblem problem{.num_microbatches = 4, .stages = ReadPerseusProfile(dir / "profile.csv", 2)};
  std::vector<pipeline::SolveProgress> seen;
  const PlanResult result = SolvePlans(
      problem, {.p_static_w = 85.0,
                .progress = [&](const pipeline::SolveProgress& p) { seen.push_back(p); }});
  ASSERT_EQ(static_cast<int64_t>(seen.size()), result.solve.summary.steps);
  ASSERT_FALSE(seen.empty());
  for (std::size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].step, static_cast<int64_t>(i) + 1);
    EXPECT_GE(seen[i].time_now_s, seen[i].time_fastest_s - 1e-9);
    EXPECT_LT(seen[i].time_now_s, seen[i].time_slowest_s);
    if (i > 0) {
      EXPECT_LT(seen[i].time_now_s, seen[i - 1].time_now_s);
    }
  }
}

TEST(SolveProfile, ProfileBoundsAreInputErrors) {
  const std::string header = "stage,instruction,frequency,time,energy\n";
  EXPECT_THROW(PerseusProfileFromText(header + "0,forward,1410,1e7,3\n", "p.csv", 1), InputError);
  EXPECT_THROW(PerseusProfileFromText(header + "0,forward,1410,0.1,1e308\n", "p.csv", 1),
               InputError);
  EXPECT_THROW(PerseusProfileFromText(header + "0,forward,1410,0.1,3\xFF\n", "p.csv", 1),
               InputError);
  EXPECT_THROW(PerseusProfileFromText(header, "p.csv", 5000), InputError);
  const auto stages =
      PerseusProfileFromText(header + "0,forward,1410,0.1,3\n0,backward,1410,0.2,6\n", "p.csv", 1);
  ASSERT_EQ(stages.size(), 1u);
  EXPECT_EQ(stages[0].backward.at(0).freq_mhz, 1410);
}

struct BadCsv {
  std::string name;
  std::string text;
  std::string expected;  // substring of the error message
};

TEST(SolveProfile, BadCsvNamesTheLineAndWritesNothing) {
  const std::string header = "stage,instruction,frequency,time,energy\n";
  const std::string good = ProfileCsv(2);
  const std::vector<BadCsv> cases = {
      {"short_row", good + "1,forward,1410\n", ":74"},
      {"non_numeric", good + "1,forward,1410,fast,3.0\n", ":74 time"},
      {"negative_energy", good + "0,backward,1410,0.1,-3\n", ":74 energy"},
      {"zero_time", good + "0,backward,1410,0,3\n", ":74 time"},
      {"bad_instruction", good + "0,recompute,1410,0.1,3\n", ":74 instruction"},
      {"stage_out_of_range", good + "2,forward,1410,0.1,3\n", ":74 stage"},
      {"fractional_frequency", good + "0,forward,1410.5,0.1,3\n", ":74 frequency"},
      {"nan", good + "0,forward,1410,nan,3\n", ":74 time"},
      {"missing_stage", ProfileCsv(1), "stage 1"},
      {"missing_backward",
       header + "0,forward,1410,0.1,3\n1,forward,1410,0.1,3\n"
                "1,backward,1410,0.1,3\n",
       "no backward rows"},
      {"bad_header", "stage,instr,frequency,time,energy\n0,forward,1410,0.1,3\n", ":1 header"},
      // 3 J in 0.1 s is 30 W per GPU, below the 85 W static power.
      {"below_static_power", good + "1,backward,1200,0.1,3\n",
       "stage 1 backward at 1200 MHz: energy = 3 J: must be at least the static power x time = "
       "85 W x 0.1 s = 8.5 J"},
  };
  for (const BadCsv& c : cases) {
    const fs::path dir = TempDir(c.name);
    WriteText(dir / "profile.csv", c.text);
    try {
      SolveProfile({.profile = dir / "profile.csv",
                    .num_stages = 2,
                    .num_microbatches = 4,
                    .p_static_w = 85.0,
                    .out = dir / "out"});
      ADD_FAILURE() << c.name << ": no error";
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(c.expected)) << c.name;
    }
    EXPECT_FALSE(fs::exists(dir / "out")) << c.name;
  }
}

}  // namespace
}  // namespace kareus::plan
