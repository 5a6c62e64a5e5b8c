// SPDX-License-Identifier: Apache-2.0
// `kareus schedule RUN --iterations N --deadline WHEN --signal FILE [--power-cap FILE] --out DIR`
// (issue 28): a timetable over the frontier of a finished `kareus run` (plan/timetable.h), its
// plans copied into DIR/plans/ so that DIR is all a job needs, and a report.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "kareus/common/error.h"
#include "kareus/common/json.h"

namespace kareus::methods {

struct ScheduleOptions {
  std::filesystem::path run;     // a `kareus run` output folder (frontier.json, plans/)
  double iterations = 0.0;       // N
  std::string deadline;          // ISO-8601 UTC, or a duration ("36h") from the signal's start
  std::filesystem::path signal;  // price or carbon CSV
  std::string signal_column;     // the signal's column; "" = found from the header
  std::string signal_unit;       // how the report labels it; "" = the column's header
  std::optional<std::filesystem::path> power_cap;  // CSV of (time, W per GPU); none: no cap
  bool allow_pause = true;
  std::filesystem::path out;

  // The first invalid field (named as the CLI flag), its value and the rule.
  std::optional<OptionError> Validate() const;
};

// Reads the run's frontier (the points whose plan the run kept), the signal and the caps,
// solves, and writes DIR/{timetable.json, report.html, plans/} as one folder transaction.
// InputError (exit 2) for bad input and infeasible requests, naming the flag, the value and the
// bound; nothing is written then. Returns timetable.json's contents.
Json ScheduleFromRun(const ScheduleOptions& options);

}  // namespace kareus::methods
