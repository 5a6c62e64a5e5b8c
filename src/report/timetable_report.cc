// SPDX-License-Identifier: Apache-2.0
// The report of `kareus schedule`: the job's power and the signal over time, and the timetable.
#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "kareus/common/table.h"
#include "kareus/plan/timetable.h"
#include "kareus/report/report.h"
#include "report/svg.h"

namespace kareus::report {
namespace {

using internal::Escape;
using internal::HtmlTable;
using internal::Num;
using internal::Plot;

double Time(const Json& text) { return plan::ParseUtcTime(text.get<std::string>()).value_or(0.0); }

// A step function as polyline points: value[i] on [t[i], t[i+1]).
std::vector<std::pair<double, double>> Steps(const std::vector<std::pair<double, double>>& changes,
                                             double end) {
  std::vector<std::pair<double, double>> xy;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    const double next = i + 1 < changes.size() ? changes[i + 1].first : end;
    xy.emplace_back(changes[i].first, changes[i].second);
    xy.emplace_back(next, changes[i].second);
  }
  return xy;
}

}  // namespace

std::string RenderTimetableHtml(const Json& timetable) {
  const double start = Time(timetable["start"]);
  const double deadline = Time(timetable["deadline"]);
  const double hours = (deadline - start) / 3600.0;
  const auto h = [&](double t) { return (t - start) / 3600.0; };
  std::map<std::string, double> power_of;  // plan -> job power, W
  for (const Json& p : timetable["plans"]) power_of[p["plan"].get<std::string>()] = p["power_w"];
  const double idle = timetable["idle_power_w"];
  std::vector<std::pair<double, double>> power, signal, caps;  // (hours, value)
  for (const Json& in : timetable["intervals"]) {
    double t = Time(in["start"]);
    for (const Json& e : in["entries"]) {
      power.emplace_back(h(t), power_of[e["plan"].get<std::string>()] / 1e3);
      t += e["seconds"].get<double>();
    }
    if (in["pause_s"].get<double>() > 0) {
      power.emplace_back(h(t), idle / 1e3);
      t += in["pause_s"].get<double>();
    }
    signal.emplace_back(h(Time(in["start"])), in["signal"].get<double>());
    if (!in["power_cap_w"].is_null()) {
      caps.emplace_back(h(Time(in["start"])),
                        in["power_cap_w"].get<double>() * timetable["gpus"].get<double>() / 1e3);
    }
  }
  const double finish_h = h(Time(timetable["finish"]));
  power.emplace_back(finish_h, 0.0);
  double p_hi = idle / 1e3;
  for (const auto& [x, y] : power) p_hi = std::max(p_hi, y);
  for (const auto& [x, y] : caps) p_hi = std::max(p_hi, y);
  const Json& constant = timetable["best_constant_plan"];
  double constant_power = 0.0, constant_finish = 0.0;
  if (!constant.is_null()) {
    constant_power = power_of[constant["plan"].get<std::string>()] / 1e3;
    constant_finish = h(Time(constant["finish"]));
    p_hi = std::max(p_hi, constant_power);
  }
  const std::string unit = timetable.value("signal_unit", std::string("signal"));
  std::string html =
      "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Kareus timetable</title>"
      "<style>body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}"
      "h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}"
      "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:4px 8px;"
      "font-size:13px;text-align:right}th{background:#f3f3f6}td:first-child{text-align:left}"
      ".note{color:#555;font-size:13px}</style></head><body>";
  html += "<h1>Kareus timetable: " + Escape(FormatFixed(timetable["iterations"].get<double>(), 0)) +
          " iterations by " + Escape(timetable["deadline"].get<std::string>()) + "</h1>";
  std::string totals = "<p>Total cost " + Num(timetable["total_cost"].get<double>(), 3) + " (" +
                       Escape(unit) + " x kWh), energy " +
                       Num(timetable["total_energy_j"].get<double>() / 3.6e6, 2) + " kWh, finish " +
                       Escape(timetable["finish"].get<std::string>());
  if (!constant.is_null()) {
    totals += "; the best constant plan (" + Escape(constant["plan"].get<std::string>()) +
              ", run from the start without a pause) costs " +
              Num(constant["cost"].get<double>(), 3) + ": " +
              Num(100.0 * timetable["saving_vs_best_constant"].get<double>(), 1) + " % saved";
  }
  html += totals + ".</p>";
  html += "<h2>Power and signal over time</h2>";
  Plot top(1000, 300, 0.0, hours, 0.0, p_hi * 1.1);
  top.Axes("hours from " + timetable["start"].get<std::string>(), "job power (kW)");
  top.Polyline(Steps(power, hours), "#c0392b", 2.0);
  if (!caps.empty()) top.Polyline(Steps(caps, hours), "#555", 1.2, /*dashed=*/true);
  if (!constant.is_null()) {
    top.Polyline({{0.0, constant_power}, {constant_finish, constant_power}, {constant_finish, 0.0}},
                 "#2f7ed8", 1.5, /*dashed=*/true);
  }
  top.VerticalLine(finish_h, "#c0392b", "");
  std::vector<std::pair<std::string, std::string>> legend = {
      {"timetable (dotted: its finish)", "#c0392b"}};
  if (!constant.is_null()) legend.emplace_back("best constant plan", "#2f7ed8");
  if (!caps.empty()) legend.emplace_back("power cap", "#555");
  top.Legend(legend);
  html += top.Finish();
  double s_hi = 0.0;
  for (const auto& [x, y] : signal) s_hi = std::max(s_hi, y);
  Plot bottom(1000, 220, 0.0, hours, 0.0, std::max(s_hi * 1.1, 1e-9));
  bottom.Axes("hours from " + timetable["start"].get<std::string>(), unit);
  // The signal as far as the timetable goes (the interval the job finishes in).
  const double last_end = h(Time(timetable["intervals"].back()["end"]));
  bottom.Polyline(Steps(signal, last_end), "#2ca02c", 2.0);
  html += bottom.Finish();
  html +=
      "<p class='note'>Top: the job's power (all GPUs) as the timetable runs it: a frontier "
      "plan's evaluated energy per iteration over its time, the GPUs' static power while "
      "paused, nothing once the iterations are done. Bottom: the signal the cost weighs the "
      "energy with.</p>";
  html += "<h2>Intervals</h2>";
  std::vector<std::vector<std::string>> rows;
  for (const Json& in : timetable["intervals"]) {
    std::string runs;
    for (const Json& e : in["entries"]) {
      if (!runs.empty()) runs += "; ";
      runs += e["plan"].get<std::string>() + " " + FormatFixed(e["seconds"].get<double>(), 0) +
              " s (" + FormatFixed(e["iterations"].get<double>(), 1) + " it)";
    }
    rows.push_back({in["start"].get<std::string>(), FormatFixed(in["signal"].get<double>(), 3),
                    runs.empty() ? "--" : runs, FormatFixed(in["pause_s"].get<double>(), 0),
                    FormatFixed(in["energy_j"].get<double>() / 3.6e6, 3),
                    FormatFixed(in["cost"].get<double>(), 4)});
  }
  html += HtmlTable({"start", unit, "runs", "pause (s)", "energy (kWh)", "cost"}, rows);
  return html + "</body></html>\n";
}

}  // namespace kareus::report
