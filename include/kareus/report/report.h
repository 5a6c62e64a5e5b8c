// SPDX-License-Identifier: Apache-2.0
// What a person reads after `kareus run`: a self-contained HTML page with inline SVG plots (no
// network, no scripts) and plain-text tables for the terminal. Both render the run's
// summary.json document (format "kareus.summary/1", docs/ARCHITECTURE.md), so a report can be
// re-rendered from a saved summary.
#pragma once

#include <string>

#include "kareus/common/json.h"

namespace kareus::report {

// The whole page: the iteration frontiers of every method on one time-energy plot (fastest and
// iso points marked), the fastest Kareus plan's 1F1B timeline coloured by clock, the partition
// frontiers per clock, the comparison tables, the workload and the settings.
std::string RenderHtml(const Json& summary);

// The max-throughput table, the frontier (iso) table and the interpolated comparison.
std::string RenderTables(const Json& summary);

// One row per workload of `kareus evaluate`: the combined table of several summaries.
std::string RenderEvaluationTable(const Json& evaluation);

// The page of `kareus schedule` (timetable.json): the job's power and the signal over time, the
// best constant plan and the power caps beside them, and one row per interval.
std::string RenderTimetableHtml(const Json& timetable);

}  // namespace kareus::report
