// SPDX-License-Identifier: Apache-2.0
#include "kareus/plan/plan_file.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "kareus/common/error.h"

namespace kareus::plan {
namespace internal {
namespace {

// Field access with the validation rules of the plan format. Every failure names the field by
// its JSON path ("stages[1].instructions[4].freq_mhz"), the value found and the rule broken.

std::string Path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::string Shown(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

void RequireObject(const Json& value, const std::string& path) {
  if (!value.is_object())
    ThrowInput(path.empty() ? "(top level)" : path, Shown(value), "must be a JSON object");
}

const Json& Required(const Json& object, const std::string& parent, const char* key) {
  auto it = object.find(key);
  if (it == object.end()) ThrowInput(Path(parent, key), "(missing)", "required field");
  return *it;
}

std::string GetString(const Json& object, const std::string& parent, const char* key,
                      bool allow_empty = false) {
  const Json& value = Required(object, parent, key);
  if (!value.is_string()) ThrowInput(Path(parent, key), Shown(value), "must be a string");
  std::string text = value.get<std::string>();
  if (!allow_empty && text.empty()) ThrowInput(Path(parent, key), "\"\"", "must not be empty");
  return text;
}

int GetInt(const Json& object, const std::string& parent, const char* key, int64_t min_value,
           const char* rule) {
  const Json& value = Required(object, parent, key);
  if (!value.is_number_integer()) {
    ThrowInput(Path(parent, key), Shown(value), "must be an integer");
  }
  // Unsigned values above INT64_MAX would wrap in get<int64_t>; they are out of range anyway.
  if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{INT32_MAX}) {
    ThrowInput(Path(parent, key), Shown(value), "must fit in a 32-bit integer");
  }
  const int64_t number = value.get<int64_t>();
  if (number < INT32_MIN || number > INT32_MAX) {
    ThrowInput(Path(parent, key), Shown(value), "must fit in a 32-bit integer");
  }
  if (number < min_value) ThrowInput(Path(parent, key), Shown(value), rule);
  return static_cast<int>(number);
}

// Non-negative finite number; `fallback` when the field is absent (predictions are optional
// for the runtime, which only needs the order, the clocks and the knobs).
double GetNonNegative(const Json& object, const std::string& parent, const char* key,
                      std::optional<double> fallback) {
  auto it = object.find(key);
  if (it == object.end()) {
    if (fallback) return *fallback;
    ThrowInput(Path(parent, key), "(missing)", "required field");
  }
  if (!it->is_number()) ThrowInput(Path(parent, key), Shown(*it), "must be a number");
  const double number = it->get<double>();
  if (!std::isfinite(number) || number < 0.0) {
    ThrowInput(Path(parent, key), Shown(*it), "must be a finite number >= 0");
  }
  return number;
}

const Json& GetArray(const Json& object, const std::string& parent, const char* key) {
  const Json& value = Required(object, parent, key);
  if (!value.is_array()) ThrowInput(Path(parent, key), Shown(value), "must be an array");
  return value;
}

Json GetWorkload(const Json& object) {
  auto it = object.find("workload");
  if (it == object.end()) return Json::object();
  if (!it->is_object()) ThrowInput("workload", Shown(*it), "must be a JSON object");
  return *it;
}

// "kareus.plan/2": the same family with another version gets a message about the version, a
// file of another kind (a frontier given as a plan) one about the kind. `also` is an older
// version still read.
std::string CheckFormat(const Json& object, const char* expected, const char* also = nullptr) {
  const std::string format = GetString(object, "", "format");
  if (format == expected || (also != nullptr && format == also)) return format;
  const std::string_view wanted(expected);
  const std::string family(wanted.substr(0, wanted.find('/') + 1));
  if (format.rfind(family, 0) == 0) {
    ThrowInput("format", format,
               also != nullptr ? fmt::format("unsupported version {}; this build reads {} and {}",
                                             format.substr(family.size()), expected, also)
                               : fmt::format("unsupported version {}; this build reads only {}",
                                             format.substr(family.size()), expected));
  }
  ThrowInput("format", format, fmt::format("expected {} (not a file of this kind)", expected));
}

PartitionKnobs ParsePartition(const Json& json, const std::string& path) {
  RequireObject(json, path);
  PartitionKnobs knobs;
  knobs.type = GetString(json, path, "type");
  knobs.sms = GetInt(json, path, "sms", 1, "must be >= 1 (SMs of the comm kernel)");
  knobs.slot = GetString(json, path, "slot");
  return knobs;
}

PlannedInstruction ParseInstruction(const Json& json, const std::string& path, int num_microbatches,
                                    bool has_chunks) {
  RequireObject(json, path);
  PlannedInstruction instruction;
  const std::string kind = GetString(json, path, "kind");
  try {
    instruction.kind = schedule::DirectionFromString(kind);
  } catch (const InputError&) {
    ThrowInput(Path(path, "kind"), kind, "must be \"forward\" or \"backward\"");
  }
  if (has_chunks && json.contains("chunk")) {
    instruction.chunk = GetInt(json, path, "chunk", 0, "must be >= 0");
  }
  instruction.microbatch = GetInt(json, path, "microbatch", 0, "must be >= 0");
  if (instruction.microbatch >= num_microbatches) {
    ThrowInput(Path(path, "microbatch"), std::to_string(instruction.microbatch),
               fmt::format("must be < num_microbatches ({})", num_microbatches));
  }
  instruction.freq_mhz = GetInt(json, path, "freq_mhz", 1, "must be a positive clock in MHz");
  const std::string mode = json.contains("mode") ? GetString(json, path, "mode") : "sequential";
  try {
    instruction.mode = schedule::ExecutionModeFromString(mode);
  } catch (const InputError&) {
    ThrowInput(Path(path, "mode"), mode, "must be \"nanobatched\" or \"sequential\"");
  }
  instruction.time_s = GetNonNegative(json, path, "time_s", 0.0);
  instruction.energy_j = GetNonNegative(json, path, "energy_j", 0.0);
  if (has_chunks && json.contains("gradient_sync") && !json["gradient_sync"].is_null()) {
    const std::string sync_path = Path(path, "gradient_sync");
    const Json& sync = json["gradient_sync"];
    RequireObject(sync, sync_path);
    InstructionGradientSync g;
    g.sms = GetInt(sync, sync_path, "sms", 1, "must be >= 1 (SMs of the reduction kernel)");
    if (sync.contains("overlapped")) {
      if (!sync["overlapped"].is_boolean()) {
        ThrowInput(Path(sync_path, "overlapped"), Shown(sync["overlapped"]),
                   "must be true or false");
      }
      g.overlapped = sync["overlapped"].get<bool>();
    }
    if (instruction.kind != Direction::kBackward ||
        instruction.microbatch != num_microbatches - 1) {
      ThrowInput(sync_path, Shown(sync),
                 fmt::format("only the last backward of a chunk (microbatch {}) launches the "
                             "gradient sync",
                             num_microbatches - 1));
    }
    instruction.gradient_sync = g;
  }
  if (json.contains("partitions")) {
    const Json& partitions = GetArray(json, path, "partitions");
    std::set<std::string> seen;
    for (size_t i = 0; i < partitions.size(); ++i) {
      const std::string item_path = fmt::format("{}.partitions[{}]", path, i);
      PartitionKnobs knobs = ParsePartition(partitions[i], item_path);
      if (!seen.insert(knobs.type).second) {
        ThrowInput(Path(item_path, "type"), knobs.type,
                   "each partition type appears at most once per instruction");
      }
      instruction.partitions.push_back(std::move(knobs));
    }
  }
  return instruction;
}

// The rules the header promises: exactly M forwards and M backwards, each microbatch once per
// direction, and the schedule's exact order, reported at the first place it differs.
const char* ScheduleName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::k1F1B:
      return "1F1B";
    case ScheduleKind::kGPipe:
      return "GPipe";
    case ScheduleKind::kInterleaved1F1B:
      return "interleaved 1F1B";
  }
  return "?";
}

void CheckStageOrder(const PlannedStage& stage, int num_stages, int num_microbatches,
                     int virtual_stages, ScheduleKind kind) {
  const std::string path = fmt::format("stages[{}].instructions", stage.stage);
  int forwards = 0;
  int backwards = 0;
  for (const PlannedInstruction& instruction : stage.instructions) {
    (instruction.kind == Direction::kForward ? forwards : backwards) += 1;
  }
  const int per_direction = num_microbatches * virtual_stages;
  if (forwards != per_direction || backwards != per_direction) {
    ThrowInput(path, fmt::format("{} forwards and {} backwards", forwards, backwards),
               virtual_stages == 1
                   ? fmt::format("each stage must run exactly num_microbatches ({}) forwards and "
                                 "as many backwards",
                                 num_microbatches)
                   : fmt::format("each stage must run exactly num_microbatches x virtual_stages "
                                 "({} x {}) forwards and as many backwards",
                                 num_microbatches, virtual_stages));
  }
  const std::vector<schedule::Instruction> expected =
      schedule::StageOrder(kind, num_stages, stage.stage, num_microbatches, virtual_stages);
  for (size_t i = 0; i < expected.size(); ++i) {
    const schedule::Instruction got = Scheduled(stage, stage.instructions[i]);
    if (got != expected[i]) {
      ThrowInput(
          fmt::format("{}[{}]", path, i), schedule::ToString(got),
          virtual_stages == 1
              ? fmt::format("{} order of stage {} of {} with {} microbatches expects {} here",
                            ScheduleName(kind), stage.stage, num_stages, num_microbatches,
                            schedule::ToString(expected[i]))
              : fmt::format("{} order of stage {} of {} with {} microbatches and {} chunks "
                            "expects {} here",
                            ScheduleName(kind), stage.stage, num_stages, num_microbatches,
                            virtual_stages, schedule::ToString(expected[i])));
    }
  }
}

}  // namespace
}  // namespace internal

using internal::GetArray;
using internal::GetInt;
using internal::GetNonNegative;
using internal::GetString;
using internal::RequireObject;

schedule::Instruction Scheduled(const PlannedStage& stage, const PlannedInstruction& instruction) {
  return {.stage = stage.stage,
          .chunk = instruction.chunk,
          .microbatch = instruction.microbatch,
          .kind = instruction.kind};
}

int JobGpus(const Plan& plan) {
  int gpus = 0;
  for (const PlannedStage& stage : plan.stages) gpus += stage.gpus;
  return gpus;
}

int NanobatchedInstructions(const Plan& plan) {
  int count = 0;
  for (const PlannedStage& stage : plan.stages) {
    for (const PlannedInstruction& instruction : stage.instructions) {
      count += instruction.mode == ExecutionMode::kNanobatched ? 1 : 0;
    }
  }
  return count;
}

std::optional<std::string> SequentialJobRefusal(const Plan& plan, const std::string& plan_name) {
  const int nanobatched = NanobatchedInstructions(plan);
  if (nanobatched == 0) return std::nullopt;
  std::size_t total = 0;
  for (const PlannedStage& stage : plan.stages) total += stage.instructions.size();
  return fmt::format(
      "{}: {} of the {} instructions of this {} plan run nanobatched (two nanobatches, each "
      "collective overlapping the other nanobatch's compute on the plan's SMs and launch slot); "
      "its clocks and its iteration time ({:.6f} s) assume that execution, which a job running "
      "every instruction sequentially (stock Megatron-LM, a Zeus/Perseus client) does not have. "
      "Run it with kareus.torch (Kareus's executor), or apply a sequential plan (the "
      "methods/perseus/plan.json of the same `kareus run`); to apply its clocks anyway, say so "
      "(`kareus export --clocks-only`, KAREUS_CLOCKS_ONLY=1 for the Megatron-LM hooks)",
      plan_name, nanobatched, total, ShownValue(plan.method), plan.iteration.time_s);
}

Json ToJson(const Plan& plan) {
  Json stages = Json::array();
  for (const PlannedStage& stage : plan.stages) {
    Json instructions = Json::array();
    for (const PlannedInstruction& instruction : stage.instructions) {
      Json partitions = Json::array();
      for (const PartitionKnobs& knobs : instruction.partitions) {
        partitions.push_back({{"type", knobs.type}, {"sms", knobs.sms}, {"slot", knobs.slot}});
      }
      Json item{{"kind", schedule::ToString(instruction.kind)},
                {"chunk", instruction.chunk},
                {"microbatch", instruction.microbatch},
                {"freq_mhz", instruction.freq_mhz},
                {"mode", schedule::ToString(instruction.mode)},
                {"time_s", instruction.time_s},
                {"energy_j", instruction.energy_j},
                {"partitions", std::move(partitions)}};
      if (instruction.gradient_sync) {
        item["gradient_sync"] = {{"sms", instruction.gradient_sync->sms},
                                 {"overlapped", instruction.gradient_sync->overlapped}};
      }
      instructions.push_back(std::move(item));
    }
    Json item{
        {"stage", stage.stage}, {"gpus", stage.gpus}, {"instructions", std::move(instructions)}};
    if (stage.gradient_sync) {
      item["gradient_sync"] = {{"freq_mhz", stage.gradient_sync->freq_mhz},
                               {"sms", stage.gradient_sync->sms},
                               {"time_s", stage.gradient_sync->time_s},
                               {"energy_j", stage.gradient_sync->energy_j}};
    }
    stages.push_back(std::move(item));
  }
  return Json{{"format", kPlanFormat},
              {"method", plan.method},
              {"workload", plan.workload.is_null() ? Json::object() : plan.workload},
              {"schedule", schedule::ToString(plan.schedule)},
              {"num_microbatches", plan.num_microbatches},
              {"virtual_stages", plan.virtual_stages},
              {"iteration",
               {{"time_s", plan.iteration.time_s},
                {"energy_j", plan.iteration.energy_j},
                {"static_energy_j", plan.iteration.static_energy_j},
                {"dynamic_energy_j", plan.iteration.dynamic_energy_j}}},
              {"stages", std::move(stages)}};
}

Plan PlanFromJson(const Json& json) {
  RequireObject(json, "");
  const bool version1 = internal::CheckFormat(json, kPlanFormat, kPlanFormatV1) == kPlanFormatV1;
  Plan plan;
  plan.method = GetString(json, "", "method");
  plan.workload = internal::GetWorkload(json);
  const std::string schedule = json.contains("schedule") ? GetString(json, "", "schedule") : "1f1b";
  if (version1 && schedule != "1f1b") {
    ThrowInput("schedule", schedule, "must be \"1f1b\" in a kareus.plan/1 file");
  }
  try {
    plan.schedule = schedule::ScheduleKindFromString(schedule);
  } catch (const InputError&) {
    ThrowInput("schedule", schedule, "must be \"1f1b\", \"gpipe\" or \"interleaved-1f1b\"");
  }
  plan.num_microbatches = GetInt(json, "", "num_microbatches", 1, "must be >= 1");
  if (!version1 && json.contains("virtual_stages")) {
    plan.virtual_stages = GetInt(json, "", "virtual_stages", 1, "must be >= 1");
  }
  if (json.contains("iteration")) {
    const Json& iteration = json["iteration"];
    RequireObject(iteration, "iteration");
    plan.iteration.time_s = GetNonNegative(iteration, "iteration", "time_s", std::nullopt);
    plan.iteration.energy_j = GetNonNegative(iteration, "iteration", "energy_j", std::nullopt);
    plan.iteration.static_energy_j = GetNonNegative(iteration, "iteration", "static_energy_j", 0.0);
    plan.iteration.dynamic_energy_j =
        GetNonNegative(iteration, "iteration", "dynamic_energy_j", 0.0);
  }
  const Json& stages = GetArray(json, "", "stages");
  if (stages.empty()) ThrowInput("stages", "[]", "a plan needs at least one stage");
  const int num_stages = static_cast<int>(stages.size());
  try {
    schedule::ValidateShape(plan.schedule, num_stages, plan.num_microbatches, plan.virtual_stages);
  } catch (const InputError&) {
    ThrowInput("virtual_stages", std::to_string(plan.virtual_stages),
               plan.schedule == ScheduleKind::kInterleaved1F1B
                   ? fmt::format("an interleaved-1f1b plan needs virtual_stages >= 2, at least 2 "
                                 "stages and num_microbatches a multiple of the stages (has {} "
                                 "stages, {} microbatches)",
                                 num_stages, plan.num_microbatches)
                   : fmt::format("must be 1 for the {} schedule", schedule));
  }
  for (int s = 0; s < num_stages; ++s) {
    const std::string path = fmt::format("stages[{}]", s);
    RequireObject(stages[s], path);
    PlannedStage stage;
    stage.stage = GetInt(stages[s], path, "stage", 0, "must be >= 0");
    if (stage.stage != s) {
      ThrowInput(
          path + ".stage", std::to_string(stage.stage),
          fmt::format("stages must be numbered 0..{} in order; expected {}", num_stages - 1, s));
    }
    stage.gpus =
        stages[s].contains("gpus") ? GetInt(stages[s], path, "gpus", 1, "must be >= 1") : 1;
    const Json& instructions = GetArray(stages[s], path, "instructions");
    for (size_t i = 0; i < instructions.size(); ++i) {
      stage.instructions.push_back(internal::ParseInstruction(
          instructions[i], fmt::format("{}.instructions[{}]", path, i), plan.num_microbatches,
          /*has_chunks=*/!version1));
    }
    if (!version1 && stages[s].contains("gradient_sync") && !stages[s]["gradient_sync"].is_null()) {
      const std::string sync_path = path + ".gradient_sync";
      const Json& sync = stages[s]["gradient_sync"];
      RequireObject(sync, sync_path);
      StageGradientSync g;
      g.freq_mhz = GetInt(sync, sync_path, "freq_mhz", 1, "must be a positive clock in MHz");
      g.sms = GetInt(sync, sync_path, "sms", 1, "must be >= 1 (SMs of the reduction kernel)");
      g.time_s = GetNonNegative(sync, sync_path, "time_s", 0.0);
      g.energy_j = GetNonNegative(sync, sync_path, "energy_j", 0.0);
      stage.gradient_sync = g;
    }
    if (s > 0 && stage.gradient_sync.has_value() != plan.stages.front().gradient_sync.has_value()) {
      ThrowInput(path + ".gradient_sync", stage.gradient_sync ? "present" : "(missing)",
                 "every stage has a gradient sync or none does (stage 0 " +
                     std::string(plan.stages.front().gradient_sync ? "has one)" : "has none)"));
    }
    internal::CheckStageOrder(stage, num_stages, plan.num_microbatches, plan.virtual_stages,
                              plan.schedule);
    plan.stages.push_back(std::move(stage));
  }
  return plan;
}

namespace {

// Prefixes validation errors with the file they came from.
template <typename T, typename Parse>
T ReadValidated(const std::filesystem::path& path, Parse parse) {
  const Json json = ReadJsonFile(path);  // InputError naming the path on a syntax error
  try {
    return parse(json);
  } catch (const InputError& e) {
    throw InputError(path.string() + ": " + e.what());
  }
}

}  // namespace

void WritePlanFile(const std::filesystem::path& path, const Plan& plan) {
  // Validate before writing so an inconsistent plan never reaches a training job.
  Json json = ToJson(plan);
  (void)PlanFromJson(json);
  WriteJsonFile(path, json);
}

Plan ReadPlanFile(const std::filesystem::path& path) {
  return ReadValidated<Plan>(path, [](const Json& json) { return PlanFromJson(json); });
}

std::string FrontierPlanPath(const FrontierPoint& point) {
  if (!point.plan_path.empty()) return point.plan_path;
  if (point.plan_index < 0) return "";
  return fmt::format("plans/plan_{:05d}.json", point.plan_index);
}

Json ToJson(const FrontierFile& frontier) {
  Json points = Json::array();
  for (const FrontierPoint& point : frontier.points) {
    points.push_back({{"time_s", point.time_s},
                      {"energy_j", point.energy_j},
                      {"static_energy_j", point.static_energy_j},
                      {"plan_index", point.plan_index},
                      {"plan_path", point.plan_path}});
  }
  Json out{{"format", kFrontierFormat},
           {"method", frontier.method},
           {"workload", frontier.workload.is_null() ? Json::object() : frontier.workload},
           {"points", std::move(points)}};
  if (!frontier.representation.empty()) {
    out["representation"] = frontier.representation;
    out["unit_time_s"] = frontier.unit_time_s;
  }
  return out;
}

FrontierFile FrontierFromJson(const Json& json) {
  RequireObject(json, "");
  internal::CheckFormat(json, kFrontierFormat);
  FrontierFile frontier;
  frontier.method = GetString(json, "", "method");
  frontier.workload = internal::GetWorkload(json);
  if (json.contains("representation")) {
    frontier.representation = GetString(json, "", "representation");
    if (frontier.representation != "deadline-grid" && frontier.representation != "points") {
      ThrowInput("representation", frontier.representation, "must be deadline-grid or points");
    }
    frontier.unit_time_s = GetNonNegative(json, "", "unit_time_s", 0.0);
  }
  const Json& points = GetArray(json, "", "points");
  for (size_t i = 0; i < points.size(); ++i) {
    const std::string path = fmt::format("points[{}]", i);
    RequireObject(points[i], path);
    FrontierPoint point;
    point.time_s = GetNonNegative(points[i], path, "time_s", std::nullopt);
    point.energy_j = GetNonNegative(points[i], path, "energy_j", std::nullopt);
    point.static_energy_j = GetNonNegative(points[i], path, "static_energy_j", 0.0);
    point.plan_index = points[i].contains("plan_index")
                           ? GetInt(points[i], path, "plan_index", -1, "must be >= -1")
                           : -1;
    if (points[i].contains("plan_path")) {
      point.plan_path = GetString(points[i], path, "plan_path", /*allow_empty=*/true);
      const std::filesystem::path relative(point.plan_path);
      if (relative.is_absolute()) {
        ThrowInput(path + ".plan_path", point.plan_path,
                   "must be relative to the folder of frontier.json");
      }
    }
    if (!frontier.points.empty() && point.time_s < frontier.points.back().time_s) {
      ThrowInput(path + ".time_s", fmt::format("{}", point.time_s),
                 fmt::format("points must be sorted by time, fastest first (previous {})",
                             frontier.points.back().time_s));
    }
    frontier.points.push_back(std::move(point));
  }
  return frontier;
}

void WriteFrontierFile(const std::filesystem::path& path, const FrontierFile& frontier) {
  Json json = ToJson(frontier);
  (void)FrontierFromJson(json);
  WriteJsonFile(path, json);
}

FrontierFile ReadFrontierFile(const std::filesystem::path& path) {
  return ReadValidated<FrontierFile>(path, [](const Json& json) { return FrontierFromJson(json); });
}

}  // namespace kareus::plan
