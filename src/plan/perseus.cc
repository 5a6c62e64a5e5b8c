// SPDX-License-Identifier: Apache-2.0
#include "kareus/plan/perseus.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <regex>
#include <sstream>

#include "kareus/common/error.h"
#include "kareus/common/io.h"

namespace kareus::plan {
namespace {

std::string Trim(std::string text) {
  const auto not_space = [](unsigned char c) { return !std::isspace(c); };
  text.erase(text.begin(), std::find_if(text.begin(), text.end(), not_space));
  text.erase(std::find_if(text.rbegin(), text.rend(), not_space).base(), text.end());
  return text;
}

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, ',')) fields.push_back(Trim(field));
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

double ParseNumber(const std::string& text, const std::string& field) {
  double value = 0.0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    ThrowInput(field, "\"" + text + "\"", "must be a number");
  }
  if (!std::isfinite(value)) ThrowInput(field, text, "must be finite");
  return value;
}

}  // namespace

std::vector<StageOptions> ReadPerseusProfile(const std::filesystem::path& csv, int num_stages) {
  if (num_stages < 1) ThrowInput("stages", Describe(num_stages), "must be >= 1");
  const std::string text = ReadTextFile(csv);
  std::istringstream in(text);
  std::string line;
  int line_number = 0;
  std::vector<std::string> header;
  while (header.empty() && std::getline(in, line)) {
    ++line_number;
    if (!Trim(line).empty()) header = SplitCsv(Trim(line));
  }
  const std::string file = csv.filename().string();
  if (header.empty()) ThrowInput(file, "(empty)", "a Perseus profile needs a header line");
  const std::vector<std::string> required{"stage", "instruction", "frequency", "time", "energy"};
  std::vector<std::size_t> column;
  for (const std::string& name : required) {
    const auto it = std::find(header.begin(), header.end(), name);
    if (it == header.end()) {
      ThrowInput(file + ":" + std::to_string(line_number) + " header", Trim(line),
                 "must name the columns stage,instruction,frequency,time,energy (missing " +
                     name + ")");
    }
    column.push_back(static_cast<std::size_t>(it - header.begin()));
  }
  std::vector<StageOptions> stages(num_stages);
  while (std::getline(in, line)) {
    ++line_number;
    const std::string trimmed = Trim(line);
    if (trimmed.empty()) continue;
    const std::string where = file + ":" + std::to_string(line_number);
    const std::vector<std::string> fields = SplitCsv(trimmed);
    if (fields.size() != header.size()) {
      ThrowInput(where + " row", "\"" + trimmed + "\"",
                 "expected " + std::to_string(header.size()) + " comma-separated fields, got " +
                     std::to_string(fields.size()));
    }
    const double stage_value = ParseNumber(fields[column[0]], where + " stage");
    if (stage_value != std::floor(stage_value) || stage_value < 0 || stage_value >= num_stages) {
      ThrowInput(where + " stage", fields[column[0]],
                 "must be an integer in [0, " + std::to_string(num_stages) + ") (--stages)");
    }
    const std::string& instruction = fields[column[1]];
    if (instruction != "forward" && instruction != "backward") {
      ThrowInput(where + " instruction", "\"" + instruction + "\"",
                 "must be forward or backward");
    }
    const double freq = ParseNumber(fields[column[2]], where + " frequency");
    if (freq != std::floor(freq) || freq <= 0 || freq > 1e6) {
      ThrowInput(where + " frequency", fields[column[2]], "must be a positive integer (MHz)");
    }
    const double time_s = ParseNumber(fields[column[3]], where + " time");
    if (time_s <= 0) ThrowInput(where + " time", fields[column[3]], "must be > 0 (seconds)");
    const double energy_j = ParseNumber(fields[column[4]], where + " energy");
    if (energy_j < 0) ThrowInput(where + " energy", fields[column[4]], "must be >= 0 (joules)");
    StageOptions& stage = stages[static_cast<int>(stage_value)];
    (instruction == "forward" ? stage.forward : stage.backward)
        .push_back({.time_s = time_s,
                    .energy_j = energy_j,
                    .freq_mhz = static_cast<int>(freq),
                    .mode = ExecutionMode::kSequential});
  }
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
  if (num_stages < 1) return OptionError{"num_stages", Describe(num_stages), "must be >= 1"};
  if (num_microbatches < 1) return OptionError{"num_microbatches", Describe(num_microbatches), "must be >= 1"};
  if (!(p_static_w >= 0) || !std::isfinite(p_static_w)) {
    return OptionError{"p_static_w", Describe(p_static_w), "must be a finite number >= 0 (W)"};
  }
  if (!(unit_time_s > 0) || !std::isfinite(unit_time_s)) {
    return OptionError{"unit_time_s", Describe(unit_time_s), "must be a finite number > 0 (s)"};
  }
  if (gpus_per_stage < 1) return OptionError{"gpus_per_stage", Describe(gpus_per_stage), "must be >= 1"};
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
  return std::nullopt;
}

SolveProfileSummary SolveProfile(const SolveProfileOptions& options) {
  ThrowIfInvalid(options.Validate());
  PlanProblem problem{.method = options.method,
                      .schedule = options.schedule,
                      .num_microbatches = options.num_microbatches,
                      .stages = ReadPerseusProfile(options.profile, options.num_stages)};
  for (StageOptions& stage : problem.stages) stage.gpus = options.gpus_per_stage;
  problem.workload = {{"profile", options.profile.filename().string()},
                      {"stages", options.num_stages},
                      {"microbatches", options.num_microbatches},
                      {"gpus_per_stage", options.gpus_per_stage},
                      {"schedule", schedule::ToString(options.schedule)},
                      {"static_power_w", options.p_static_w},
                      {"unit_time_s", options.unit_time_s}};
  const PlanResult result =
      SolvePlans(problem, {.unit_time_s = options.unit_time_s,
                           .p_static_w = options.p_static_w,
                           .deadline_s = options.deadline_s});
  if (result.solve.summary.status == pipeline::Status::kInvalidInput) {
    throw InputError("profile " + options.profile.string() + ": " + result.solve.summary.message);
  }
  if (result.solve.summary.status == pipeline::Status::kDeadlineInfeasible) {
    ThrowInput("deadline", Describe(options.deadline_s),
               "must be >= the minimum iteration time " +
                   Describe(result.solve.summary.min_time_s) + " s");
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
    const Plan plan = BuildPlan(problem, result.solve, result.solve.points.size() - 1);
    PlanFromJson(ToJson(plan));
    summary.files.plan = options.out / "plan.json";
    WritePlanFile(summary.files.plan, plan);
    return summary;
  }
  summary.files = WriteSolveOutputs(options.out, problem, result);
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
  char text[256];
  std::snprintf(text, sizeof(text),
                "# Kareus plan (%s): iteration time %.6f s, energy %.3f J over all GPUs "
                "(static %.3f J)\n",
                plan.method.c_str(), plan.iteration.time_s, plan.iteration.energy_j,
                plan.iteration.static_energy_j);
  return text;
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

std::string ZeusFreqsText(const Plan& plan) {
  return StageListsText(plan, [](const PlannedInstruction& inst) {
    return "('" + std::string(ToString(inst.kind)) + "', " + std::to_string(inst.freq_mhz) + ")";
  });
}

std::string KareusSchedsText(const Plan& plan) {
  return StageListsText(plan, [](const PlannedInstruction& inst) {
    std::string out = "('" + std::string(ToString(inst.kind)) + "'";
    if (inst.mode == ExecutionMode::kSequential || inst.partitions.empty()) return out + ",)";
    for (const PartitionKnobs& knobs : inst.partitions) {
      // The published config string: start-end-sms-block (kareus-official.md §4.4, §5.1).
      out += ", '" + knobs.slot + "-none-" + std::to_string(knobs.sms) + "-1024'";
    }
    return out + ")";
  });
}

ExportSummary ExportPlans(const ExportOptions& options) {
  namespace fs = std::filesystem;
  ThrowIfInvalid(options.Validate());
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
    const Plan plan = ReadPlanFile(input);
    std::smatch match;
    const std::string name = input.filename().string();
    const long index = std::regex_match(name, match, numbered) ? std::stol(match[1]) : 0;
    char file[64];
    std::snprintf(file, sizeof(file), "%s_pipeline_%05ld.py",
                  options.format == ExportFormat::kZeus ? "freqs" : "scheds", index);
    outputs.emplace_back(options.out / file, options.format == ExportFormat::kZeus
                                                 ? ZeusFreqsText(plan)
                                                 : KareusSchedsText(plan));
  }
  ExportSummary summary;
  for (const auto& [path, text] : outputs) {
    WriteFileAtomic(path, text);
    summary.files.push_back(path);
  }
  return summary;
}

}  // namespace kareus::plan
