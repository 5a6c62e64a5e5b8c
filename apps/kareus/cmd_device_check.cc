// SPDX-License-Identifier: Apache-2.0
// `kareus device-check [--json] [WORKLOAD]`: this machine's GPUs and the emulator side by side
// (kareus/measure/device_check.h). Read-only.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "kareus/common/error.h"
#include "kareus/common/json.h"
#include "kareus/measure/device_check.h"

namespace kareus::cli {

void AddDeviceCheckCommand(CLI::App& app) {
  struct Args {
    std::string workload;
    bool json = false;
    std::string output;
    measure::DeviceCheckOptions options;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("device-check",
                                 "Measure this machine's GPUs against the emulator (read-only: "
                                 "never changes clocks or power limits)");
  cmd->add_option("WORKLOAD", args->workload,
                  "Workload whose partitions are measured (default: "
                  "examples/device/llama3.2-3b-tp8-h200.yaml)");
  cmd->add_flag("--json", args->json, "Print the report as JSON");
  cmd->add_option("--output", args->output, "Also write the JSON report to this file (atomically)");
  cmd->add_option("--devices", args->options.devices,
                  "CUDA device ordinals to use (default 0, 1, ...)")
      ->delimiter(',');
  cmd->add_option("--window", args->options.window_s,
                  "Energy window per partition measurement, seconds")
      ->capture_default_str();
  cmd->add_option("--cooldown", args->options.cooldown_s, "Idle before each energy window, seconds")
      ->capture_default_str();
  cmd->add_option("--kernel-runs", args->options.kernel_runs, "Timed runs per kernel")
      ->capture_default_str();
  cmd->callback([args]() {
    measure::DeviceCheckOptions options = args->options;
    options.workload = args->workload;
    if (options.workload.empty()) {
      options.workload = measure::DefaultDeviceCheckWorkload();
      if (options.workload.empty()) {
        ThrowInput("WORKLOAD", "(none)",
                   "no workload given and examples/device/llama3.2-3b-tp8-h200.yaml was not "
                   "found next to the data folder; pass a workload file");
      }
    }
    if (auto error = options.Validate()) {
      const std::string field = error->field == "window_s"      ? "--window"
                                : error->field == "cooldown_s"  ? "--cooldown"
                                : error->field == "kernel_runs" ? "--kernel-runs"
                                : error->field == "devices"     ? "--devices"
                                                                : error->field;
      ThrowInput(field, error->value, error->rule);
    }
    if (!args->output.empty()) {
      const std::string output = args->output;
      options.on_section = [output](const Json& partial) { WriteJsonFile(output, partial); };
    }
    const Json report = measure::RunDeviceCheck(options);
    if (!args->output.empty()) WriteJsonFile(args->output, report);
    std::fputs(args->json ? DumpJson(report).c_str() : measure::FormatDeviceCheck(report).c_str(),
               stdout);
    std::string failed;
    for (const auto& [name, section] : report.items()) {
      if (section.is_object() && section.value("status", "") == "error")
        failed += (failed.empty() ? "" : ", ") + name;
    }
    if (!failed.empty()) {
      throw EnvironmentError("device check: these sections failed (see the report): " + failed);
    }
  });
}

}  // namespace kareus::cli
