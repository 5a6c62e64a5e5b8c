// SPDX-License-Identifier: Apache-2.0
#include "kareus/plan/perseus.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <regex>

#include <fmt/format.h>

#include "kareus/common/csv.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/progress.h"
#include "kareus/plan/check.h"

namespace kareus::plan {
namespace {

// Bounds of a solve's inputs. Far above real jobs (Perseus profiles have one row per clock, a
// few hundred at most; instructions last milliseconds to seconds and cost kilojoules; a GPU's
// static power is ~100 W), and low enough that no sum the solver forms (energy x GPUs x
// instructions, time / quantum) overflows a double's exact range or an int64 quantum count.
constexpr int kMaxStages = 1024;
constexpr int kMaxMicrobatches = 4096;
constexpr int64_t kMaxPipelineInstructions = 131072;  // 2 x stages x microbatches: DAG nodes
constexpr int kMaxGpusPerStage = 1048576;
constexpr double kMaxTimeS = 1e6;     // one instruction: 11.6 days
constexpr double kMaxEnergyJ = 1e12;  // one instruction on one GPU
constexpr double kMaxStaticPowerW = 1e5;
constexpr double kMinUnitTimeS = 1e-6;
constexpr double kMaxUnitTimeS = 3600.0;
constexpr std::size_t kMaxRowsPerInstruction = 100000;  // per stage and direction

double ParseNumber(const std::string& text, const std::string& field) {
  const CsvNumber number = ParseCsvNumber(text);
  if (number.status == CsvNumber::Status::kNotANumber) {
    ThrowInput(field, "\"" + text + "\"", "must be a number");
  }
  if (number.status == CsvNumber::Status::kNotFinite) ThrowInput(field, text, "must be finite");
  return number.value;
}

}  // namespace

std::vector<StageOptions> ReadPerseusProfile(const std::filesystem::path& csv, int num_stages) {
  if (num_stages < 1 || num_stages > kMaxStages) {
    ThrowInput("stages", Describe(num_stages), fmt::format("must be in [1, {}]", kMaxStages));
  }
  return PerseusProfileFromText(ReadTextFile(csv), csv.filename().string(), num_stages);
}

std::vector<StageOptions> PerseusProfileFromText(std::string_view csv_text, const std::string& file,
                                                 int num_stages) {
  if (num_stages < 1 || num_stages > kMaxStages) {
    ThrowInput("stages", Describe(num_stages), fmt::format("must be in [1, {}]", kMaxStages));
  }
  // Fields trimmed, rows of spaces skipped, every row as long as the header (the first row).
  CsvReader reader(csv_text, {.trim = true, .require_utf8 = true, .fixed_field_count = true});
  const auto fail = [&](const CsvError& error) {
    if (error.kind == CsvError::Kind::kNotUtf8) {
      ThrowInput(file, "(bytes that are not UTF-8)", "a Perseus profile is UTF-8 text");
    }
    if (error.kind == CsvError::Kind::kFieldCount) {
      ThrowInput(file + ":" + std::to_string(error.line) + " row",
                 "\"" + std::string(CsvTrimmed(error.raw)) + "\"",
                 "expected " + std::to_string(error.expected) + " comma-separated fields, got " +
                     std::to_string(error.fields));
    }
    throw InputError(error.Message(file));
  };
  CsvRow row;
  if (!reader.Next(&row)) {
    if (reader.error()) fail(*reader.error());
    ThrowInput(file, "(empty)", "a Perseus profile needs a header line");
  }
  const std::vector<std::string> header = row.fields;
  const std::vector<std::string> required{"stage", "instruction", "frequency", "time", "energy"};
  std::vector<std::size_t> column;
  for (const std::string& name : required) {
    const auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end()) {
      ThrowInput(
          file + ":" + std::to_string(row.line) + " header", std::string(CsvTrimmed(row.raw)),
          "must name the columns stage,instruction,frequency,time,energy (missing " + name + ")");
    }
    column.push_back(static_cast<std::size_t>(it - header.begin()));
  }
  std::vector<StageOptions> stages(num_stages);
  while (reader.Next(&row)) {
    const std::string where = file + ":" + std::to_string(row.line);
    const std::vector<std::string>& fields = row.fields;
    const double stage_value = ParseNumber(fields[column[0]], where + " stage");
    if (stage_value != std::floor(stage_value) || stage_value < 0 || stage_value >= num_stages) {
      ThrowInput(where + " stage", fields[column[0]],
                 "must be an integer in [0, " + std::to_string(num_stages) + ") (--stages)");
    }
    const std::string& instruction = fields[column[1]];
    if (instruction != "forward" && instruction != "backward") {
      ThrowInput(where + " instruction", "\"" + instruction + "\"", "must be forward or backward");
    }
    const double freq = ParseNumber(fields[column[2]], where + " frequency");
    if (freq != std::floor(freq) || freq <= 0 || freq > 1e6) {
      ThrowInput(where + " frequency", fields[column[2]], "must be a positive integer (MHz)");
    }
    const double time_s = ParseNumber(fields[column[3]], where + " time");
    if (time_s <= 0 || time_s > kMaxTimeS) {
      ThrowInput(where + " time", fields[column[3]],
                 fmt::format("must be > 0 and at most {:g} (seconds per instruction)", kMaxTimeS));
    }
    const double energy_j = ParseNumber(fields[column[4]], where + " energy");
    if (energy_j < 0 || energy_j > kMaxEnergyJ) {
      ThrowInput(where + " energy", fields[column[4]],
                 fmt::format("must be >= 0 and at most {:g} (joules per instruction and GPU)",
                             kMaxEnergyJ));
    }
    StageOptions& stage = stages[static_cast<int>(stage_value)];
    auto& options = instruction == "forward" ? stage.forward : stage.backward;
    if (options.size() >= kMaxRowsPerInstruction) {
      ThrowInput(where + " row", instruction,
                 fmt::format("at most {} rows per stage and instruction", kMaxRowsPerInstruction));
    }
    options.push_back({.time_s = time_s,
                       .energy_j = energy_j,
                       .freq_mhz = static_cast<int>(freq),
                       .mode = ExecutionMode::kSequential});
  }
  if (reader.error()) fail(*reader.error());
  for (int s = 0; s < num_stages; ++s) {
    for (const char* kind : {"forward", "backward"}) {
      const auto& list = std::string(kind) == "forward" ? stages[s].forward : stages[s].backward;
      if (list.empty()) {
        ThrowInput(file + " stage " + std::to_string(s), std::string("no ") + kind + " rows",
                   "every stage in [0, --stages) needs forward and backward rows");
      }
    }
  }
  return stages;
}

std::optional<OptionError> SolveProfileOptions::Validate() const {
  if (num_stages < 1 || num_stages > kMaxStages) {
    return OptionError{"num_stages", Describe(num_stages),
                       fmt::format("must be in [1, {}]", kMaxStages)};
  }
  if (num_microbatches < 1 || num_microbatches > kMaxMicrobatches) {
    return OptionError{"num_microbatches", Describe(num_microbatches),
                       fmt::format("must be in [1, {}]", kMaxMicrobatches)};
  }
  if (2 * int64_t{num_stages} * num_microbatches > kMaxPipelineInstructions) {
    return OptionError{"num_microbatches", Describe(num_microbatches),
                       fmt::format("2 x stages ({}) x microbatches must be at most {} pipeline "
                                   "instructions",
                                   num_stages, kMaxPipelineInstructions)};
  }
  if (!(p_static_w >= 0) || !(p_static_w <= kMaxStaticPowerW)) {
    return OptionError{"p_static_w", Describe(p_static_w),
                       fmt::format("must be in [0, {:g}] (W per GPU)", kMaxStaticPowerW)};
  }
  if (!(unit_time_s >= kMinUnitTimeS) || !(unit_time_s <= kMaxUnitTimeS)) {
    return OptionError{"unit_time_s", Describe(unit_time_s),
                       "must be between 1 microsecond and 1 hour"};
  }
  if (gpus_per_stage < 1 || gpus_per_stage > kMaxGpusPerStage) {
    return OptionError{"gpus_per_stage", Describe(gpus_per_stage),
                       fmt::format("must be in [1, {}]", kMaxGpusPerStage)};
  }
  if (out.empty()) return OptionError{"out", "\"\"", "an output folder is required"};
  if (!(deadline_s >= 0) || !std::isfinite(deadline_s)) {
    return OptionError{"deadline_s", Describe(deadline_s),
                       "must be a finite number of seconds > 0 (0: the whole frontier)"};
  }
  if (schedule == ScheduleKind::kInterleaved1F1B) {
    return OptionError{"schedule", kareus::schedule::ToString(schedule),
                       "must be 1f1b or gpipe (a Perseus profile has one option list per stage, "
                       "no model chunks)"};
  }
  return std::nullopt;
}

std::optional<OptionError> ExportOptions::Validate() const {
  if (plan.empty()) return OptionError{"plan", "\"\"", "a plan file or folder is required"};
  if (out.empty()) return OptionError{"out", "\"\"", "an output folder is required"};
  if (clocks_only && format != ExportFormat::kZeus) {
    return OptionError{"clocks_only", "true",
                       "applies to --format zeus only (kareus-scheds files carry the partitions' "
                       "knobs as well as the clocks)"};
  }
  return std::nullopt;
}

SolveProfileSummary SolveProfile(const SolveProfileOptions& options) {
  ThrowIfInvalid(options.Validate());
  // Refuses a folder Kareus did not write before anything runs; the outputs appear at once.
  OutputFolder folder(options.out);
  PlanProblem problem{.method = options.method,
                      .schedule = options.schedule,
                      .num_microbatches = options.num_microbatches,
                      .stages = ReadPerseusProfile(options.profile, options.num_stages)};
  for (StageOptions& stage : problem.stages) stage.gpus = options.gpus_per_stage;
  // A row's energy per GPU includes the static power over its time (plans split it into static
  // and dynamic energy): one below static power x time is refused by name, not later as a
  // negative dynamic energy of the iteration.
  for (std::size_t s = 0; s < problem.stages.size(); ++s) {
    for (const bool forward : {true, false}) {
      for (const InstructionOption& option :
           forward ? problem.stages[s].forward : problem.stages[s].backward) {
        const double static_j = options.p_static_w * option.time_s;
        if (option.energy_j >= static_j * (1.0 - 1e-9)) continue;
        ThrowInput(fmt::format("{} stage {} {} at {} MHz: energy",
                               ShownValue(options.profile.filename().string()), s,
                               forward ? "forward" : "backward", option.freq_mhz),
                   fmt::format("{:g} J", option.energy_j),
                   fmt::format("must be at least the static power x time = {:g} W x {:g} s = "
                               "{:g} J (energy per GPU includes static power; check "
                               "--static-power)",
                               options.p_static_w, option.time_s, static_j));
      }
    }
  }
  problem.workload = {{"profile", ShownValue(options.profile.filename().string(), 255)},
                      {"stages", options.num_stages},
                      {"microbatches", options.num_microbatches},
                      {"gpus_per_stage", options.gpus_per_stage},
                      {"schedule", schedule::ToString(options.schedule)},
                      {"static_power_w", options.p_static_w},
                      {"unit_time_s", options.unit_time_s}};
  // A long solve shows where it is (on a terminal): steps taken and the iteration time left to
  // shorten, from the slowest schedule to the fastest.
  Progress progress(/*enabled=*/true);
  std::function<void(const pipeline::SolveProgress&)> show;
  if (progress.active())
    show = [&progress](const pipeline::SolveProgress& p) {
      const double range = p.time_slowest_s - p.time_fastest_s;
      const double done = range > 0 ? (p.time_slowest_s - p.time_now_s) / range : 1.0;
      progress.Update(
          fmt::format("solve: step {}, iteration {:.4f} s of {:.4f}..{:.4f} s ({:.0f} %)", p.step,
                      p.time_now_s, p.time_fastest_s, p.time_slowest_s, 100.0 * done));
    };
  const PlanResult result = SolvePlans(problem, {.unit_time_s = options.unit_time_s,
                                                 .p_static_w = options.p_static_w,
                                                 .deadline_s = options.deadline_s,
                                                 .progress = show});
  progress.Finish();
  if (result.solve.summary.status == pipeline::Status::kInvalidInput) {
    throw InputError("profile " + options.profile.string() +
                     ": the solver refused it: " + result.solve.summary.message +
                     " (the profile's time column and --unit-time set the quanta)");
  }
  if (result.solve.summary.status == pipeline::Status::kDeadlineInfeasible) {
    ThrowInput("deadline", Describe(options.deadline_s),
               "must be >= the minimum iteration time " +
                   Describe(result.solve.summary.min_time_s) + " s");
  }
  if (result.solve.points.empty()) {  // not expected within the bounds above; never a crash
    throw InputError(
        fmt::format("profile {}: the solve produced no frontier point ({}: {}); "
                    "check the profile's time and energy columns, --static-power "
                    "and --gpus-per-stage",
                    options.profile.string(), pipeline::ToString(result.solve.summary.status),
                    result.solve.summary.message));
  }
  SolveProfileSummary summary;
  summary.solver = result.solve.summary;
  summary.points = result.solve.points.size();
  if (result.solve.points.empty()) {
    ThrowInput("profile", options.profile.string(),
               std::string("the solver returned no plan (") +
                   pipeline::ToString(result.solve.summary.status) + ": " +
                   result.solve.summary.message + ")");
  }
  summary.fastest = result.solve.points.back().cost;
  summary.cheapest = result.solve.points.front().cost;
  if (options.deadline_s > 0) {
    // One file, validated by WritePlanFile before it is written, inside the staging folder.
    WritePlanFile(folder.staging() / "plan.json",
                  BuildPlan(problem, result.solve, result.solve.points.size() - 1));
    folder.Commit();
    summary.files.plan = options.out / "plan.json";
    return summary;
  }
  const WrittenFiles staged = WriteSolveOutputs(folder.staging(), problem, result);
  folder.Commit();
  // The files as they are now, in the output folder.
  const auto moved = [&](const std::filesystem::path& path) {
    return options.out / path.lexically_relative(folder.staging());
  };
  summary.files.plan = moved(staged.plan);
  summary.files.frontier = moved(staged.frontier);
  for (const auto& path : staged.plans) summary.files.plans.push_back(moved(path));
  return summary;
}

const char* ToString(ExportFormat format) {
  return format == ExportFormat::kZeus ? "zeus" : "kareus-scheds";
}

ExportFormat ExportFormatFromString(const std::string& text) {
  if (text == "zeus") return ExportFormat::kZeus;
  if (text == "kareus-scheds") return ExportFormat::kKareusScheds;
  ThrowInput("format", text, "must be zeus or kareus-scheds");
}

namespace {

std::string CostComment(const Plan& plan) {
  // The method goes through the literal escaping too: a newline in it must not end the comment.
  return fmt::format(
      "# Kareus plan ({}): iteration time {:.6f} s, energy {:.3f} J over all GPUs (static "
      "{:.3f} J)\n",
      PythonStringLiteral(plan.method), plan.iteration.time_s, plan.iteration.energy_j,
      plan.iteration.static_energy_j);
}

// The Python list literal both formats share: one list per stage of one tuple per
// instruction in schedule order, then the cost comment.
template <typename TupleText>
std::string StageListsText(const Plan& plan, TupleText tuple_text) {
  std::string out = "[\n";
  for (const PlannedStage& stage : plan.stages) {
    out += "  [";
    for (std::size_t i = 0; i < stage.instructions.size(); ++i) {
      if (i > 0) out += ", ";
      out += tuple_text(stage.instructions[i]);
    }
    out += "],\n";
  }
  return out + "]\n" + CostComment(plan);
}

}  // namespace

std::string PythonStringLiteral(std::string_view text) {
  std::string out = "'";
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F && c != '\'' && c != '\\') {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A code point (plan strings are UTF-8: the JSON parser checked them); a stray byte is
    // written as the code point of its value, still inside the literal.
    uint32_t code = c;
    std::size_t length = 1;
    if (c >= 0xC0 && c < 0xE0) {
      length = 2;
      code = c & 0x1F;
    } else if (c >= 0xE0 && c < 0xF0) {
      length = 3;
      code = c & 0x0F;
    } else if (c >= 0xF0 && c < 0xF8) {
      length = 4;
      code = c & 0x07;
    }
    bool whole = i + length <= text.size();
    for (std::size_t k = 1; whole && k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      whole = (next & 0xC0) == 0x80;
      code = (code << 6) | (next & 0x3F);
    }
    if (!whole || code > 0x10FFFF) {
      length = 1;
      code = c;
    }
    out += code <= 0xFF     ? fmt::format("\\x{:02x}", code)
           : code <= 0xFFFF ? fmt::format("\\u{:04x}", code)
                            : fmt::format("\\U{:08x}", code);
    i += length;
  }
  return out + "'";
}

std::string ZeusFreqsText(const Plan& plan) {
  std::string text = StageListsText(plan, [](const PlannedInstruction& inst) {
    return fmt::format("({}, {})", PythonStringLiteral(ToString(inst.kind)), inst.freq_mhz);
  });
  if (const int nanobatched = NanobatchedInstructions(plan); nanobatched > 0) {
    text += fmt::format(
        "# Clocks only: {} instructions were planned nanobatched (Kareus's execution, "
        "kareus.torch); the iteration time and energy above assume that execution, not a job "
        "that runs them sequentially with these clocks\n",
        nanobatched);
  }
  return text;
}

std::string KareusSchedsText(const Plan& plan) {
  return StageListsText(plan, [](const PlannedInstruction& inst) {
    std::string out = fmt::format("({}", PythonStringLiteral(ToString(inst.kind)));
    if (inst.mode == ExecutionMode::kSequential || inst.partitions.empty()) return out + ",)";
    for (const PartitionKnobs& knobs : inst.partitions) {
      // The published config string: start-end-sms-block (kareus-official.md §4.4, §5.1).
      out += fmt::format(
          ", {}", PythonStringLiteral(fmt::format("{}-none-{}-1024", knobs.slot, knobs.sms)));
    }
    return out + ")";
  });
}

ExportSummary ExportPlans(const ExportOptions& options) {
  namespace fs = std::filesystem;
  ThrowIfInvalid(options.Validate());
  OutputFolder folder(options.out);
  std::vector<fs::path> inputs;
  if (fs::is_directory(options.plan)) {
    for (const auto& entry : fs::directory_iterator(options.plan)) {
      if (entry.is_regular_file() && entry.path().extension() == ".json") {
        inputs.push_back(entry.path());
      }
    }
    std::sort(inputs.begin(), inputs.end());
    if (inputs.empty()) ThrowInput("plan", options.plan.string(), "folder holds no .json plans");
  } else {
    inputs.push_back(options.plan);
  }
  const std::regex numbered(R"(plan_(\d+)\.json)");
  std::vector<std::pair<fs::path, std::string>> outputs;
  for (const fs::path& input : inputs) {
    const Plan plan = ReadCheckedPlanFile(input);
    if (options.format == ExportFormat::kZeus && !options.clocks_only) {
      if (const auto refusal = SequentialJobRefusal(plan, input.string()))
        throw InputError(*refusal);
    }
    std::smatch match;
    const std::string name = input.filename().string();
    int64_t index = 0;
    if (std::regex_match(name, match, numbered)) {
      const std::string digits = match[1];
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
      if (ec != std::errc() || end != digits.data() + digits.size() || index > INT32_MAX) {
        ThrowInput("plan", input.string(),
                   "the index in plan_NNNNN.json must be an integer of at most 2147483647");
      }
    }
    const std::string file = fmt::format(
        "{}_pipeline_{:05d}.py", options.format == ExportFormat::kZeus ? "freqs" : "scheds", index);
    outputs.emplace_back(
        file, options.format == ExportFormat::kZeus ? ZeusFreqsText(plan) : KareusSchedsText(plan));
  }
  std::sort(outputs.begin(), outputs.end());
  for (std::size_t i = 1; i < outputs.size(); ++i) {
    if (outputs[i].first == outputs[i - 1].first) {
      ThrowInput("plan", options.plan.string(),
                 "two plans map to " + outputs[i].first.string() +
                     " (plan_1.json and plan_00001.json, say); export them separately");
    }
  }
  ExportSummary summary;
  for (const auto& [file, text] : outputs) {
    WriteFileAtomic(folder.staging() / file, text);
    summary.files.push_back(options.out / file);
  }
  folder.Commit();
  return summary;
}

}  // namespace kareus::plan
