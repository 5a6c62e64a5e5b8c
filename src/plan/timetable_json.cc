// SPDX-License-Identifier: Apache-2.0
// timetable.json (kareus/plan/timetable.h): written from a solved timetable and read back.
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "kareus/plan/timetable.h"

namespace kareus::plan {

Json TimetableToJson(const ScheduleProblem& problem, const Timetable& timetable,
                     const Json& extra) {
  Json json = {{"format", "kareus-timetable"}, {"version", 1}};
  for (const auto& [key, value] : extra.items()) json[key] = value;
  json["iterations"] = problem.iterations;
  json["start"] = FormatUtcTime(problem.start());
  json["deadline"] = FormatUtcTime(problem.deadline());
  json["gpus"] = problem.gpus;
  json["idle_power_w"] = problem.idle_power_w;
  json["allow_pause"] = problem.allow_pause;
  Json plans = Json::array();
  for (const SchedulePlan& plan : problem.plans) {
    plans.push_back({{"plan", plan.name},
                     {"time_s", plan.time_s},
                     {"energy_j", plan.energy_j},
                     {"power_w", plan.power_w()}});
  }
  json["plans"] = plans;
  Json intervals = Json::array();
  for (const TimetableInterval& in : timetable.intervals) {
    Json entries = Json::array();
    for (const TimetableEntry& e : in.entries) {
      entries.push_back({{"plan", problem.plans[e.plan].name},
                         {"seconds", e.seconds},
                         {"iterations", e.iterations},
                         {"energy_j", e.energy_j},
                         {"cost", e.cost}});
    }
    Json item = {{"start", FormatUtcTime(in.interval.start)},
                 {"end", FormatUtcTime(in.interval.end)},
                 {"signal", in.interval.signal}};
    item["power_cap_w"] =
        std::isfinite(in.interval.power_cap_w) ? Json(in.interval.power_cap_w) : Json(nullptr);
    item["pause_s"] = in.pause_s;
    item["entries"] = entries;
    item["energy_j"] = in.energy_j;
    item["cost"] = in.cost;
    intervals.push_back(item);
  }
  json["intervals"] = intervals;
  json["total_cost"] = timetable.total_cost;
  json["total_energy_j"] = timetable.total_energy_j;
  json["total_iterations"] = timetable.total_iterations;
  json["finish"] = FormatUtcTime(timetable.finish);
  if (timetable.best_constant) {
    const ConstantPlanCost& c = *timetable.best_constant;
    json["best_constant_plan"] = {{"plan", problem.plans[c.plan].name},
                                  {"cost", c.cost},
                                  {"energy_j", c.energy_j},
                                  {"finish", FormatUtcTime(c.finish)}};
    // Never below 0 (running one plan from the start is among the timetables the solver chose
    // from); rounding can leave -1e-16.
    json["saving_vs_best_constant"] =
        c.cost > 0 ? std::max(0.0, 1.0 - timetable.total_cost / c.cost) : 0.0;
  } else {
    json["best_constant_plan"] = nullptr;
    json["saving_vs_best_constant"] = nullptr;
  }
  return json;
}

namespace {

const Json& Field(const Json& object, const std::string& parent, const char* key) {
  const std::string name = parent.empty() ? key : parent + "." + key;
  if (!object.is_object() || !object.contains(key)) ThrowInput(name, "missing", "required");
  return object[key];
}

double NumberField(const Json& object, const std::string& parent, const char* key,
                   double min_value) {
  const Json& v = Field(object, parent, key);
  const std::string name = parent.empty() ? key : parent + "." + key;
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < min_value) {
    ThrowInput(name, v.dump(), fmt::format("must be a number >= {}", min_value));
  }
  return v.get<double>();
}

double TimeField(const Json& object, const std::string& parent, const char* key) {
  const Json& v = Field(object, parent, key);
  const std::string name = parent.empty() ? key : parent + "." + key;
  const auto t = v.is_string() ? ParseUtcTime(v.get<std::string>()) : std::nullopt;
  if (!t) ThrowInput(name, v.dump(), "must be an ISO-8601 UTC time");
  return *t;
}

}  // namespace

void TimetableFromJson(const Json& json, ScheduleProblem* problem, Timetable* timetable) {
  if (!json.is_object() || json.value("format", std::string()) != "kareus-timetable") {
    ThrowInput("format", json.is_object() ? json.value("format", std::string("missing")) : "",
               "must be 'kareus-timetable' (a timetable.json of kareus schedule)");
  }
  *problem = ScheduleProblem();
  *timetable = Timetable();
  problem->iterations = NumberField(json, "", "iterations", 0);
  problem->gpus = static_cast<int>(NumberField(json, "", "gpus", 1));
  problem->idle_power_w = NumberField(json, "", "idle_power_w", 0);
  problem->allow_pause = json.value("allow_pause", true);
  std::map<std::string, int> index;
  const Json& plans = Field(json, "", "plans");
  if (!plans.is_array() || plans.empty())
    ThrowInput("plans", plans.dump(), "must be a non-empty array");
  for (std::size_t p = 0; p < plans.size(); ++p) {
    const std::string parent = fmt::format("plans[{}]", p);
    SchedulePlan plan;
    const Json& name = Field(plans[p], parent, "plan");
    if (!name.is_string() || name.get<std::string>().empty()) {
      ThrowInput(parent + ".plan", name.dump(), "must be a plan file name");
    }
    plan.name = name.get<std::string>();
    plan.time_s = NumberField(plans[p], parent, "time_s", 0);
    plan.energy_j = NumberField(plans[p], parent, "energy_j", 0);
    index[plan.name] = static_cast<int>(p);
    problem->plans.push_back(plan);
  }
  const Json& intervals = Field(json, "", "intervals");
  if (!intervals.is_array() || intervals.empty()) {
    ThrowInput("intervals", intervals.dump(), "must be a non-empty array");
  }
  for (std::size_t k = 0; k < intervals.size(); ++k) {
    const std::string parent = fmt::format("intervals[{}]", k);
    const Json& item = intervals[k];
    TimetableInterval in;
    in.interval.start = TimeField(item, parent, "start");
    in.interval.end = TimeField(item, parent, "end");
    in.interval.signal = NumberField(item, parent, "signal", 0);
    const Json& cap = Field(item, parent, "power_cap_w");
    if (!cap.is_null()) in.interval.power_cap_w = NumberField(item, parent, "power_cap_w", 0);
    in.pause_s = NumberField(item, parent, "pause_s", 0);
    const Json& entries = Field(item, parent, "entries");
    if (!entries.is_array()) ThrowInput(parent + ".entries", entries.dump(), "must be an array");
    for (std::size_t e = 0; e < entries.size(); ++e) {
      const std::string entry_parent = fmt::format("{}.entries[{}]", parent, e);
      TimetableEntry entry;
      const Json& name = Field(entries[e], entry_parent, "plan");
      const auto it = name.is_string() ? index.find(name.get<std::string>()) : index.end();
      if (it == index.end()) ThrowInput(entry_parent + ".plan", name.dump(), "not one of plans[]");
      entry.plan = it->second;
      entry.seconds = NumberField(entries[e], entry_parent, "seconds", 0);
      entry.iterations = NumberField(entries[e], entry_parent, "iterations", 0);
      entry.energy_j = NumberField(entries[e], entry_parent, "energy_j", 0);
      entry.cost = NumberField(entries[e], entry_parent, "cost", 0);
      in.entries.push_back(entry);
    }
    in.energy_j = NumberField(item, parent, "energy_j", 0);
    in.cost = NumberField(item, parent, "cost", 0);
    if (k > 0 && in.interval.start != timetable->intervals.back().interval.end) {
      ThrowInput(parent + ".start", item["start"].dump(), "must be the end of the interval before");
    }
    if (!(in.interval.end > in.interval.start)) {
      ThrowInput(parent + ".end", item["end"].dump(), "must be after its start");
    }
    problem->intervals.push_back(in.interval);
    timetable->intervals.push_back(std::move(in));
  }
  timetable->total_cost = NumberField(json, "", "total_cost", 0);
  timetable->total_energy_j = NumberField(json, "", "total_energy_j", 0);
  timetable->total_iterations = NumberField(json, "", "total_iterations", 0);
  timetable->finish = TimeField(json, "", "finish");
}

}  // namespace kareus::plan
