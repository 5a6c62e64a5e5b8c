// SPDX-License-Identifier: Apache-2.0
// Energy as a budget (issue 28): a training run of N iterations with a deadline, an hourly price
// or carbon-intensity signal and optional power caps, scheduled over the iteration frontier of a
// finished `kareus run`: for every interval, how long to run which frontier plan and how long to
// pause, at the least total cost (cost = sum of signal x energy in kWh).
//
// The problem. The job holds its GPUs from the signal's first timestamp until its N iterations
// are done: running plan p draws P_p = energy_j / time_s watts (the whole job), a pause draws the
// GPUs' static power P_idle (frontier.json's static_energy_j / time_s), and after the last
// iteration it draws nothing. So if the job finishes in interval m, every interval before m is
// held whole (run or paused) and interval m only until the finish. For a fixed m the cost of
// interval k as a function of the iterations n_k it runs is convex and piecewise linear:
//   k < m:  the lower convex hull of (0, c_k L_k P_idle) (pause all of it) and
//           (L_k / t_p, c_k L_k P_p) (run p all of it), over the plans p its power cap allows;
//   k = m:  the lower convex hull of (0, 0) (finish at once) and (L_k / t_p, c_k L_k P_p).
// Mixing two hull neighbours realizes every point between them, so an interval uses at most two
// plans adjacent on its hull, or one plan and a pause. Minimizing the sum subject to
// sum n_k = N is a separable convex resource allocation, solved exactly by filling the
// intervals' hull segments in order of marginal cost (water-filling); the timetable is the best
// over m. tests/plan/timetable_test.cc checks it against the same problem as a mixed-integer
// program in GLPK.
#pragma once

#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/common/json.h"

namespace kareus::plan {

// Indices of the vertices of the lower convex hull of the points (x, y), by increasing x (of
// points with equal x, the lowest y; collinear points are not vertices).
std::vector<std::size_t> LowerConvexHull(const std::vector<std::pair<double, double>>& points);

// The frontier points a power budget or a timetable can need: the vertices of the lower convex
// hulls, in (iterations per second, power), of the points (1 / time_s, energy_j / time_s) with
// the paused job (0, static power) and with the finished one (0, 0). `kareus run` keeps their
// plans beside the sampled ones, so that `kareus schedule` finds every plan it would mix.
std::vector<std::size_t> BudgetPlanIndices(const std::vector<double>& time_s,
                                           const std::vector<double>& energy_j,
                                           const std::vector<double>& static_energy_j);

// ---- Times ----

// Seconds since 1970-01-01T00:00:00Z for an ISO-8601 time: "2025-03-01T14:00:00Z",
// "2025-03-01 14:00", "2025-03-01T14:00:00+01:00", "2025-03-01T14:00:00.000Z", "2025-03-01"
// (no offset: UTC). nullopt when the text is not such a time.
std::optional<double> ParseUtcTime(std::string_view text);
// "2025-03-01T14:00:00Z" (whole seconds, rounded).
std::string FormatUtcTime(double unix_s);
// A duration such as "36h", "90m", "2d", "1h30m", "45s", "3600" (seconds), in seconds; nullopt
// when the text is not one or not > 0.
std::optional<double> ParseDuration(std::string_view text);

// ---- Signals ----

// A step function of time: value[i] holds on [time[i], time[i+1]); the last on
// [time.back(), end).
struct Signal {
  std::vector<double> time;  // unix seconds, increasing
  std::vector<double> value;
  double end = 0.0;
  std::string column;  // the column read, as its header names it ("" without a header)
};

// Reads a signal CSV: a plain two-column file (time, value; a header row is optional), or a
// grid-data export with a header (e.g. Electricity Maps' "Datetime (UTC)" and "Carbon Intensity
// gCO₂eq/kWh (direct)" columns). The time column is the first whose header names a time
// (datetime, timestamp, time, date, start, period); the value column `column` when given, else
// the second of a two-column file, else the first whose header names a carbon intensity or a
// price. Quoted fields (RFC 4180) are read; lines starting with '#' are comments. The last row
// holds for as long as the row before it (an hourly file covers its last hour); a file of one row
// is refused, unless `one_row_holds_on` (power caps: the last row then holds on for ever, as does
// the last row of a longer file). Every problem is an InputError naming `field` (the flag), the row
// and the rule: no rows, a time that is not ISO-8601, times that do not increase, a value that is
// not a finite number (and, with `non_negative`, one below 0).
Signal ReadSignalCsv(const std::filesystem::path& path, const std::string& field,
                     const std::string& column = "", bool non_negative = true,
                     bool one_row_holds_on = false);
Signal ParseSignalCsv(std::string_view text, const std::string& source, const std::string& field,
                      const std::string& column = "", bool non_negative = true,
                      bool one_row_holds_on = false);

// ---- The problem ----

struct SchedulePlan {
  std::string name;       // how the timetable names it (a plan file, relative to the output folder)
  double time_s = 0.0;    // one iteration
  double energy_j = 0.0;  // one iteration, the whole job
  double power_w() const { return energy_j / time_s; }
};

struct ScheduleInterval {
  double start = 0.0;  // unix seconds
  double end = 0.0;
  double signal = 0.0;  // cost per kWh ($/kWh, gCO2/kWh, ...)
  double power_cap_w = std::numeric_limits<double>::infinity();  // per GPU (average), inf: none
  double length() const { return end - start; }
};

struct ScheduleProblem {
  std::vector<SchedulePlan> plans;
  std::vector<ScheduleInterval> intervals;  // contiguous, from the start to the deadline
  double idle_power_w = 0.0;                // the whole job, paused
  int gpus = 1;             // power caps are per GPU: a plan fits when power_w / gpus <= cap
  double iterations = 0.0;  // N
  bool allow_pause = true;

  double start() const { return intervals.front().start; }
  double deadline() const { return intervals.back().end; }
  // The first invalid field, its value and the rule.
  std::optional<OptionError> Validate() const;
};

// Intervals from a signal, power caps (per GPU; nullopt: none) and a horizon [start, deadline]:
// cut wherever either changes. InputError (naming `signal_field`) when the signal does not
// cover the horizon.
std::vector<ScheduleInterval> MakeIntervals(const Signal& signal, const std::optional<Signal>& caps,
                                            double start, double deadline,
                                            const std::string& signal_field,
                                            const std::string& signal_name);

// ---- The timetable ----

struct TimetableEntry {
  int plan = -1;  // index into ScheduleProblem::plans
  double seconds = 0.0;
  double iterations = 0.0;
  double energy_j = 0.0;
  double cost = 0.0;
};

struct TimetableInterval {
  ScheduleInterval interval;
  std::vector<TimetableEntry> entries;  // run in this order, from the interval's start
  double pause_s = 0.0;                 // after the entries
  double energy_j = 0.0;                // entries + pause
  double cost = 0.0;
};

struct ConstantPlanCost {
  int plan = -1;
  double cost = 0.0;
  double energy_j = 0.0;
  double finish = 0.0;  // unix seconds
};

struct Timetable {
  std::vector<TimetableInterval> intervals;  // up to the one the job finishes in
  double total_cost = 0.0;
  double total_energy_j = 0.0;
  double total_iterations = 0.0;
  double finish = 0.0;  // unix seconds
  // The cheapest single plan run without a pause from the start (within the caps and the
  // deadline); nullopt when none finishes in time. The timetable is never above it: running one
  // plan from the start is one of the timetables the solver chooses from.
  std::optional<ConstantPlanCost> best_constant;
};

// The earliest the N iterations can finish: the fastest plan each interval's cap allows,
// pausing where none fits (or, without pauses, nullopt from the first such interval on when
// it comes before the finish). Not limited by the deadline: it may lie past it.
std::optional<double> EarliestFinish(const ScheduleProblem& problem, double* blocked_at = nullptr);

// The least-cost timetable. InputError for an invalid problem and when no timetable finishes by
// the deadline (naming the bound: the earliest finish, or the interval whose cap no plan fits
// with pauses not allowed).
Timetable SolveSchedule(const ScheduleProblem& problem);

// The cost of one plan run without a pause from the start (nullopt when it does not finish by
// the deadline or some interval's cap does not allow it).
std::optional<ConstantPlanCost> ConstantPlan(const ScheduleProblem& problem, int plan);

// timetable.json (docs/schemas/timetable.schema.json): the problem's plans and totals and the
// timetable; `extra` fields (the run folder, the signal's file) are added at the top.
Json TimetableToJson(const ScheduleProblem& problem, const Timetable& timetable, const Json& extra);
// The inverse (the runtime's reader): the plans, iterations, GPUs, idle power and the intervals
// with their entries (power caps from the intervals; intervals after the finish are absent).
// InputError naming the field on anything that is not a timetable.
void TimetableFromJson(const Json& json, ScheduleProblem* problem, Timetable* timetable);

namespace internal {
// For each interval m, the least cost of a timetable that finishes in m (nullopt: none). The
// solver's first step, incrementally (O(K H log(K H))) or, the reference for tests and the
// benchmark, filling every m from scratch (O(K^2 H log(K H))).
std::vector<std::optional<double>> FinishIntervalCosts(const ScheduleProblem& problem,
                                                       bool incremental);
}  // namespace internal

}  // namespace kareus::plan
