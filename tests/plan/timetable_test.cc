// SPDX-License-Identifier: Apache-2.0
// Timetables (kareus/plan/timetable.h): the water-filling solver against the same problem as a
// mixed-integer program in GLPK on random frontiers, signals and caps; the signal CSV reader;
// times and durations; timetable.json both ways.
#include "kareus/plan/timetable.h"

#include <glpk.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>

namespace kareus::plan {
namespace {

constexpr double kJoulesPerKwh = 3.6e6;

// The problem as a MILP: x[k][p] seconds of plan p in interval k, y[k] seconds paused, b[k] = 1
// while the job has not finished before interval k begins (b[0] = 1, non-increasing). Interval
// k holds at most L_k b_k seconds of work and pause, and all of L_k when the job goes on into
// k + 1 (b_{k+1} = 1). Independent of the solver's hull and finish-interval reasoning.
std::optional<double> MilpOptimum(const ScheduleProblem& problem) {
  const int K = static_cast<int>(problem.intervals.size());
  const int P = static_cast<int>(problem.plans.size());
  glp_prob* lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  const int per = P + 2;  // x[k][0..P-1], y[k], b[k]
  glp_add_cols(lp, K * per);
  const auto x = [&](int k, int p) { return k * per + p + 1; };
  const auto y = [&](int k) { return k * per + P + 1; };
  const auto b = [&](int k) { return k * per + P + 2; };
  for (int k = 0; k < K; ++k) {
    const ScheduleInterval& in = problem.intervals[k];
    const double price = in.signal;  // cost x 3.6e6: GLPK's tolerances are absolute
    for (int p = 0; p < P; ++p) {
      const bool fits = problem.plans[p].power_w() / problem.gpus <= in.power_cap_w * (1 + 1e-12);
      glp_set_col_bnds(lp, x(k, p), fits ? GLP_DB : GLP_FX, 0.0, fits ? in.length() : 0.0);
      glp_set_obj_coef(lp, x(k, p), price * problem.plans[p].power_w());
    }
    if (problem.allow_pause) {
      glp_set_col_bnds(lp, y(k), GLP_DB, 0.0, in.length());
    } else {
      glp_set_col_bnds(lp, y(k), GLP_FX, 0.0, 0.0);
    }
    glp_set_obj_coef(lp, y(k), price * problem.idle_power_w);
    glp_set_col_kind(lp, b(k), GLP_BV);
    if (k == 0) glp_set_col_bnds(lp, b(k), GLP_FX, 1.0, 1.0);
  }
  std::vector<int> ia = {0}, ja = {0};
  std::vector<double> ar = {0.0};
  const auto row = [&](int type, double lo, double hi) {
    const int r = glp_add_rows(lp, 1);
    glp_set_row_bnds(lp, r, type, lo, hi);
    return r;
  };
  const auto put = [&](int r, int col, double v) {
    ia.push_back(r);
    ja.push_back(col);
    ar.push_back(v);
  };
  for (int k = 0; k < K; ++k) {
    const double length = problem.intervals[k].length();
    const int upper = row(GLP_UP, 0.0, 0.0);  // sum x + y - L b_k <= 0
    for (int p = 0; p < P; ++p) put(upper, x(k, p), 1.0);
    put(upper, y(k), 1.0);
    put(upper, b(k), -length);
    if (k + 1 < K) {
      const int lower = row(GLP_LO, 0.0, 0.0);  // sum x + y - L b_{k+1} >= 0
      for (int p = 0; p < P; ++p) put(lower, x(k, p), 1.0);
      put(lower, y(k), 1.0);
      put(lower, b(k + 1), -length);
      const int monotone = row(GLP_LO, 0.0, 0.0);  // b_k - b_{k+1} >= 0
      put(monotone, b(k), 1.0);
      put(monotone, b(k + 1), -1.0);
    }
  }
  const int work = row(GLP_FX, problem.iterations, problem.iterations);
  for (int k = 0; k < K; ++k) {
    for (int p = 0; p < P; ++p) put(work, x(k, p), 1.0 / problem.plans[p].time_s);
  }
  glp_load_matrix(lp, static_cast<int>(ia.size()) - 1, ia.data(), ja.data(), ar.data());
  glp_term_out(GLP_OFF);
  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.presolve = GLP_ON;
  parm.mip_gap = 0.0;
  parm.tol_int = 1e-9;
  std::optional<double> answer;
  if (glp_intopt(lp, &parm) == 0 && glp_mip_status(lp) == GLP_OPT) {
    answer = glp_mip_obj_val(lp) / kJoulesPerKwh;
  }
  glp_delete_prob(lp);
  return answer;
}

// A random frontier: faster plans draw more power; energy = static + dynamic, the dynamic part
// falling with time (not necessarily convex: the solver takes the hull).
ScheduleProblem RandomProblem(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  ScheduleProblem problem;
  problem.gpus = 1 + static_cast<int>(u(rng) * 8);
  const double idle_per_gpu = 40 + 60 * u(rng);
  problem.idle_power_w = idle_per_gpu * problem.gpus;
  const int num_plans = 1 + static_cast<int>(u(rng) * 7);
  double t = 1.0 + u(rng);
  double dynamic = (1.5 + 2 * u(rng)) * problem.idle_power_w * t;
  for (int p = 0; p < num_plans; ++p) {
    problem.plans.push_back({.name = "plan" + std::to_string(p),
                             .time_s = t,
                             .energy_j = problem.idle_power_w * t + dynamic});
    t *= 1.02 + 0.15 * u(rng);
    dynamic *= 0.80 + 0.17 * u(rng);
  }
  const int num_intervals = 2 + static_cast<int>(u(rng) * 9);
  double start = 1.7e9;
  double max_power = 0.0, min_power = 1e300;
  for (const SchedulePlan& plan : problem.plans) {
    max_power = std::max(max_power, plan.power_w() / problem.gpus);
    min_power = std::min(min_power, plan.power_w() / problem.gpus);
  }
  double horizon = 0.0;
  for (int k = 0; k < num_intervals; ++k) {
    ScheduleInterval in;
    in.start = start;
    in.end = start + (20 + 200 * u(rng)) * problem.plans.front().time_s;
    in.signal = 0.02 + u(rng);
    const double c = u(rng);
    if (c < 0.2) {
      in.power_cap_w = min_power * (0.5 + 0.4 * u(rng));  // no plan fits
    } else if (c < 0.5) {
      in.power_cap_w = min_power + (max_power - min_power) * u(rng);
    }
    problem.intervals.push_back(in);
    horizon += in.length();
    start = in.end;
  }
  problem.allow_pause = u(rng) < 0.8;
  // From easy to barely feasible (or infeasible) deadlines.
  problem.iterations =
      std::max(1.0, horizon / problem.plans.front().time_s * (0.05 + 0.95 * u(rng)));
  return problem;
}

// Deadlines, caps and the iteration count hold; the parts add up to the totals.
void ExpectHonours(const ScheduleProblem& problem, const Timetable& t, int instance) {
  double iterations = 0.0, cost = 0.0, energy = 0.0;
  ASSERT_LE(t.intervals.size(), problem.intervals.size());
  for (std::size_t k = 0; k < t.intervals.size(); ++k) {
    const TimetableInterval& in = t.intervals[k];
    double busy = in.pause_s;
    EXPECT_LE(in.entries.size(), 2u) << instance;
    EXPECT_TRUE(problem.allow_pause || in.pause_s == 0.0) << instance;
    for (const TimetableEntry& e : in.entries) {
      busy += e.seconds;
      iterations += e.iterations;
      EXPECT_LE(problem.plans[e.plan].power_w() / problem.gpus,
                problem.intervals[k].power_cap_w * (1 + 1e-9))
          << "instance " << instance << " interval " << k << ": over its cap";
      EXPECT_NEAR(e.iterations * problem.plans[e.plan].time_s, e.seconds, 1e-9 * e.seconds);
    }
    EXPECT_LE(busy, problem.intervals[k].length() * (1 + 1e-9)) << instance;
    // Every interval before the last is held whole.
    if (k + 1 < t.intervals.size()) {
      EXPECT_NEAR(busy, problem.intervals[k].length(), 1e-6 * problem.intervals[k].length())
          << instance;
    }
    cost += in.cost;
    energy += in.energy_j;
  }
  EXPECT_NEAR(iterations, problem.iterations, 1e-7 * problem.iterations) << instance;
  EXPECT_NEAR(cost, t.total_cost, 1e-9 * std::max(1.0, cost)) << instance;
  EXPECT_NEAR(energy, t.total_energy_j, 1e-9 * energy) << instance;
  EXPECT_LE(t.finish, problem.deadline() + 1e-6) << instance;
}

TEST(TimetableTest, WaterFillingMatchesTheMilpOnRandomProblems) {
  std::mt19937_64 rng(20261202);
  int solved = 0, infeasible = 0, paused = 0, mixed = 0, beat_constant = 0;
  const int instances = std::getenv("KAREUS_TIMETABLE_INSTANCES") != nullptr
                            ? std::atoi(std::getenv("KAREUS_TIMETABLE_INSTANCES"))
                            : 400;
  for (int instance = 0; instance < instances; ++instance) {
    const ScheduleProblem problem = RandomProblem(rng);
    const std::optional<double> milp = MilpOptimum(problem);
    std::optional<Timetable> t;
    try {
      t = SolveSchedule(problem);
    } catch (const InputError& e) {
      EXPECT_FALSE(milp.has_value()) << "instance " << instance << ": refused (" << e.what()
                                     << ") but the MILP finds " << *milp;
      ++infeasible;
      continue;
    }
    ASSERT_TRUE(milp.has_value()) << "instance " << instance << ": the MILP finds no timetable";
    EXPECT_NEAR(t->total_cost, *milp, 1e-6 * std::max(1e-9, std::abs(*milp)))
        << "instance " << instance;
    ExpectHonours(problem, *t, instance);
    if (t->best_constant) {
      EXPECT_LE(t->total_cost, t->best_constant->cost * (1 + 1e-9)) << instance;
      if (t->total_cost < t->best_constant->cost * (1 - 1e-6)) ++beat_constant;
    }
    for (const TimetableInterval& in : t->intervals) {
      paused += in.pause_s > 0 ? 1 : 0;
      mixed += in.entries.size() == 2 ? 1 : 0;
    }
    ++solved;
  }
  // The instances exercise every case: pauses, two-plan mixes, refusals, savings.
  EXPECT_GT(solved, 200);
  EXPECT_GT(infeasible, 10);
  EXPECT_GT(paused, 50);
  EXPECT_GT(mixed, 50);
  EXPECT_GT(beat_constant, 50);
  std::printf(
      "%d solved (%d beat the best constant plan), %d refused; %d intervals paused, %d "
      "mixing two plans\n",
      solved, beat_constant, infeasible, paused, mixed);
}

// The solver's incremental finish-interval costs equal filling every finish interval from
// scratch, interval by interval.
TEST(TimetableTest, IncrementalFinishCostsEqualTheFillFromScratch) {
  std::mt19937_64 rng(7);
  int compared = 0;
  for (int instance = 0; instance < 300; ++instance) {
    const ScheduleProblem problem = RandomProblem(rng);
    const auto fast = internal::FinishIntervalCosts(problem, true);
    const auto slow = internal::FinishIntervalCosts(problem, false);
    ASSERT_EQ(fast.size(), slow.size());
    for (std::size_t m = 0; m < fast.size(); ++m) {
      ASSERT_EQ(fast[m].has_value(), slow[m].has_value()) << instance << " m " << m;
      if (!fast[m]) continue;
      EXPECT_NEAR(*fast[m], *slow[m], 1e-9 * std::max(1e-12, std::abs(*slow[m])))
          << instance << " m " << m;
      ++compared;
    }
  }
  EXPECT_GT(compared, 500);
}

ScheduleProblem TwoPlans() {
  ScheduleProblem p;
  p.plans = {{.name = "fast", .time_s = 1.0, .energy_j = 300.0},
             {.name = "slow", .time_s = 1.25, .energy_j = 250.0}};
  p.idle_power_w = 100.0;
  p.gpus = 1;
  for (int k = 0; k < 3; ++k) {
    p.intervals.push_back(
        {.start = 1000.0 * k, .end = 1000.0 * (k + 1), .signal = k == 1 ? 10.0 : 1.0});
  }
  return p;
}

// A hand-checked case: an expensive middle hour is paused through, the work moved to the cheap
// hours around it.
TEST(TimetableTest, PausesThroughTheExpensiveInterval) {
  ScheduleProblem p = TwoPlans();
  p.iterations = 1900;  // 2 cheap intervals at the fast plan: 2000 iterations
  const Timetable t = SolveSchedule(p);
  ASSERT_EQ(t.intervals.size(), 3u);
  EXPECT_DOUBLE_EQ(t.intervals[1].pause_s, 1000.0);
  EXPECT_TRUE(t.intervals[1].entries.empty());
  EXPECT_NEAR(t.total_iterations, 1900, 1e-9);
  // The best constant plan is the slow one from the start (1900 x 1.25 s = 2375 s <= 3000 s),
  // through the expensive hour.
  ASSERT_TRUE(t.best_constant.has_value());
  EXPECT_EQ(p.plans[t.best_constant->plan].name, "slow");
  EXPECT_LT(t.total_cost, t.best_constant->cost);
  // Without pauses it runs the slow plan through the middle hour (the cheapest way to hold it).
  p.allow_pause = false;
  const Timetable no_pause = SolveSchedule(p);
  EXPECT_EQ(no_pause.intervals[1].pause_s, 0.0);
  ASSERT_EQ(no_pause.intervals[1].entries.size(), 1u);
  EXPECT_EQ(p.plans[no_pause.intervals[1].entries[0].plan].name, "slow");
}

TEST(TimetableTest, InfeasibleRequestsNameTheBound) {
  ScheduleProblem p = TwoPlans();
  p.iterations = 3001;  // 3000 s at 1 s per iteration
  try {
    SolveSchedule(p);
    ADD_FAILURE() << "a deadline nobody can meet was accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--deadline"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("finish at the earliest at 1970-01-01T00:50:01Z"));
  }
  p.iterations = 100;
  p.allow_pause = false;
  for (auto& in : p.intervals) in.power_cap_w = 150.0;  // both plans draw 200 W or more
  try {
    SolveSchedule(p);
    ADD_FAILURE() << "a cap below every plan without pauses was accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("--power-cap"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("the lowest is 200.0 W per GPU"));
  }
  p.allow_pause = true;  // paused all along, the job never finishes either
  EXPECT_THROW(SolveSchedule(p), InputError);
}

TEST(TimetableTest, TimesAndDurations) {
  EXPECT_EQ(ParseUtcTime("1970-01-01T00:00:00Z"), 0.0);
  EXPECT_EQ(ParseUtcTime("2026-03-02T14:00:00Z"), 1772460000.0);
  EXPECT_EQ(ParseUtcTime("2026-03-02 14:00:00"), 1772460000.0);
  EXPECT_EQ(ParseUtcTime("2026-03-02T15:00:00+01:00"), 1772460000.0);
  EXPECT_EQ(ParseUtcTime("2026-03-02T14:00"), 1772460000.0);
  EXPECT_EQ(ParseUtcTime("2026-03-02T14:00:00.500Z"), 1772460000.5);
  EXPECT_EQ(ParseUtcTime("2024-02-29"), 1709164800.0);
  for (const char* bad : {"", "2026-13-01", "2025-02-29", "2026-03-02T25:00", "2026-03-02X",
                          "02/03/2026", "2026-03-02T14:00:00+1", "1772460000"}) {
    EXPECT_FALSE(ParseUtcTime(bad).has_value()) << bad;
  }
  EXPECT_EQ(FormatUtcTime(1772460000.0), "2026-03-02T14:00:00Z");
  EXPECT_EQ(ParseDuration("36h"), 36 * 3600.0);
  EXPECT_EQ(ParseDuration("1h30m"), 5400.0);
  EXPECT_EQ(ParseDuration("2d"), 172800.0);
  EXPECT_EQ(ParseDuration("3600"), 3600.0);
  for (const char* bad : {"", "0h", "-1h", "h", "1x", "1h1h", "36 h"}) {
    EXPECT_FALSE(ParseDuration(bad).has_value()) << bad;
  }
}

TEST(TimetableTest, ReadsPlainAndGridExportSignals) {
  const Signal plain = ParseSignalCsv("2026-03-02T00:00:00Z,0.1\n2026-03-02T01:00:00Z,0.2\n",
                                      "plain.csv", "--signal");
  EXPECT_EQ(plain.value, (std::vector<double>{0.1, 0.2}));
  EXPECT_EQ(plain.end - plain.time.front(), 7200.0);  // the last row holds for an hour too
  const Signal export_layout = ParseSignalCsv(
      "# a note\n"
      "Datetime (UTC),Country,Zone Id,Carbon Intensity gCO₂eq/kWh (direct),Carbon Intensity "
      "gCO₂eq/kWh (LCA)\n"
      "2026-03-02 00:00:00,\"Germany, DE\",DE,300.5,350\n"
      "2026-03-02 01:00:00,\"Germany, DE\",DE,280,330\n",
      "em.csv", "--signal");
  EXPECT_EQ(export_layout.value, (std::vector<double>{300.5, 280}));
  EXPECT_EQ(export_layout.column, "Carbon Intensity gCO₂eq/kWh (direct)");
  const Signal lca = ParseSignalCsv(
      "Datetime (UTC),Carbon Intensity gCO₂eq/kWh (direct),Carbon Intensity gCO₂eq/kWh (LCA)\n"
      "2026-03-02 00:00:00,300,350\n2026-03-02 01:00:00,280,330\n",
      "em.csv", "--signal", "Carbon Intensity gCO₂eq/kWh (LCA)");
  EXPECT_EQ(lca.value, (std::vector<double>{350, 330}));
}

TEST(TimetableTest, ReadsWindowsExportsWithByteOrderMarkAndCrLf) {
  // A spreadsheet's CSV: byte order mark, CRLF line ends, every field quoted. The column is
  // named as its header says, without the line end.
  const Signal signal = ParseSignalCsv(
      "\xEF\xBB\xBF\"time\",\"price\"\r\n\"2026-03-02T00:00:00Z\",\"1.5\"\r\n"
      "\"2026-03-02T01:00:00Z\",\"2\"\r\n",
      "win.csv", "--signal", "price");
  EXPECT_EQ(signal.column, "price");
  EXPECT_EQ(signal.value, (std::vector<double>{1.5, 2}));
}

TEST(TimetableTest, BadSignalsNameTheLineAndTheRule) {
  const auto message = [](const std::string& text, const std::string& column = "") {
    try {
      ParseSignalCsv(text, "s.csv", "--signal", column);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_THAT(message("time,price\n2026-03-02T01:00:00Z,1\n2026-03-02T00:00:00Z,2\n"),
              ::testing::AllOf(::testing::HasSubstr("s.csv line 3"),
                               ::testing::HasSubstr("times must increase")));
  EXPECT_THAT(message("time,price\nyesterday,1\n2026-03-02T00:00:00Z,2\n"),
              ::testing::AllOf(::testing::HasSubstr("line 2"), ::testing::HasSubstr("ISO-8601")));
  EXPECT_THAT(message("time,price\n2026-03-02T00:00:00Z,-1\n2026-03-02T01:00:00Z,2\n"),
              ::testing::HasSubstr(">= 0"));
  EXPECT_THAT(message("time,price\n2026-03-02T00:00:00Z,nan\n2026-03-02T01:00:00Z,2\n"),
              ::testing::HasSubstr("finite"));
  EXPECT_THAT(message("time,price\n2026-03-02T00:00:00Z,1\n"), ::testing::HasSubstr("one row"));
  EXPECT_THAT(message(""), ::testing::HasSubstr("no rows"));
  EXPECT_THAT(message("a,b,c\n1,2,3\n"), ::testing::HasSubstr("no column names a time"));
  EXPECT_THAT(message("time,a,b\n2026-03-02T00:00:00Z,1,2\n"),
              ::testing::HasSubstr("--signal-column"));
  EXPECT_THAT(message("time,price\n2026-03-02T00:00:00Z,1\n", "cost"),
              ::testing::HasSubstr("no such column"));
  EXPECT_THAT(message("time,price\n\"2026-03-02T00:00:00Z,1\n"),
              ::testing::HasSubstr("not closed"));
}

TEST(TimetableTest, IntervalsCutAtSignalAndCapChanges) {
  const Signal signal = ParseSignalCsv(
      "time,v\n2026-03-02T00:00:00Z,1\n2026-03-02T01:00:00Z,2\n2026-03-02T02:00:00Z,3\n", "s",
      "--signal");
  const Signal caps = ParseSignalCsv("time,cap\n2026-03-02T00:30:00Z,250\n", "c", "--power-cap", "",
                                     true, /*one_row_holds_on=*/true);
  const double start = signal.time.front();
  const auto intervals = MakeIntervals(signal, caps, start, start + 9000, "--signal", "s");
  ASSERT_EQ(intervals.size(), 4u);  // 0:00, 0:30 (cap), 1:00, 2:00 .. 2:30
  EXPECT_TRUE(std::isinf(intervals[0].power_cap_w));
  EXPECT_EQ(intervals[1].power_cap_w, 250.0);
  EXPECT_EQ(intervals[1].signal, 1.0);
  EXPECT_EQ(intervals[3].signal, 3.0);
  EXPECT_EQ(intervals[3].end, start + 9000);
  try {
    MakeIntervals(signal, std::nullopt, start, start + 3 * 3600 + 1, "--signal", "s");
    ADD_FAILURE() << "a horizon past the signal was accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("covers up to 2026-03-02T03:00:00Z"));
  }
}

TEST(TimetableTest, JsonRoundTrip) {
  ScheduleProblem p = TwoPlans();
  p.iterations = 1900;
  p.intervals[2].power_cap_w = 260.0;
  const Timetable t = SolveSchedule(p);
  const Json json = TimetableToJson(p, t, {{"run", "/somewhere"}});
  EXPECT_EQ(json["run"], "/somewhere");
  EXPECT_EQ(json["intervals"][2]["power_cap_w"], 260.0);
  EXPECT_TRUE(json["intervals"][0]["power_cap_w"].is_null());
  ScheduleProblem p2;
  Timetable t2;
  TimetableFromJson(ParseJson(DumpJson(json), "t.json"), &p2, &t2);
  ASSERT_EQ(t2.intervals.size(), t.intervals.size());
  EXPECT_EQ(p2.plans.size(), 2u);
  EXPECT_EQ(p2.intervals[2].power_cap_w, 260.0);
  for (std::size_t k = 0; k < t.intervals.size(); ++k) {
    EXPECT_EQ(t2.intervals[k].entries.size(), t.intervals[k].entries.size());
    EXPECT_DOUBLE_EQ(t2.intervals[k].pause_s, t.intervals[k].pause_s);
  }
  EXPECT_DOUBLE_EQ(t2.total_cost, t.total_cost);
  Json broken = json;
  ASSERT_FALSE(json["intervals"][0]["entries"].empty());
  broken["intervals"][0]["entries"][0]["plan"] = "nowhere";
  EXPECT_THROW(TimetableFromJson(broken, &p2, &t2), InputError);
  EXPECT_THROW(TimetableFromJson(Json{{"format", "kareus-plan"}}, &p2, &t2), InputError);
}

}  // namespace
}  // namespace kareus::plan
