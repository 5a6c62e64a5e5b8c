// SPDX-License-Identifier: Apache-2.0
#include "distributed_flags.h"

#include <cstdio>

#include "flags.h"
#include "kareus/common/json.h"

namespace kareus::cli {

void AddDistributedFlags(CLI::App* cmd, DistributedFlags& flags) {
  cmd->add_option("--rank-report", flags.rank_report,
                  "Under mpirun: write the work per rank (units, measurements, busy GPU-seconds, "
                  "load balance) as JSON");
  cmd->add_option("--max-outstanding", flags.max_outstanding,
                  "Under mpirun: units handed to a rank ahead of its results")
      ->capture_default_str();
}

distributed::PlannerOptions ToPlannerOptions(const DistributedFlags& flags) {
  distributed::PlannerOptions options{.max_outstanding = flags.max_outstanding};
  ThrowAsFlag(options.Validate(), {{"max_outstanding", "--max-outstanding"}});
  return options;
}

void ReportRanks(const distributed::Planner& planner, const DistributedFlags& flags, bool quiet) {
  const distributed::RankReport report = planner.Report();
  if (!flags.rank_report.empty()) WriteJsonFile(flags.rank_report, report.ToJson());
  if (!quiet) std::fputs(report.ToText().c_str(), stderr);
}

}  // namespace kareus::cli
