// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"

namespace {

// "--methd = (unknown flag of kareus run): did you mean --methods?" for the first --flag on the
// command line that the command does not have; nullopt when every one is known.
std::optional<std::string> UnknownFlag(CLI::App& app, int argc, char** argv) {
  CLI::App* command = nullptr;
  try {
    command = app.get_subcommand(argv[1]);
  } catch (const CLI::OptionNotFound&) {
    return std::nullopt;  // an unknown command is reported by its own check
  }
  std::vector<std::string> flags;
  for (const CLI::App* owner :
       {static_cast<const CLI::App*>(&app), static_cast<const CLI::App*>(command)}) {
    for (const CLI::Option* option : owner->get_options()) {
      for (const std::string& name : option->get_lnames()) flags.push_back("--" + name);
    }
  }
  for (int i = 2; i < argc; ++i) {
    const std::string token = argv[i];
    if (token == "--") break;  // what follows is positional
    if (token.size() < 3 || token.compare(0, 2, "--") != 0) continue;
    const std::string name = token.substr(0, token.find('='));
    if (std::find(flags.begin(), flags.end(), name) != flags.end()) continue;
    const auto closest = kareus::ClosestChoice(name, flags);
    return kareus::ShownValue(name) + ": unknown flag of kareus " + command->get_name() +
           (closest ? "; did you mean " + *closest + "?" : "") + " (kareus " + command->get_name() +
           " --help lists them)";
  }
  return std::nullopt;
}

}  // namespace

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
  kareus::cli::AddPickCommand(app);
  kareus::cli::AddDeviceCheckCommand(app);
  kareus::cli::AddValidateCommand(app);
  kareus::cli::AddCalibrateCommand(app);
  app.set_version_flag("--version", std::string("kareus ") + KAREUS_VERSION);
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
  // CLI11 takes an unknown --flag for a positional argument and answers about the positional
  // ("WORKLOAD: At Most 1 required but received 2"): name the flag, and the closest valid one.
  if (argc > 1 && argv[1][0] != '-') {
    if (const auto message = UnknownFlag(app, argc, argv)) {
      std::fprintf(stderr, "kareus: error: %s\n", message->c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
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
