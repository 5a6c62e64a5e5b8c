// SPDX-License-Identifier: Apache-2.0
// `kareus run WORKLOAD --out DIR`: the main job (profile, compose, solve every method, evaluate,
// plans, frontier, tables, report) and `kareus evaluate WORKLOAD... --out DIR`.
#include <cstdio>
#include <memory>
#include <sstream>

#include "commands.h"
#include "distributed_flags.h"
#include "flags.h"
#include "kareus/common/context.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/json.h"
#include "kareus/distributed/planner.h"
#include "kareus/distributed/session.h"
#include "kareus/methods/run.h"
#include "kareus/report/report.h"

namespace kareus::cli {
namespace {

struct RunArgs {
  std::vector<std::string> workloads;
  std::string out;
  std::string methods;
  ProfilerFlags profiler;
  BackendFlags backend;
  DistributedFlags distributed;
  std::string evaluation = methods::ToString(methods::RunOptions{}.evaluation);
  uint64_t seed = Context{}.seed;
  double unit_time_ms = methods::RunOptions{}.unit_time_s * 1e3;
  int sweep_anchor_stride = methods::RunOptions{}.sweep_anchor_stride;
  int confirm_readings = methods::RunOptions{}.confirm_readings;
  bool quiet = false;
  bool json = false;
  bool transfer = mobo::ProfileOptions{}.transfer;
  std::string gpu_overlay;  // run only
};

std::string DefaultMethodNames() {
  std::string names;
  for (const auto& m : methods::DefaultMethods()) names += (names.empty() ? "" : ",") + m.name;
  return names;
}

void AddSharedOptions(CLI::App* cmd, RunArgs& args, const std::string& store_help) {
  cmd->add_option("--out", args.out, "Output folder")->required();
  cmd->add_option("--methods", args.methods,
                  "Comma-separated methods (default: " + DefaultMethodNames() +
                      "; valid: " + methods::MethodNames() + ")");
  AddProfilerFlags(cmd, args.profiler, store_help);
  AddBackendFlags(cmd, args.backend);
  AddDistributedFlags(cmd, args.distributed);
  cmd->add_option("--evaluation", args.evaluation,
                  "How finished plans are evaluated: auto (the backend's noise-free twin, else "
                  "measured runs) | noise-free | measured | none (tables say 'not evaluated')")
      ->capture_default_str();
  AddSeedOption(cmd, args.seed, "Root seed");
  cmd->add_option("--unit-time", args.unit_time_ms, "Solver time quantum in ms")
      ->capture_default_str();
  cmd->add_option(
         "--sweep-anchor-stride", args.sweep_anchor_stride,
         "Kareus's whole-instruction fallbacks and gradient-sync SM counts: measured in full at "
         "every N-th planning clock (and the lowest); between those, only the choices near the "
         "front there (nothing derived; 1: every clock in full)")
      ->capture_default_str();
  cmd->add_option("--confirm-readings", args.confirm_readings,
                  "Every method: fresh readings of each whole-instruction option the filter "
                  "kept; their mean is its value (the first reading was kept for being low: the "
                  "winner's curse); 0: the first reading is the value")
      ->capture_default_str();
  cmd->add_flag("--quiet", args.quiet, "No progress on the terminal");
  cmd->add_flag("--json", args.json, "Print the summary as JSON instead of tables");
}

methods::RunOptions ToOptions(const RunArgs& args) {
  methods::RunOptions options;
  if (!args.methods.empty()) {
    options.methods.clear();
    std::stringstream list(args.methods);
    std::string name;
    while (std::getline(list, name, ',')) {
      if (!name.empty()) options.methods.push_back(methods::FindMethod(name));
    }
  }
  options.profile = ToProfileOptions(args.profiler);
  options.profile.transfer = args.transfer;
  options.evaluation = methods::EvaluationModeFromString(args.evaluation);
  options.unit_time_s = args.unit_time_ms * 1e-3;
  options.sweep_anchor_stride = args.sweep_anchor_stride;
  options.confirm_readings = args.confirm_readings;
  options.quiet = args.quiet;
  std::vector<FlagName> names = ProfilerFlagNames("profile.");
  names.push_back({"unit_time_s", "--unit-time", 1e3});
  names.push_back({"methods", "--methods"});
  names.push_back({"sweep_anchor_stride", "--sweep-anchor-stride"});
  names.push_back({"confirm_readings", "--confirm-readings"});
  ThrowAsFlag(options.Validate(), names);
  return options;
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand(
      "run", "Optimize a workload end to end: every method's frontier, plans, tables, report");
  cmd->add_option("WORKLOAD", args->workloads, "Workload file (YAML)")->required()->expected(1);
  AddSharedOptions(cmd, *args,
                   "SQLite measurement store (default: OUT/measurements.sqlite); a rerun resumes");
  AddGpuOverlayOption(cmd, args->gpu_overlay);
  cmd->callback([args]() {
    // Under mpirun every rank runs this command; ranks other than 0 measure the partition
    // units rank 0 plans; rank 0 runs the rest of the flow and writes every file.
    const std::unique_ptr<distributed::Session> session = distributed::Session::Open();
    // Under mpirun with --backend cuda each rank measures on GPUs of its own.
    const auto rank_backend = [args, &session]() {
      return RankBackendFlags(args->backend, *session, [args]() {
        return MeasurementGroupGpus({workload::BuildWorkloadModel(
                                        LoadWorkload(args->workloads.front(), args->gpu_overlay))},
                                    true);
      });
    };
    const auto make_spec = [args, rank_backend]() {
      distributed::WorkerSpec spec;
      spec.models.push_back(
          workload::BuildWorkloadModel(LoadWorkload(args->workloads.front(), args->gpu_overlay)));
      spec.make_backend = MakeBackendFactory(rank_backend());
      spec.seed = args->seed;
      return spec;
    };
    if (!session->planner()) {
      distributed::ServeWorker(*session, make_spec);
      return;
    }
    methods::RunOptions options = ToOptions(*args);
    const distributed::PlannerOptions planner_options =
        ToPlannerOptions(args->distributed, args->backend.backend);
    const std::filesystem::path out = args->out;
    if (options.profile.store.empty()) options.profile.store = out / "measurements.sqlite";
    const measure::BackendFactory backend = MakeBackendFactory(rank_backend());
    const auto workload = LoadWorkload(args->workloads.front(), args->gpu_overlay);
    OutputFolder folder(out);  // checked now; the outputs replace OUT as a whole at the end
    folder.Keep(options.profile.store);
    std::unique_ptr<distributed::Planner> planner;
    if (session->distributed()) {
      planner = std::make_unique<distributed::Planner>(*session, make_spec, planner_options);
      options.profiler = [&planner](const workload::WorkloadModel& model,
                                    const mobo::ProfileOptions& profile, measure::Backend& measure,
                                    const Context& context) {
        return planner->Profile(0, model, profile, measure, context);
      };
    }
    const auto run = methods::RunWorkload(workload, options, backend,
                                          Context{.seed = args->seed, .quiet = args->quiet});
    methods::WriteRunOutputs(run, folder.staging());
    folder.Commit();
    if (planner) ReportRanks(*planner, args->distributed, args->quiet);
    const Json summary = methods::ToJson(run.summary);
    if (args->json) {
      std::fputs(DumpJson(summary).c_str(), stdout);
      return;
    }
    if (!run.summary.caveat.empty()) std::printf("%s\n\n", run.summary.caveat.c_str());
    std::printf("%s (%d GPUs; measured by %s; %s)\n\n", workload.name.c_str(), workload.TotalGpus(),
                run.backend.c_str(), run.evaluator.c_str());
    std::fputs(report::RenderTables(summary).c_str(), stdout);
    std::printf("\nWrote %s/{plan.json, frontier.json, plans/, summary.json, report.html}\n",
                out.string().c_str());
  });
}

void AddEvaluateCommand(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand(
      "evaluate",
      "Run several workloads (e.g. examples/paper/*.yaml) and print one combined table");
  cmd->add_option("WORKLOAD", args->workloads, "Workload files (YAML)")->required();
  AddSharedOptions(cmd, *args,
                   "SQLite measurement store shared by every workload (default: one per "
                   "workload, OUT/<name>/measurements.sqlite)");
  cmd->add_flag("--transfer", args->transfer,
                "Profile each workload with the measurements of the earlier workloads of the "
                "same model and GPU (their stores, read-only) as related data");
  cmd->callback([args]() {
    // Under mpirun every rank runs this command: rank 0 profiles the workloads' partition types
    // on every rank together, then each workload's remaining flow runs on a rank; rank 0 writes
    // every store and file.
    // The library evaluates without writing when given no folder; on the command line an
    // empty --out is a mistake, refused before anything runs.
    if (args->out.empty()) ThrowInput("--out", "\"\"", "an output folder is required");
    const std::unique_ptr<distributed::Session> session = distributed::Session::Open();
    const std::vector<std::filesystem::path> paths(args->workloads.begin(), args->workloads.end());
    const Context context{.seed = args->seed, .quiet = args->quiet};
    // Under mpirun with --backend cuda each rank measures on GPUs of its own.
    const auto rank_backend = [args, paths, &session]() {
      return RankBackendFlags(args->backend, *session, [&paths]() {
        std::vector<workload::WorkloadModel> models;
        for (const auto& path : paths) {
          models.push_back(workload::BuildWorkloadModel(workload::LoadWorkloadFile(path)));
        }
        return MeasurementGroupGpus(models, true);
      });
    };
    const auto make_spec = [args, paths, context, rank_backend]() {
      return distributed::EvaluateSpec(paths, ToOptions(*args), MakeBackendFactory(rank_backend()),
                                       context, args->out);
    };
    if (!session->planner()) {
      distributed::ServeWorker(*session, make_spec);
      return;
    }
    const methods::RunOptions options = ToOptions(*args);
    const distributed::PlannerOptions planner_options =
        ToPlannerOptions(args->distributed, args->backend.backend);
    const measure::BackendFactory backend = MakeBackendFactory(rank_backend());
    methods::EvaluationResult result;
    if (session->distributed()) {
      methods::LoadEvaluationWorkloads(paths);  // input errors first, as one process
      if (options.profile.transfer) {
        ThrowInput("--transfer", "set",
                   "needs the workloads profiled one after another (one process); under mpirun "
                   "they are profiled together");
      }
      distributed::Planner planner(*session, make_spec, planner_options);
      result = planner.Evaluate(paths, options, backend, context, args->out);
      ReportRanks(planner, args->distributed, args->quiet);
    } else {
      result = methods::EvaluateWorkloads(paths, options, backend, context, args->out);
    }
    if (args->json) {
      std::fputs(DumpJson(result.evaluation).c_str(), stdout);
      return;
    }
    std::fputs(result.table.c_str(), stdout);
    std::printf("\nWrote %s/evaluation.{json,txt} and one folder per workload\n",
                args->out.c_str());
  });
}

}  // namespace kareus::cli
