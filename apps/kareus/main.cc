// SPDX-License-Identifier: Apache-2.0
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"

int main(int argc, char** argv) {
  // Before any thread exists: a Ctrl-C or SIGTERM leaves no temporary file or staging folder.
  kareus::RemoveTemporariesOnTermination();
  CLI::App app{
      "Kareus: cut the energy of large-model training by choosing GPU clocks and kernel "
      "schedules jointly."};
  app.require_subcommand(1);
  app.fallthrough(false);
  kareus::cli::AddGpusCommand(app);
  kareus::cli::AddModelsCommand(app);
  kareus::cli::AddPartitionsCommand(app);
  kareus::cli::AddRunCommand(app);
  kareus::cli::AddEvaluateCommand(app);
  kareus::cli::AddProfileCommand(app);
  kareus::cli::AddSimulateCommand(app);
  kareus::cli::AddSolveCommand(app);
  kareus::cli::AddExportCommand(app);
  kareus::cli::AddScheduleCommand(app);
  kareus::cli::AddDeviceCheckCommand(app);
  kareus::cli::AddValidateCommand(app);
  // CLI11 alone answers a mistyped command with "A subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) {
      known = known || command->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + command->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "kareus: error: command = %s: unknown command (valid: %s)\n",
                   kareus::ShownValue(argv[1]).c_str(), names.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  } catch (const kareus::Error& e) {
    std::fprintf(stderr, "kareus: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kareus: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
