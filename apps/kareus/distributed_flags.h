// SPDX-License-Identifier: Apache-2.0
// The flags of distributed planning (`mpirun -np N kareus profile|run|evaluate ...`) and what
// rank 0 prints about the ranks when the job is done.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "flags.h"
#include "kareus/distributed/planner.h"
#include "kareus/distributed/session.h"

namespace kareus::cli {

struct DistributedFlags {
  std::string rank_report;  // JSON file of the per-rank work (rank 0 writes it)
  int max_outstanding = distributed::PlannerOptions{}.max_outstanding;
  std::string assign = "auto";  // auto | least-busy | least-busy-with-room
};

// --rank-report FILE, --max-outstanding N, --assign RULE.
void AddDistributedFlags(CLI::App* cmd, DistributedFlags& flags);
// The planner's options from the flags (InputError naming the flag). `--assign auto` waits for
// the least busy rank when `backend` (the --backend name) measures in no wall time (the
// emulator), else takes the least busy rank with room.
distributed::PlannerOptions ToPlannerOptions(const DistributedFlags& flags,
                                             const std::string& backend);
// The backend flags this rank measures with. Under mpirun with --backend cuda: the devices of
// its own GPU group (distributed::RankDevices; `group_gpus` says how many GPUs one measurement
// of the command needs, asked only then) and --measurement-log suffixed ".rank<R>" on ranks
// other than 0 (one writer per file). The flags as given otherwise.
BackendFlags RankBackendFlags(const BackendFlags& flags, const distributed::Session& session,
                              const std::function<int()>& group_gpus);
// The most GPUs one measurement of `models` occupies: a stage replica (TP x CP) when whole
// instructions are measured (`kareus run`, `evaluate`), else the largest collective group.
int MeasurementGroupGpus(const std::vector<workload::WorkloadModel>& models, bool instructions);
// Rank 0, after the work: the per-rank table on stderr (unless quiet) and --rank-report.
void ReportRanks(const distributed::Planner& planner, const DistributedFlags& flags, bool quiet);

}  // namespace kareus::cli
