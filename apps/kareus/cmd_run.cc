// SPDX-License-Identifier: Apache-2.0
// `kareus run WORKLOAD --out DIR`: the main job (profile, compose, solve every method, plans,
// frontier, tables, report) and `kareus evaluate WORKLOAD... --out DIR`.
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>

#include "commands.h"
#include "kareus/common/context.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/json.h"
#include "kareus/methods/run.h"
#include "kareus/report/report.h"

namespace kareus::cli {
namespace {

struct RunArgs {
  std::vector<std::string> workloads;
  std::string out;
  std::string methods;
  std::optional<double> budget_fraction;
  std::optional<int64_t> budget;
  std::string surrogate = mobo::ToString(mobo::ProfileOptions{}.surrogate);
  std::string strategy = mobo::ToString(mobo::ProfileOptions{}.strategy);
  std::string store;
  uint64_t seed = 1;
  double unit_time_ms = 1.0;
  bool full_grid = false;
  bool quiet = false;
  bool json = false;
};

void AddSharedOptions(CLI::App* cmd, RunArgs& args) {
  cmd->add_option("--out", args.out, "Output folder")->required();
  cmd->add_option("--methods", args.methods,
                  "Comma-separated methods (default: megatron,nanobatching,perseus,"
                  "nanobatching+perseus,kareus; also kareus-oracle)");
  auto* budget = cmd->add_option("--budget", args.budget, "Profiler evaluations per partition type");
  cmd->add_option("--budget-fraction", args.budget_fraction,
                  "Share of each partition type's space the profiler measures (default 0.12)")
      ->excludes(budget);
  cmd->add_option("--surrogate", args.surrogate, "Profiler surrogate: gp | xgb")->capture_default_str();
  cmd->add_option("--strategy", args.strategy, "Profiler acquisition strategy")->capture_default_str();
  cmd->add_option("--store", args.store,
                  "SQLite measurement store (default: OUT/measurements.sqlite); a rerun resumes");
  cmd->add_option("--seed", args.seed, "Root seed")->capture_default_str();
  cmd->add_option("--unit-time", args.unit_time_ms, "Solver time quantum in ms")->capture_default_str();
  cmd->add_flag("--full-grid", args.full_grid, "Plan over every supported clock, not the profiling grid");
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
      if (!name.empty()) options.methods.push_back(methods::MethodFromString(name));
    }
  }
  if (args.budget) {
    if (*args.budget <= 0) ThrowInput("--budget", std::to_string(*args.budget), "must be > 0");
    options.profile.budget = *args.budget;
  }
  if (args.budget_fraction) {
    if (!(*args.budget_fraction > 0.0 && *args.budget_fraction <= 1.0)) {
      ThrowInput("--budget-fraction", Describe(*args.budget_fraction), "must be in (0, 1]");
    }
    options.profile.budget_fraction = *args.budget_fraction;
  }
  options.profile.surrogate = mobo::SurrogateKindFromString(args.surrogate);
  options.profile.strategy = mobo::StrategyFromString(args.strategy);
  options.profile.full_grid = args.full_grid;
  if (!(args.unit_time_ms > 0.0)) ThrowInput("--unit-time", Describe(args.unit_time_ms), "must be > 0 ms");
  options.unit_time_s = args.unit_time_ms * 1e-3;
  options.quiet = args.quiet;
  options.profile.store = args.store;
  return options;
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand(
      "run", "Optimize a workload end to end: every method's frontier, plans, tables, report");
  cmd->add_option("WORKLOAD", args->workloads, "Workload file (YAML)")->required()->expected(1);
  AddSharedOptions(cmd, *args);
  cmd->callback([args]() {
    methods::RunOptions options = ToOptions(*args);
    const std::filesystem::path out = args->out;
    OutputFolder folder(out);  // checked now; the outputs replace OUT as a whole at the end
    if (options.profile.store.empty()) options.profile.store = out / "measurements.sqlite";
    folder.Keep(options.profile.store);
    const auto workload = workload::LoadWorkloadFile(args->workloads.front());
    const auto run = methods::RunWorkload(workload, options, Context{.seed = args->seed, .quiet = args->quiet});
    methods::WriteRunOutputs(run, folder.staging());
    folder.Commit();
    if (args->json) {
      std::fputs(DumpJson(run.summary).c_str(), stdout);
      return;
    }
    std::printf("%s (emulated, %d GPUs)\n\n", workload.name.c_str(), workload.TotalGpus());
    std::fputs(report::RenderTables(run.summary).c_str(), stdout);
    std::printf("\nWrote %s/{plan.json, frontier.json, plans/, summary.json, report.html}\n",
                out.string().c_str());
  });
}

void AddEvaluateCommand(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand(
      "evaluate", "Run several workloads (e.g. examples/paper/*.yaml) and print one combined table");
  cmd->add_option("WORKLOAD", args->workloads, "Workload files (YAML)")->required();
  AddSharedOptions(cmd, *args);
  cmd->callback([args]() {
    const methods::RunOptions options = ToOptions(*args);
    std::vector<std::filesystem::path> paths(args->workloads.begin(), args->workloads.end());
    const auto result = methods::EvaluateWorkloads(paths, options, Context{.seed = args->seed, .quiet = args->quiet},
                                                   args->out);
    if (args->json) {
      std::fputs(DumpJson(result.evaluation).c_str(), stdout);
      return;
    }
    std::fputs(result.table.c_str(), stdout);
    std::printf("\nWrote %s/evaluation.{json,txt} and one folder per workload\n", args->out.c_str());
  });
}

}  // namespace kareus::cli
