// SPDX-License-Identifier: Apache-2.0
#include "kareus/report/report.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "kareus/common/io.h"

namespace kareus::report {
namespace {

// A small but complete summary.json document (format kareus.summary/1).
Json SyntheticSummary() {
  auto frontier = [](double t0, double e0, int n) {
    Json points = Json::array();
    for (int i = 0; i < n; ++i) {
      points.push_back({{"time_s", t0 + 0.1 * i},
                        {"energy_j", e0 - 40.0 * i + 2.0 * i * i},
                        {"static_energy_j", 85.0 * 16 * (t0 + 0.1 * i)},
                        {"plan_index", i}});
    }
    return points;
  };
  Json methods = Json::array();
  const std::vector<std::tuple<std::string, std::string, double, double, int>> specs = {
      {"megatron", "Megatron-LM", 5.4, 3000, 1},
      {"perseus", "Perseus", 5.1, 2800, 12},
      {"nanobatching+perseus", "Nanobatching+Perseus", 4.7, 2650, 12},
      {"kareus", "Kareus <&>", 4.4, 2600, 12}};
  for (const auto& [name, label, t0, e0, n] : specs) {
    const Json f = frontier(t0, e0, n);
    Json sampled = Json::array();
    for (int i = 0; i < n; ++i) sampled.push_back(i);
    methods.push_back({{"method", name},
                       {"label", label},
                       {"frontier", f},
                       {"sampled_plans", sampled},
                       {"fastest", f[0]},
                       {"lowest_energy", f[n - 1]}});
  }
  methods.back()["dropped_after_evaluation"] = {
      {{"solver_index", 3},
       {"dominated_by", 4},
       {"predicted", {{"time_s", 4.71}, {"energy_j", 2481.0}}},
       {"evaluated", {{"time_s", 4.83}, {"energy_j", 2490.0}}}}};
  Json plan_files = Json::array();
  for (int i : {11, 8, 5, 2, 0}) {
    plan_files.push_back({{"file", "plans/plan_" + std::string(i < 10 ? "0000" : "000") +
                                       std::to_string(i) + ".json"},
                          {"plan_index", i},
                          {"plan_json", i == 0},
                          {"time_s", 4.4 + 0.1 * i},
                          {"energy_j", 2600.0 - 40.0 * i},
                          {"average_power_w", 300.0 - 10 * i},
                          {"delta_time_pct", i == 8 ? -0.01 : 18.5 - 2 * i},
                          {"delta_energy_pct", 13.3 + i}});
  }
  Json timeline{{"label", "Kareus"}, {"stages", Json::array()}};
  for (int s = 0; s < 2; ++s) {
    Json ins = Json::array();
    for (int m = 0; m < 4; ++m) {
      ins.push_back({{"kind", "forward"},
                     {"microbatch", m},
                     {"start_s", 0.2 * m + 0.1 * s},
                     {"end_s", 0.2 * m + 0.1 * s + 0.1},
                     {"freq_mhz", 900 + 170 * m},
                     {"mode", "nanobatched"}});
    }
    timeline["stages"].push_back({{"stage", s}, {"instructions", ins}});
  }
  Json clocks = Json::array();
  for (int f : {1410, 1110, 900}) {
    clocks.push_back({{"freq_mhz", f},
                      {"points",
                       {{{"time_s", 0.01 * 1410 / f},
                         {"energy_j", 3.0 - f / 1000.0},
                         {"sms", 12},
                         {"slot", "norm_0"}},
                        {{"time_s", 0.012 * 1410 / f},
                         {"energy_j", 2.8 - f / 1000.0},
                         {"sms", 6},
                         {"slot", "rope_0"}}}}});
  }
  return {{"format", "kareus.summary/1"},
          {"caveat", "Emulator results: a synthetic summary."},
          {"plan_files", plan_files},
          {"workload", {{"name", "synthetic"}}},
          {"settings", {{"seed", 1}}},
          {"methods", methods},
          {"max_throughput",
           {{{"method", "megatron"},
             {"time_s", 5.4},
             {"energy_j", 3000.0},
             {"delta_time_pct", 0.0},
             {"delta_energy_pct", 0.0}},
            {{"method", "kareus"},
             {"time_s", 4.4},
             {"energy_j", 2600.0},
             {"delta_time_pct", 18.5},
             {"delta_energy_pct", 13.3}}}},
          {"frontier_table",
           {{{"method", "kareus"},
             {"iso_time_energy_reduction_pct", 9.0},
             {"iso_energy_time_reduction_pct", nullptr}}}},
          {"interpolated",
           {{{"method", "kareus"},
             {"overlap", true},
             {"range_begin_s", 5.1},
             {"range_end_s", 5.5},
             {"mean_saving_pct", 8.0},
             {"max_saving_pct", 9.0},
             {"min_saving_pct", 7.0}}}},
          {"timeline", timeline},
          {"partition_frontiers", {{{"type", "fwd_attn"}, {"clocks", clocks}}}}};
}

TEST(Report, HtmlIsSelfContainedWithThePlots) {
  const std::string html = RenderHtml(SyntheticSummary());
  EXPECT_NE(html.find("<!DOCTYPE html>"), std::string::npos);
  size_t svgs = 0;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1))
    ++svgs;
  EXPECT_GE(svgs, 3u);  // frontier, timeline, one partition plot
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://www.w3.org/2000/svg") == std::string::npos, false);
  // No network: the only URL is the SVG namespace.
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_NE(html.find("Kareus &lt;&amp;&gt;"), std::string::npos);  // labels are escaped
  EXPECT_NE(html.find("iso-time"), std::string::npos);
}

// A user picks a plan from the report: the plan files' table (fastest marked as plan.json),
// the caveat before anything else, and the plans the evaluation dropped, with numbers.
TEST(Report, PlanTableCaveatFirstAndDroppedPlans) {
  const std::string html = RenderHtml(SyntheticSummary());
  const auto caveat = html.find("Emulator results: a synthetic summary.");
  ASSERT_NE(caveat, std::string::npos);
  EXPECT_LT(caveat, html.find("<svg"));
  const auto table = html.find("Plan files: which plan to run");
  ASSERT_NE(table, std::string::npos);
  EXPECT_NE(html.find("plans/plan_00011.json", table), std::string::npos);
  EXPECT_NE(html.find("plans/plan_00000.json (plan.json)", table), std::string::npos);
  EXPECT_NE(html.find("<td>300.0</td>", table), std::string::npos);  // average power per GPU
  EXPECT_EQ(html.find("-0.0"), std::string::npos);  // -0.01 % has no sign at one decimal
  EXPECT_NE(html.find("Plans dropped after evaluation"), std::string::npos);
  EXPECT_NE(html.find("<td>4.8300</td>"), std::string::npos);
  EXPECT_NE(html.find("Kareus &lt;&amp;&gt;: 1 of 13"), std::string::npos);
  const std::string text = RenderTables(SyntheticSummary());
  EXPECT_NE(text.find("Kareus <&>: 1 of 13"), std::string::npos) << text;
  Json without = SyntheticSummary();
  without.erase("caveat");
  without.erase("plan_files");
  const std::string plain = RenderHtml(without);  // older summaries render too
  EXPECT_EQ(plain.find("Read first"), std::string::npos);
  EXPECT_EQ(plain.find("Plan files"), std::string::npos);
}

TEST(Report, TerminalTablesShowDashForInfeasible) {
  const std::string text = RenderTables(SyntheticSummary());
  EXPECT_NE(text.find("Max-throughput"), std::string::npos);
  EXPECT_NE(text.find("+18.5"), std::string::npos);
  EXPECT_NE(text.find("--"), std::string::npos);
}

// The prediction error: each solver point's evaluated cost against its prediction, kept and
// dropped points alike, for evaluated runs only.
TEST(Report, PredictionErrorOverEverySolverPoint) {
  Json summary = SyntheticSummary();
  EXPECT_EQ(RenderTables(summary).find("Prediction error"), std::string::npos);  // not evaluated
  summary["evaluated"] = true;
  for (Json& m : summary["methods"]) {
    if (m["method"] != "kareus") continue;
    for (Json& p : m["frontier"]) {  // predicted 1 % below the evaluation on time, 2 % on energy
      p["predicted_time_s"] = p["time_s"].get<double>() / 1.01;
      p["predicted_energy_j"] = p["energy_j"].get<double>() / 1.02;
    }
  }
  // The dropped point: 4.71 s, 2481 J predicted; 4.83 s, 2490 J evaluated.
  const std::string text = RenderTables(summary);
  const auto table = text.find("Prediction error");
  ASSERT_NE(table, std::string::npos) << text;
  const std::string row = text.substr(text.find("Kareus <&>", table), 160);
  EXPECT_NE(row.find(" 13 "), std::string::npos) << row;                      // 12 kept + 1 dropped
  EXPECT_NE(row.find("+1.000 / +1.000 / +2.548"), std::string::npos) << row;  // 4.83 / 4.71
  EXPECT_NE(row.find("+0.363 / +2.000 / +2.000"), std::string::npos) << row;  // 2490 / 2481
  // Methods whose points carry no prediction have no row.
  const std::string block = text.substr(table, text.find("\n\n", table) - table);
  EXPECT_EQ(block.find("Perseus"), std::string::npos) << block;
  EXPECT_NE(RenderHtml(summary).find("<h3>Prediction error</h3>"), std::string::npos);
}

// The planner's cost: wall time per phase of each method and the process's peak memory, when
// the summary has them ("--" for a phase a method did not run).
TEST(Report, PlanningCostTableWithPhasesAndPeakMemory) {
  Json summary = SyntheticSummary();
  EXPECT_EQ(RenderTables(summary).find("Peak memory"), std::string::npos);
  summary["peak_rss_mib"] = 133.8;
  for (Json& m : summary["methods"]) {
    if (m["method"] == "kareus") {
      m["phase_wall_s"] = {
          {"profile", 5.04}, {"compose", 0.01}, {"solve", 277.12}, {"evaluate", 0.7}};
      m["profiling_gpu_hours"] = 76.5155;
    }
  }
  const std::string text = RenderTables(summary);
  EXPECT_NE(text.find("Planning cost"), std::string::npos) << text;
  EXPECT_NE(text.find("277.1"), std::string::npos) << text;
  EXPECT_NE(text.find("76.52"), std::string::npos) << text;
  EXPECT_NE(text.find("Peak memory of the planning process: 134 MiB"), std::string::npos) << text;
  EXPECT_NE(RenderHtml(summary).find("Planning cost"), std::string::npos);
}

TEST(Report, WritesASampleForTheBrowserCheck) {
  // The CTest entry report_render_check renders this file in headless Chromium.
  const char* dir = std::getenv("KAREUS_BINARY_DIR");
  ASSERT_NE(dir, nullptr);
  WriteFileAtomic(std::filesystem::path(dir) / "tests" / "report" / "synthetic_report.html",
                  RenderHtml(SyntheticSummary()));
}

}  // namespace
}  // namespace kareus::report
