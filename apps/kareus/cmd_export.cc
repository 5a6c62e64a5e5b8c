// SPDX-License-Identifier: Apache-2.0
// `kareus export PLAN`: Zeus freqs_pipeline_%05d.py or Kareus scheds_pipeline_%05d.py files.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "kareus/common/json.h"
#include "kareus/plan/perseus.h"

namespace kareus::cli {
namespace {

struct ExportArgs {
  std::string plan;
  std::string format;
  std::string out;
  bool json = false;
  bool clocks_only = false;
};

void Run(const ExportArgs& a) {
  const plan::ExportSummary s = plan::ExportPlans({.plan = a.plan,
                                                   .format = plan::ExportFormatFromString(a.format),
                                                   .out = a.out,
                                                   .clocks_only = a.clocks_only});
  if (a.json) {
    Json files = Json::array();
    for (const auto& path : s.files) files.push_back(path.string());
    std::fputs(DumpJson({{"format", a.format}, {"files", files}}).c_str(), stdout);
    return;
  }
  for (const auto& path : s.files) std::printf("%s\n", path.string().c_str());
}

}  // namespace

void AddExportCommand(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  auto* cmd = app.add_subcommand(
      "export", "Export plans as Zeus freqs_pipeline_%05d.py or Kareus scheds_pipeline_%05d.py");
  cmd->add_option("PLAN", args->plan, "A plan.json, or a folder of plan_NNNNN.json")->required();
  cmd->add_option("--format", args->format, "zeus | kareus-scheds")->required();
  cmd->add_option("--out", args->out, "Output folder")->required();
  cmd->add_flag("--clocks-only", args->clocks_only,
                "Zeus format: export the clocks of a plan with nanobatched instructions (refused "
                "otherwise: its times assume Kareus's execution, kareus.torch)");
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->callback([args]() { Run(*args); });
}

}  // namespace kareus::cli
