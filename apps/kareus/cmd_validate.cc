// SPDX-License-Identifier: Apache-2.0
// `kareus validate`: the emulator against the real GPU measurements in data/validation/.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "kareus/common/json.h"
#include "kareus/emulator/validate.h"

namespace kareus::cli {

void AddValidateCommand(CLI::App& app) {
  auto data_dir = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "validate",
      "Replay the real GPU measurements of data/validation/ on the emulator (equal-FLOPs "
      "stand-in workloads) and print the shape errors per dataset");
  cmd->add_option("--data", *data_dir,
                  "Folder holding datasets.yaml (default: the installed data/validation)");
  cmd->add_flag("--json", *json, "Print JSON (format kareus.validation/1)");
  cmd->callback([data_dir, json]() {
    const emulator::ValidationReport report = emulator::ReplayDatasets({.data_dir = *data_dir});
    if (*json) {
      std::fputs(DumpJson(emulator::ToJson(report)).c_str(), stdout);
    } else {
      std::fputs(emulator::RenderValidation(report).c_str(), stdout);
    }
  });
}

}  // namespace kareus::cli
