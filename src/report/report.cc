// SPDX-License-Identifier: Apache-2.0
#include "kareus/report/report.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "kareus/common/table.h"
#include "report/svg.h"

namespace kareus::report {
namespace {

using internal::Escape;
using internal::HtmlTable;
using internal::Num;
using internal::Plot;

const std::map<std::string, std::string>& MethodColors() {
  static const std::map<std::string, std::string> colors = {
      {"megatron", "#6b6b6b"}, {"nanobatching", "#9e7bb5"},
      {"perseus", "#2f7ed8"},  {"nanobatching+perseus", "#f28e2b"},
      {"kareus", "#c0392b"},   {"kareus-oracle", "#2ca02c"}};
  return colors;
}

std::string ColorOf(const std::string& method) {
  const auto it = MethodColors().find(method);
  return it == MethodColors().end() ? "#444" : it->second;
}

std::string Label(const Json& method) {
  return method.value("label", method.value("method", std::string("?")));
}

std::string Percent(const Json& value) {
  if (value.is_null()) return "--";
  const std::string text = FormatFixed(value.get<double>(), 1);
  if (text == "-0.0") return "+0.0";  // a value that rounds to zero has no sign
  return (text.front() == '-' ? "" : "+") + text;
}

std::string FrontierPlot(const Json& summary) {
  double t_lo = std::numeric_limits<double>::infinity(), t_hi = -t_lo, e_lo = t_lo, e_hi = -t_lo;
  for (const Json& m : summary["methods"]) {
    for (const Json& p : m["frontier"]) {
      t_lo = std::min(t_lo, p["time_s"].get<double>());
      t_hi = std::max(t_hi, p["time_s"].get<double>());
      e_lo = std::min(e_lo, p["energy_j"].get<double>() / 1e3);
      e_hi = std::max(e_hi, p["energy_j"].get<double>() / 1e3);
    }
  }
  if (!std::isfinite(t_lo)) return "<p>No frontier points.</p>";
  Plot plot(900, 480, t_lo, t_hi, e_lo, e_hi);
  plot.Axes("iteration time (s)", "iteration energy, all GPUs (kJ)");
  std::vector<std::pair<std::string, std::string>> legend;
  for (const Json& m : summary["methods"]) {
    const std::string color = ColorOf(m["method"]);
    std::vector<std::pair<double, double>> xy;
    for (const Json& p : m["frontier"]) {
      xy.push_back({p["time_s"].get<double>(), p["energy_j"].get<double>() / 1e3});
    }
    std::sort(xy.begin(), xy.end());
    plot.Polyline(xy, color, 1.5);
    for (int index : m["sampled_plans"]) {
      const Json& p = m["frontier"][index];
      plot.Marker(p["time_s"], p["energy_j"].get<double>() / 1e3, color, 3.0,
                  Label(m) + ": " + Num(p["time_s"], 3) + " s, " +
                      Num(p["energy_j"].get<double>() / 1e3, 2) + " kJ");
    }
    const Json& fastest = m["fastest"];
    plot.Marker(fastest["time_s"], fastest["energy_j"].get<double>() / 1e3, color, 6.0,
                Label(m) + " fastest plan", /*hollow=*/true);
    legend.push_back({Label(m), color});
  }
  // The published iso points: Perseus's fastest time and its lowest energy.
  for (const Json& m : summary["methods"]) {
    if (m["method"] != "perseus") continue;
    plot.VerticalLine(m["fastest"]["time_s"], "#2f7ed8", "Perseus fastest (iso-time)");
    plot.HorizontalLine(m["lowest_energy"]["energy_j"].get<double>() / 1e3, "#2f7ed8",
                        "Perseus lowest energy (iso-energy)");
  }
  plot.LegendBelow(legend);
  return plot.Finish();
}

std::string TimelinePlot(const Json& timeline) {
  if (timeline.is_null() || timeline["stages"].empty()) return "<p>No timeline.</p>";
  double end = 0.0;
  int f_lo = std::numeric_limits<int>::max(), f_hi = 0;
  for (const Json& stage : timeline["stages"]) {
    for (const Json& ins : stage["instructions"]) {
      end = std::max(end, ins["end_s"].get<double>());
      f_lo = std::min(f_lo, ins["freq_mhz"].get<int>());
      f_hi = std::max(f_hi, ins["freq_mhz"].get<int>());
    }
  }
  const int stages = static_cast<int>(timeline["stages"].size());
  const bool interleaved = timeline.value("schedule", std::string()) == "interleaved-1f1b";
  const int width = 1100, row = 46, left = 80, top = 30;
  const int height = top + stages * row + 70;
  auto x = [&](double t) { return left + t / end * (width - left - 30); };
  std::string s = "<svg xmlns='http://www.w3.org/2000/svg' width='" + std::to_string(width) +
                  "' height='" + std::to_string(height) + "' font-family='sans-serif'>";
  for (const Json& stage : timeline["stages"]) {
    const int st = stage["stage"];
    const double y = top + st * row;
    s += "<text x='8' y='" + Num(y + row / 2.0 + 4, 1) + "' font-size='12'>stage " +
         std::to_string(st) + "</text>";
    for (const Json& ins : stage["instructions"]) {
      const double x0 = x(ins["start_s"]), x1 = x(ins["end_s"]);
      const int f = ins["freq_mhz"];
      const double u = f_hi == f_lo ? 1.0 : double(f - f_lo) / double(f_hi - f_lo);
      const bool forward = ins["kind"] == "forward";
      const bool sync = ins["kind"] == "gradient_sync";
      // "F3", with interleaved chunks "F3.1" (microbatch 3 on chunk 1); "GS" the stage's
      // gradient-sync tail, "GS.1" chunk 1's buckets (on the communication stream: a thin bar
      // at the bottom of the row, under the compute it overlaps).
      const int chunk = ins.value("chunk", 0);
      std::string text =
          sync ? "GS"
               : std::string(forward ? "F" : "B") + std::to_string(ins["microbatch"].get<int>());
      if (interleaved && (!sync || chunk > 0)) text += "." + std::to_string(chunk);
      if (const auto it = ins.find("gradient_sync"); it != ins.end()) {
        text += std::string(" +DP sync ") +
                ((*it)["overlapped"].get<bool>() ? "overlapped" : "after") + ", " +
                std::to_string((*it)["sms"].get<int>()) + " SMs";
      }
      const bool lane = sync && chunk > 0;
      const double top_y = lane ? y + row - 12 : y + 4;
      const int height = lane ? 8 : row - 10;
      s += "<rect x='" + Num(x0, 1) + "' y='" + Num(top_y, 1) + "' width='" +
           Num(std::max(x1 - x0, 0.5), 1) + "' height='" + std::to_string(height) + "' fill='" +
           internal::HeatColor(u) + "' stroke='" +
           (forward ? "#ffffff"
            : sync  ? "#7a1fa2"
                    : "#222222") +
           "' stroke-width='" + (sync ? "2" : "1") + "'" + (sync ? " stroke-dasharray='4 2'" : "") +
           "><title>" +
           Escape(text + ": " + std::to_string(f) + " MHz, " + ins.value("mode", std::string()) +
                  ", " + Num(ins["start_s"], 3) + "-" + Num(ins["end_s"], 3) + " s") +
           "</title></rect>";
      if (lane) continue;
      const std::string label = text.substr(0, text.find(' '));
      if (x1 - x0 > 6.0 * static_cast<double>(label.size()) + 4.0) {
        s += "<text x='" + Num((x0 + x1) / 2, 1) + "' y='" + Num(y + row / 2.0 + 2, 1) +
             "' font-size='10' text-anchor='middle'>" + Escape(label) + "</text>";
      }
    }
  }
  // Time axis and clock colour bar.
  const double axis_y = top + stages * row + 6;
  for (double t : internal::NiceTicks(0, end, 10)) {
    s += "<text x='" + Num(x(t), 1) + "' y='" + Num(axis_y + 10, 1) +
         "' font-size='10' text-anchor='middle'>" + Num(t, 1) + " s</text>";
  }
  const double bar_y = axis_y + 28;
  for (int i = 0; i < 100; ++i) {
    s += "<rect x='" + Num(left + i * 3.0, 1) + "' y='" + Num(bar_y, 1) +
         "' width='3' height='10' fill='" + internal::HeatColor(i / 99.0) + "'/>";
  }
  s += "<text x='" + Num(left - 6, 1) + "' y='" + Num(bar_y + 9, 1) +
       "' font-size='10' text-anchor='end'>" + std::to_string(f_lo) + " MHz</text>";
  s += "<text x='" + Num(left + 306, 1) + "' y='" + Num(bar_y + 9, 1) + "' font-size='10'>" +
       std::to_string(f_hi) + " MHz (white border: forward, dark: backward" +
       (interleaved ? "; F3.1 = microbatch 3 on chunk 1" : "") + "; dashed: gradient sync)</text>";
  return s + "</svg>";
}

std::string PartitionPlots(const Json& partitions) {
  if (partitions.is_null() || partitions.empty())
    return "<p>No partition frontiers (the method list had no profiled Kareus run).</p>";
  std::string out = "<div class='grid'>";
  for (const Json& type : partitions) {
    double t_lo = std::numeric_limits<double>::infinity(), t_hi = -t_lo, e_lo = t_lo, e_hi = -t_lo;
    int f_lo = std::numeric_limits<int>::max(), f_hi = 0;
    for (const Json& clock : type["clocks"]) {
      f_lo = std::min(f_lo, clock["freq_mhz"].get<int>());
      f_hi = std::max(f_hi, clock["freq_mhz"].get<int>());
      for (const Json& p : clock["points"]) {
        t_lo = std::min(t_lo, p["time_s"].get<double>() * 1e3);
        t_hi = std::max(t_hi, p["time_s"].get<double>() * 1e3);
        e_lo = std::min(e_lo, p["energy_j"].get<double>());
        e_hi = std::max(e_hi, p["energy_j"].get<double>());
      }
    }
    if (!std::isfinite(t_lo)) continue;
    Plot plot(420, 300, t_lo, t_hi, e_lo, e_hi);
    plot.Axes("time (ms)", "energy per GPU (J)");
    for (const Json& clock : type["clocks"]) {
      const int f = clock["freq_mhz"];
      const std::string color =
          internal::HeatColor(f_hi == f_lo ? 1.0 : double(f - f_lo) / double(f_hi - f_lo));
      std::vector<std::pair<double, double>> xy;
      for (const Json& p : clock["points"]) {
        xy.push_back({p["time_s"].get<double>() * 1e3, p["energy_j"].get<double>()});
        plot.Marker(p["time_s"].get<double>() * 1e3, p["energy_j"], color, 2.5,
                    std::to_string(f) + " MHz, " + std::to_string(p["sms"].get<int>()) +
                        " SMs at " + p["slot"].get<std::string>());
      }
      plot.Polyline(xy, color, 1.0);
    }
    out += "<figure><figcaption>" + Escape(type["type"].get<std::string>()) + " (" +
           std::to_string(f_lo) + "-" + std::to_string(f_hi) + " MHz, blue to red)</figcaption>" +
           plot.Finish() + "</figure>";
  }
  return out + "</div>";
}

struct Tables {
  std::vector<std::string> throughput_header = {"method", "time (s)", "energy (kJ)",
                                                "ΔT % vs Megatron-LM", "ΔE % vs Megatron-LM"};
  std::vector<std::vector<std::string>> throughput;
  std::vector<std::string> frontier_header = {
      "method", "iso-time energy reduction % (vs Perseus fastest)",
      "iso-energy time reduction % (vs Perseus lowest energy)"};
  std::vector<std::vector<std::string>> frontier;
  std::vector<std::string> interpolated_header = {
      "method", "deadlines compared (s)", "mean energy saving % at equal time", "max %", "min %"};
  std::vector<std::vector<std::string>> interpolated;
  std::vector<std::string> composition_header = {"method", "composed options",
                                                 "time error % min / median / max",
                                                 "energy error % min / median / max"};
  std::vector<std::vector<std::string>> composition;
  // Every point the solver put on the frontier (kept and dropped): evaluated / predicted - 1.
  std::vector<std::string> prediction_header = {"method", "solver points",
                                                "time error % min / median / max",
                                                "energy error % min / median / max"};
  std::vector<std::vector<std::string>> prediction;
  std::vector<std::string> cost_header = {"method",    "profile (s)",  "compose (s)",
                                          "solve (s)", "evaluate (s)", "profiling GPU-hours"};
  std::vector<std::vector<std::string>> cost;
  std::string peak_memory;  // "" when the summary has none
  std::vector<std::string> plans_header = {"plan file",           "time (s)",
                                           "energy (kJ)",         "average power per GPU (W)",
                                           "ΔT % vs Megatron-LM", "ΔE % vs Megatron-LM"};
  std::vector<std::vector<std::string>> plans;
  std::vector<std::string> dropped_header = {"method",
                                             "solver point",
                                             "predicted time (s)",
                                             "predicted energy (kJ)",
                                             "evaluated time (s)",
                                             "evaluated energy (kJ)",
                                             "dominated by plan"};
  std::vector<std::vector<std::string>> dropped;
  std::vector<std::string> dropped_counts;  // "Kareus: 1 of 18"
};

Tables BuildTables(const Json& summary) {
  Tables t;
  std::map<std::string, std::string> labels;
  for (const Json& m : summary["methods"]) labels[m["method"]] = Label(m);
  auto label = [&](const Json& method) {
    const std::string key = method.get<std::string>();
    return labels.count(key) ? labels[key] : key;
  };
  for (const Json& row : summary["max_throughput"]) {
    t.throughput.push_back({label(row["method"]), FormatFixed(row["time_s"], 3),
                            FormatFixed(row["energy_j"].get<double>() / 1e3, 2),
                            Percent(row["delta_time_pct"]), Percent(row["delta_energy_pct"])});
  }
  for (const Json& row : summary["frontier_table"]) {
    t.frontier.push_back({label(row["method"]), Percent(row["iso_time_energy_reduction_pct"]),
                          Percent(row["iso_energy_time_reduction_pct"])});
  }
  for (const Json& row : summary["interpolated"]) {
    if (!row["overlap"].get<bool>()) {
      t.interpolated.push_back({label(row["method"]), "no frontier", "--", "--", "--"});
      continue;
    }
    // Time ranges that do not intersect: at every deadline compared the faster method runs its
    // cheapest (slowest) plan; say that, not only that the ranges are apart.
    const bool ranges_overlap = row.value("ranges_overlap", true);
    t.interpolated.push_back(
        {label(row["method"]),
         FormatFixed(row["range_begin_s"], 3) + "-" + FormatFixed(row["range_end_s"], 3) +
             (ranges_overlap ? ""
                             : " (one method's plans are all faster than the other's: it runs "
                               "its cheapest plan at every deadline)"),
         Percent(row["mean_saving_pct"]), Percent(row["max_saving_pct"]),
         Percent(row["min_saving_pct"])});
  }
  // Composition error: composed estimate / instruction evaluated end to end - 1.
  // "min / median / max" of percentages, signed, three decimals.
  auto spread = [](double min, double median, double max) {
    auto cell = [](double v) { return (v >= 0 ? "+" : "") + FormatFixed(v, 3); };
    return cell(min) + " / " + cell(median) + " / " + cell(max);
  };
  auto spread_of = [&](const Json& e) { return spread(e["min"], e["median"], e["max"]); };
  for (const Json& m : summary["methods"]) {
    if (!m.contains("composition_error")) continue;
    const Json& c = m["composition_error"];
    t.composition.push_back({label(m["method"]), std::to_string(c["options"].get<int>()),
                             spread_of(c["time_error_pct"]), spread_of(c["energy_error_pct"])});
  }
  // Prediction error: the evaluated plan against the solver's prediction of it, in percent of
  // the prediction, over every solver point (those dropped as dominated included); only for
  // evaluated runs (otherwise the two are the same numbers).
  if (summary.value("evaluated", false)) {
    auto three = [&](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return spread(v.front(), v[v.size() / 2], v.back());
    };
    for (const Json& m : summary["methods"]) {
      std::vector<double> time_pct, energy_pct;
      auto add = [&](double pt, double pe, double et, double ee) {
        if (!(pt > 0.0 && pe > 0.0)) return;
        time_pct.push_back((et / pt - 1.0) * 100.0);
        energy_pct.push_back((ee / pe - 1.0) * 100.0);
      };
      for (const Json& p : m["frontier"]) {
        if (!p.contains("predicted_time_s")) continue;
        add(p["predicted_time_s"], p["predicted_energy_j"], p["time_s"], p["energy_j"]);
      }
      for (const Json& d : m.value("dropped_after_evaluation", Json::array())) {
        add(d["predicted"]["time_s"], d["predicted"]["energy_j"], d["evaluated"]["time_s"],
            d["evaluated"]["energy_j"]);
      }
      if (time_pct.empty()) continue;
      t.prediction.push_back({label(m["method"]), std::to_string(time_pct.size()), three(time_pct),
                              three(energy_pct)});
    }
  }
  // The planner's own cost: wall time per phase on this machine, and the process's peak memory.
  for (const Json& m : summary["methods"]) {
    const Json phases = m.value("phase_wall_s", Json::object());
    auto phase = [&](const char* name) {
      return phases.contains(name) ? FormatFixed(phases[name], 1) : std::string("--");
    };
    t.cost.push_back(
        {label(m["method"]), phase("profile"), phase("compose"), phase("solve"), phase("evaluate"),
         m.contains("profiling_gpu_hours") ? FormatFixed(m["profiling_gpu_hours"], 2) : "--"});
  }
  for (const Json& row : summary.value("plan_files", Json::array())) {
    t.plans.push_back(
        {row["file"].get<std::string>() + (row["plan_json"].get<bool>() ? " (plan.json)" : ""),
         FormatFixed(row["time_s"], 4), FormatFixed(row["energy_j"].get<double>() / 1e3, 3),
         FormatFixed(row["average_power_w"], 1), Percent(row["delta_time_pct"]),
         Percent(row["delta_energy_pct"])});
  }
  for (const Json& m : summary["methods"]) {
    const Json dropped = m.value("dropped_after_evaluation", Json::array());
    if (dropped.empty()) continue;
    t.dropped_counts.push_back(Label(m) + ": " + std::to_string(dropped.size()) + " of " +
                               std::to_string(dropped.size() + m["frontier"].size()));
    for (const Json& d : dropped) {
      t.dropped.push_back({Label(m), std::to_string(d["solver_index"].get<int>()),
                           FormatFixed(d["predicted"]["time_s"], 4),
                           FormatFixed(d["predicted"]["energy_j"].get<double>() / 1e3, 3),
                           FormatFixed(d["evaluated"]["time_s"], 4),
                           FormatFixed(d["evaluated"]["energy_j"].get<double>() / 1e3, 3),
                           std::to_string(d["dominated_by"].get<int>())});
    }
  }
  if (summary.contains("peak_rss_mib")) {
    t.peak_memory =
        "Peak memory of the planning process: " + FormatFixed(summary["peak_rss_mib"], 0) + " MiB";
  }
  return t;
}

// "Kareus: 1 of 18, Perseus: 1 of 15" frontier points dropped, in words.
std::string DroppedSentence(const Tables& t) {
  std::string counts;
  for (const auto& c : t.dropped_counts) counts += (counts.empty() ? "" : "; ") + c;
  return "Frontier points dominated once evaluated (another plan's evaluated time and energy "
         "both no worse), dropped from the frontier, its files and its sample: " +
         counts + ".";
}

std::string TextTable(const std::vector<std::string>& header,
                      const std::vector<std::vector<std::string>>& rows) {
  Table table(header);
  for (const auto& row : rows) table.AddRow(row);
  return table.ToString();
}

}  // namespace

std::string RenderTables(const Json& summary) {
  const Tables t = BuildTables(summary);
  std::string out;
  out += "Max-throughput plans (fastest plan of each method vs Megatron-LM; + = less):\n";
  out += TextTable(t.throughput_header, t.throughput);
  out += "\nFrontier vs Perseus (published definition: best sampled plan, no interpolation):\n";
  out += TextTable(t.frontier_header, t.frontier);
  out +=
      "\nWhole frontier vs Perseus (energy saving at equal time, at every deadline from the later "
      "fastest plan to the later slowest plan):\n";
  out += TextTable(t.interpolated_header, t.interpolated);
  if (!t.dropped_counts.empty()) out += DroppedSentence(t) + "\n";
  if (!t.prediction.empty()) {
    out += "\nPrediction error (each frontier plan evaluated vs the solver's prediction of it):\n";
    out += TextTable(t.prediction_header, t.prediction);
  }
  if (!t.composition.empty()) {
    out += "\nComposition error (composed estimate vs the instruction evaluated end to end):\n";
    out += TextTable(t.composition_header, t.composition);
  }
  out += "\nPlanning cost (wall time per phase on this machine):\n";
  out += TextTable(t.cost_header, t.cost);
  if (!t.peak_memory.empty()) out += t.peak_memory + "\n";
  return out;
}

std::string RenderHtml(const Json& summary) {
  const Tables t = BuildTables(summary);
  const Json& w = summary["workload"];
  std::string html =
      "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Kareus report: " +
      Escape(w.value("name", std::string("workload"))) +
      "</title><style>body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}"
      "h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}"
      "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:4px 8px;"
      "font-size:13px;text-align:right}th{background:#f3f3f6}td:first-child{text-align:left}"
      ".grid{display:flex;flex-wrap:wrap;gap:8px}figure{margin:0}figcaption{font-size:13px}"
      "pre{background:#f6f6f8;padding:8px;font-size:12px;overflow:auto}.note{color:#555;font-size:"
      "13px}"
      "</style></head><body>";
  html += "<h1>Kareus report: " + Escape(w.value("name", std::string())) + "</h1>";
  const std::string caveat = summary.value("caveat", std::string());
  if (!caveat.empty()) {
    html +=
        "<p style='background:#fff4d6;border:1px solid #e0b84c;padding:8px 12px;font-size:14px'>"
        "<b>Read first.</b> " +
        Escape(caveat) + "</p>";
  }
  html += "<p class='note'>" + Escape(summary.value("source_note", std::string())) + "</p>";
  html += "<h2>Iteration time–energy frontiers</h2>" + FrontierPlot(summary);
  html +=
      "<p class='note'>Lines: every frontier point of each method; dots: the sampled plans "
      "(the published evaluation's 10); rings: each method's fastest plan; dashed: "
      "Perseus's fastest time and lowest energy, the references of the iso metrics.</p>";
  if (!t.plans.empty()) {
    std::string main_label = "Kareus";
    for (const Json& m : summary["methods"]) {
      if (m["method"] == summary["timeline"].value("method", std::string("kareus")))
        main_label = Label(m);
    }
    html += "<h2>Plan files: which plan to run (" + Escape(main_label) + ")</h2>" +
            HtmlTable(t.plans_header, t.plans) +
            "<p class='note'>Every plan in plans/, slowest first, with its evaluated iteration "
            "time and energy (all GPUs), the average power of one GPU over the iteration, and "
            "both against Megatron-LM's fastest plan (+ = less). For a deadline, run the "
            "lowest-energy plan within it; for a power budget, the fastest plan within it: "
            "<code>kareus pick OUT --deadline S</code> or <code>--power W</code> prints it.</p>";
  }
  if (!t.dropped.empty()) {
    html += "<h3>Plans dropped after evaluation</h3><p class='note'>" + Escape(DroppedSentence(t)) +
            " The solver ranked them on the frontier by their predicted costs.</p>" +
            HtmlTable(t.dropped_header, t.dropped);
  }
  html += "<h2>Comparison tables</h2>";
  html +=
      "<h3>Max-throughput plans vs Megatron-LM</h3>" + HtmlTable(t.throughput_header, t.throughput);
  html += "<h3>Frontier vs Perseus (published definition)</h3>" +
          HtmlTable(t.frontier_header, t.frontier);
  html +=
      "<h3>Whole frontier vs Perseus at equal time (every deadline from the later fastest "
      "plan to the later slowest)</h3>" +
      HtmlTable(t.interpolated_header, t.interpolated);
  if (!t.prediction.empty()) {
    html += "<h3>Prediction error</h3>" + HtmlTable(t.prediction_header, t.prediction) +
            "<p class='note'>Every plan the solver put on the frontier (those dropped after "
            "evaluation included), evaluated, against the solver's prediction of it, in percent "
            "of the prediction. The solver takes each measured option's value as exact: what "
            "remains is measurement noise, the composition error below and the idle power of "
            "a waiting GPU.</p>";
  }
  if (!t.composition.empty()) {
    html += "<h3>Composition error</h3>" + HtmlTable(t.composition_header, t.composition) +
            "<p class='note'>Each composed instruction option (the sum of its partitions' measured "
            "fronts plus the fixed work) against the same instruction evaluated end to end, in "
            "percent; Kareus's includes its profiling noise, the oracle's is composition "
            "alone.</p>";
  }
  html += "<h3>Planning cost</h3>" + HtmlTable(t.cost_header, t.cost) +
          "<p class='note'>Wall time per phase of this run on the machine that planned it" +
          (t.peak_memory.empty() ? std::string() : "; " + Escape(t.peak_memory)) + ".</p>";
  const std::string schedule = summary["timeline"].value("schedule", std::string("1f1b"));
  const std::string schedule_name = schedule == "interleaved-1f1b" ? "interleaved 1F1B"
                                    : schedule == "gpipe"          ? "GPipe"
                                                                   : "1F1B";
  html += "<h2>Fastest " + Escape(summary["timeline"].value("label", std::string("Kareus"))) +
          " plan: " + schedule_name + " timeline coloured by clock</h2>" +
          TimelinePlot(summary["timeline"]);
  html += "<h2>Partition frontiers per clock (measured)</h2>" +
          PartitionPlots(summary.value("partition_frontiers", Json()));
  html += "<h2>Workload and settings</h2><pre>" + Escape(w.dump(2)) + "</pre><pre>" +
          Escape(summary.value("settings", Json::object()).dump(2)) + "</pre>";
  html += "</body></html>\n";
  return html;
}

std::string RenderEvaluationTable(const Json& evaluation) {
  std::vector<std::string> header = {"workload"};
  std::vector<std::string> methods;
  for (const Json& row : evaluation["rows"]) {
    for (const Json& m : row["max_throughput"]) {
      const std::string name = m["method"];
      if (name != "megatron" && std::find(methods.begin(), methods.end(), name) == methods.end()) {
        methods.push_back(name);
      }
    }
  }
  for (const auto& m : methods) header.push_back(m + " ΔT/ΔE %");
  header.push_back("Kareus iso-time ΔE %");
  header.push_back("Kareus iso-energy ΔT %");
  header.push_back("N+P iso-time ΔE %");
  header.push_back("Kareus mean saving % vs Perseus");
  std::vector<std::vector<std::string>> rows;
  for (const Json& row : evaluation["rows"]) {
    std::vector<std::string> cells = {row["workload"]};
    for (const auto& name : methods) {
      std::string cell = "--";
      for (const Json& m : row["max_throughput"]) {
        if (m["method"] == name)
          cell = Percent(m["delta_time_pct"]) + " / " + Percent(m["delta_energy_pct"]);
      }
      cells.push_back(cell);
    }
    auto frontier = [&](const std::string& method, const std::string& field) {
      for (const Json& f : row["frontier_table"]) {
        if (f["method"] == method) return Percent(f[field]);
      }
      return std::string("--");
    };
    cells.push_back(frontier("kareus", "iso_time_energy_reduction_pct"));
    cells.push_back(frontier("kareus", "iso_energy_time_reduction_pct"));
    cells.push_back(frontier("nanobatching+perseus", "iso_time_energy_reduction_pct"));
    std::string mean = "--";
    for (const Json& i : row["interpolated"]) {
      if (i["method"] == "kareus" && i["overlap"].get<bool>()) mean = Percent(i["mean_saving_pct"]);
    }
    cells.push_back(mean);
    rows.push_back(cells);
  }
  return TextTable(header, rows);
}

}  // namespace kareus::report
