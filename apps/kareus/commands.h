// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <CLI/CLI.hpp>

// Each subcommand lives in its own cmd_<name>.cc and registers itself here. A command parses
// its flags, calls one library entry point and prints; it holds no logic of its own.
namespace kareus::cli {

void AddGpusCommand(CLI::App& app);
void AddModelsCommand(CLI::App& app);
void AddPartitionsCommand(CLI::App& app);
void AddRunCommand(CLI::App& app);
void AddEvaluateCommand(CLI::App& app);
void AddProfileCommand(CLI::App& app);
void AddSimulateCommand(CLI::App& app);
void AddSolveCommand(CLI::App& app);
void AddExportCommand(CLI::App& app);
void AddDeviceCheckCommand(CLI::App& app);
void AddValidateCommand(CLI::App& app);
void AddCalibrateCommand(CLI::App& app);
void AddScheduleCommand(CLI::App& app);
void AddPickCommand(CLI::App& app);

}  // namespace kareus::cli
