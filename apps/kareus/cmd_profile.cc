// SPDX-License-Identifier: Apache-2.0
// `kareus profile WORKLOAD`: multi-objective Bayesian optimization of every partition type,
// with a resumable measurement store and optional oracle/random baselines.
#include <cstdio>
#include <memory>
#include <optional>

#include "commands.h"
#include "distributed_flags.h"
#include "flags.h"
#include "kareus/common/context.h"
#include "kareus/common/error.h"
#include "kareus/common/json.h"
#include "kareus/common/table.h"
#include "kareus/distributed/planner.h"
#include "kareus/distributed/session.h"
#include "kareus/mobo/profiler.h"
#include "kareus/workload/ops.h"

namespace kareus::cli {

void AddProfileCommand(CLI::App& app) {
  struct Args {
    std::string workload;
    ProfilerFlags profiler;
    BackendFlags backend;
    DistributedFlags distributed;
    uint64_t seed = Context{}.seed;
    std::vector<std::string> partitions;
    bool oracle = false;
    bool quiet = false;
    bool json = false;
    bool evaluations = false;
    std::string gpu_overlay;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "profile", "Profile every partition type with multi-objective Bayesian optimization");
  cmd->add_option("WORKLOAD", args->workload, "Workload file (YAML)")->required();
  AddProfilerFlags(cmd, args->profiler,
                   "SQLite measurement store: every measurement is committed as it arrives; a "
                   "rerun resumes without re-measuring");
  AddBackendFlags(cmd, args->backend);
  AddGpuOverlayOption(cmd, args->gpu_overlay);
  AddDistributedFlags(cmd, args->distributed);
  AddSeedOption(cmd, args->seed, "Root seed (noise, designs, surrogates)");
  cmd->add_option("--partition", args->partitions, "Profile only these partition types");
  cmd->add_flag("--oracle", args->oracle,
                "Also run the exhaustive noise-free oracle and random search at equal budget");
  cmd->add_flag("--quiet", args->quiet, "No progress line");
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->add_flag("--evaluations", args->evaluations, "With --json: every evaluated configuration");
  cmd->callback([args]() {
    // Under mpirun every rank runs this command; ranks other than 0 measure what rank 0 plans.
    const std::unique_ptr<distributed::Session> session = distributed::Session::Open();
    // Under mpirun with --backend cuda each rank measures on GPUs of its own.
    const auto rank_backend = [args, &session](const workload::WorkloadModel& model) {
      return RankBackendFlags(args->backend, *session,
                              [&model]() { return MeasurementGroupGpus({model}, false); });
    };
    const auto make_spec = [args, rank_backend]() {
      distributed::WorkerSpec spec;
      spec.models.push_back(
          workload::BuildWorkloadModel(LoadWorkload(args->workload, args->gpu_overlay)));
      spec.make_backend = MakeBackendFactory(rank_backend(spec.models.front()));
      spec.seed = args->seed;
      return spec;
    };
    if (!session->planner()) {
      distributed::ServeWorker(*session, make_spec);
      return;
    }
    mobo::ProfileOptions options = ToProfileOptions(args->profiler);
    options.partitions = args->partitions;
    options.oracle = args->oracle;
    const distributed::PlannerOptions planner_options =
        ToPlannerOptions(args->distributed, args->backend.backend);
    const workload::WorkloadModel model =
        workload::BuildWorkloadModel(LoadWorkload(args->workload, args->gpu_overlay));
    const measure::BackendFactory make_backend = MakeBackendFactory(rank_backend(model));
    const std::unique_ptr<measure::Backend> backend = make_backend(model, args->seed);
    const Context context{.seed = args->seed, .quiet = args->quiet};
    std::unique_ptr<distributed::Planner> planner;
    if (session->distributed()) {
      planner = std::make_unique<distributed::Planner>(*session, make_spec, planner_options);
    }
    const mobo::ProfileResult summary =
        planner ? planner->Profile(0, model, options, *backend, context)
                : mobo::ProfileWorkload(model, options, *backend, context);
    if (planner) ReportRanks(*planner, args->distributed, args->quiet);
    if (args->json) {
      std::fputs(DumpJson(summary.ToJson(args->evaluations)).c_str(), stdout);
      return;
    }
    std::printf("%s on %s: surrogate %s, strategy %s, seed %llu\n", model.workload.name.c_str(),
                summary.gpu.c_str(), summary.surrogate.c_str(), summary.strategy.c_str(),
                static_cast<unsigned long long>(summary.seed));
    std::vector<std::string> header = {"type",   "space", "evals",   "share",
                                       "reused", "GPU-h", "frontier"};
    if (args->oracle) {
      header.insert(header.end(), {"hv_ratio", "random", "clock_hv", "random_clock"});
    }
    Table table(header);
    for (const auto& r : summary.partitions) {
      std::vector<std::string> row = {
          r.type + (r.tunable ? "" : " (fixed)"),
          std::to_string(r.space_size),
          std::to_string(r.evaluations.size()),
          FormatFixed(100.0 * static_cast<double>(r.evaluations.size()) / r.space_size, 1) + "%",
          std::to_string(r.reused),
          FormatFixed(r.cost_gpu_seconds / 3600.0, 2),
          std::to_string(r.frontier.size())};
      if (r.oracle) {
        row.insert(row.end(),
                   {FormatFixed(r.oracle->hv_ratio, 4), FormatFixed(r.oracle->random_hv_ratio, 4),
                    FormatFixed(r.oracle->clock_hv_ratio, 4),
                    FormatFixed(r.oracle->random_clock_hv_ratio, 4)});
      } else if (args->oracle) {
        row.insert(row.end(), {"-", "-", "-", "-"});
      }
      table.AddRow(row);
    }
    std::fputs(table.ToString().c_str(), stdout);
    std::printf(
        "measured %lld configurations (%lld from the store) on %s: %.2f GPU-hours in "
        "this run, %.2f for the whole profile\n(GPU-hours = %s)\n",
        static_cast<long long>(summary.measurements_taken),
        static_cast<long long>(summary.measurements_reused), summary.backend.c_str(),
        summary.gpu_seconds / 3600.0, summary.cost_gpu_seconds / 3600.0, mobo::kGpuHoursBasis);
  });
}

}  // namespace kareus::cli
