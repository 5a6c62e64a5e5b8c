// SPDX-License-Identifier: Apache-2.0
// `kareus profile WORKLOAD`: multi-objective Bayesian optimization of every partition type,
// with a resumable measurement store and optional oracle/random baselines.
#include <cstdio>
#include <memory>
#include <optional>

#include "commands.h"
#include "kareus/common/context.h"
#include "kareus/common/error.h"
#include "kareus/common/json.h"
#include "kareus/common/table.h"
#include "kareus/mobo/profiler.h"
#include "kareus/workload/ops.h"

namespace kareus::cli {

void AddProfileCommand(CLI::App& app) {
  struct Args {
    std::string workload;
    std::optional<int64_t> budget;
    std::optional<double> budget_fraction;
    std::string surrogate = mobo::ToString(mobo::ProfileOptions{}.surrogate);
    std::string strategy = mobo::ToString(mobo::ProfileOptions{}.strategy);
    std::string store;
    uint64_t seed = 1;
    int initial = 0;
    int batch = 0;
    std::vector<std::string> partitions;
    bool full_grid = false;
    bool oracle = false;
    bool quiet = false;
    bool json = false;
    bool evaluations = false;
    bool raw_frontier = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "profile", "Profile every partition type with multi-objective Bayesian optimization");
  cmd->add_option("WORKLOAD", args->workload, "Workload file (YAML)")->required();
  auto* budget = cmd->add_option("--budget", args->budget,
                                 "Evaluations per partition type (default: --budget-fraction)");
  cmd->add_option("--budget-fraction", args->budget_fraction,
                  "Share of each type's search space to measure (default 0.15)")
      ->excludes(budget);
  cmd->add_option("--surrogate", args->surrogate, "Surrogate model: gp | xgb")
      ->capture_default_str();
  cmd->add_option("--strategy", args->strategy,
                  "Batch acquisition: per-clock | published | believer")
      ->capture_default_str();
  cmd->add_option("--store", args->store,
                  "SQLite measurement store: every measurement is committed as it arrives; a "
                  "rerun resumes without re-measuring");
  cmd->add_option("--seed", args->seed, "Root seed (noise, designs, surrogates)")
      ->capture_default_str();
  cmd->add_option("--initial", args->initial, "Initial design size (default: auto)");
  cmd->add_option("--batch", args->batch, "Acquisition batch size (default: auto)");
  cmd->add_option("--partition", args->partitions, "Profile only these partition types");
  cmd->add_flag("--full-grid", args->full_grid,
                "Search every supported clock instead of the profiling sub-grid");
  cmd->add_flag("--oracle", args->oracle,
                "Also run the exhaustive noise-free oracle and random search at equal budget");
  cmd->add_flag("--raw-frontier", args->raw_frontier,
                "Select frontiers on the raw readings instead of the surrogate's denoised means");
  cmd->add_flag("--quiet", args->quiet, "No progress line");
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->add_flag("--evaluations", args->evaluations, "With --json: every evaluated configuration");
  cmd->callback([args]() {
    mobo::ProfileOptions options;
    if (args->budget) {
      if (*args->budget <= 0) ThrowInput("budget", std::to_string(*args->budget), "must be > 0");
      options.budget = *args->budget;
    }
    if (args->budget_fraction) options.budget_fraction = *args->budget_fraction;
    options.surrogate = mobo::SurrogateKindFromString(args->surrogate);
    options.strategy = mobo::StrategyFromString(args->strategy);
    if (args->initial < 0) ThrowInput("initial", std::to_string(args->initial), "must be >= 0");
    if (args->batch < 0) ThrowInput("batch", std::to_string(args->batch), "must be >= 0");
    options.initial_design = args->initial;
    options.batch_size = args->batch;
    options.partitions = args->partitions;
    options.full_grid = args->full_grid;
    options.oracle = args->oracle;
    options.store = args->store;
    options.denoise = !args->raw_frontier;
    const workload::WorkloadModel model =
        workload::BuildWorkloadModel(workload::LoadWorkloadFile(args->workload));
    const mobo::ProfileSummary summary =
        mobo::ProfileWorkload(model, options, Context{.seed = args->seed, .quiet = args->quiet});
    if (args->json) {
      std::fputs(DumpJson(summary.ToJson(args->evaluations)).c_str(), stdout);
      return;
    }
    std::printf("%s on %s: surrogate %s, strategy %s, seed %llu\n", model.workload.name.c_str(),
                summary.gpu.c_str(), summary.surrogate.c_str(), summary.strategy.c_str(),
                static_cast<unsigned long long>(summary.seed));
    std::vector<std::string> header = {"type", "space", "evals", "share", "reused", "GPU-h",
                                       "frontier"};
    if (args->oracle) {
      header.insert(header.end(), {"hv_ratio", "random", "clock_hv", "random_clock"});
    }
    Table table(header);
    for (const auto& r : summary.partitions) {
      std::vector<std::string> row = {
          r.type + (r.tunable ? "" : " (fixed)"), std::to_string(r.space_size),
          std::to_string(r.evaluations.size()),
          FormatFixed(100.0 * static_cast<double>(r.evaluations.size()) / r.space_size, 1) + "%",
          std::to_string(r.reused), FormatFixed(r.gpu_seconds / 3600.0, 2),
          std::to_string(r.frontier.size())};
      if (r.oracle) {
        row.insert(row.end(), {FormatFixed(r.oracle->hv_ratio, 4),
                               FormatFixed(r.oracle->random_hv_ratio, 4),
                               FormatFixed(r.oracle->clock_hv_ratio, 4),
                               FormatFixed(r.oracle->random_clock_hv_ratio, 4)});
      } else if (args->oracle) {
        row.insert(row.end(), {"-", "-", "-", "-"});
      }
      table.AddRow(row);
    }
    std::fputs(table.ToString().c_str(), stdout);
    std::printf("measured %lld configurations (%lld from the store), %.2f GPU-hours\n",
                static_cast<long long>(summary.measurements_taken),
                static_cast<long long>(summary.measurements_reused),
                summary.gpu_seconds / 3600.0);
  });
}

}  // namespace kareus::cli
