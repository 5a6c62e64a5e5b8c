// SPDX-License-Identifier: Apache-2.0
#include "distributed_flags.h"

#include <algorithm>
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
  cmd->add_option("--assign", flags.assign,
                  "Under mpirun: which rank a unit goes to: least-busy (waits for the rank with "
                  "the least busy GPU-seconds; for emulated backends), least-busy-with-room (no "
                  "rank idles while work is queued; for real GPUs), auto (by --backend)")
      ->capture_default_str();
}

distributed::PlannerOptions ToPlannerOptions(const DistributedFlags& flags,
                                             const std::string& backend) {
  distributed::PlannerOptions options{.max_outstanding = flags.max_outstanding};
  if (flags.assign == "least-busy" || (flags.assign == "auto" && backend == "emulator")) {
    options.assignment = distributed::Assignment::kLeastBusy;
  } else if (flags.assign == "least-busy-with-room" || flags.assign == "auto") {
    options.assignment = distributed::Assignment::kLeastBusyWithRoom;
  } else {
    ThrowInput("--assign", flags.assign, "must be auto, least-busy or least-busy-with-room");
  }
  ThrowAsFlag(options.Validate(), {{"max_outstanding", "--max-outstanding"}});
  return options;
}

BackendFlags RankBackendFlags(const BackendFlags& flags, const distributed::Session& session,
                              const std::function<int()>& group_gpus) {
  if (flags.backend != "cuda" || !session.distributed() || session.size() == 1) return flags;
  BackendFlags mine = flags;
  mine.devices = distributed::RankDevices(session.launch(), flags.devices, group_gpus());
  if (!mine.measurement_log.empty() && session.rank() != 0) {
    mine.measurement_log += ".rank" + std::to_string(session.rank());
  }
  return mine;
}

int MeasurementGroupGpus(const std::vector<workload::WorkloadModel>& models, bool instructions) {
  int gpus = 1;
  for (const workload::WorkloadModel& model : models) {
    if (instructions) gpus = std::max(gpus, measure::InstructionGpus(model));
    for (const workload::PartitionType& type : model.partition_types) {
      gpus = std::max(gpus, measure::PartitionGpus(type));
    }
  }
  return gpus;
}

void ReportRanks(const distributed::Planner& planner, const DistributedFlags& flags, bool quiet) {
  const distributed::RankReport report = planner.Report();
  if (!flags.rank_report.empty()) WriteJsonFile(flags.rank_report, report.ToJson());
  if (!quiet) std::fputs(report.ToText().c_str(), stderr);
}

}  // namespace kareus::cli
