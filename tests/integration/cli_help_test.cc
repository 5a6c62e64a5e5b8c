// SPDX-License-Identifier: Apache-2.0
// Every default `kareus run|evaluate|profile|solve --help` prints is the library's: read here
// from the same Options structs, formatted as CLI11 prints them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "integration/cli_util.h"
#include "kareus/common/context.h"
#include "kareus/common/io.h"
#include "kareus/methods/run.h"
#include "kareus/mobo/profiler.h"
#include "kareus/plan/perseus.h"

namespace kareus {
namespace {

using testing::RunKareus;

// CLI11 (Debian's 2.3) prints a captured default as "TYPE=value" after the flag.
std::string Shown(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// The help line of `flag` (text up to the next flag).
std::string HelpOf(const std::string& help, const std::string& flag) {
  const auto at = help.find(flag + " ");
  if (at == std::string::npos) return "";
  const auto end = help.find("\n  -", at + 1);
  return help.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

void ExpectDefault(const std::string& help, const std::string& flag, const std::string& value) {
  const std::string line = HelpOf(help, flag);
  ASSERT_FALSE(line.empty()) << flag << " missing from\n" << help;
  const std::string shown = "=" + value;
  const auto at = line.find(shown);
  ASSERT_NE(at, std::string::npos) << flag << ": " << line;
  const char next = at + shown.size() < line.size() ? line[at + shown.size()] : ' ';
  EXPECT_TRUE(next == ' ' || next == '\n') << flag << ": " << line;
}

TEST(CliHelp, ProfilerDefaultsComeFromProfileOptions) {
  const mobo::ProfileOptions defaults;
  for (const char* command : {"run", "evaluate", "profile"}) {
    const auto r = RunKareus(std::string(command) + " --help");
    ASSERT_EQ(r.exit_code, 0) << command;
    ExpectDefault(r.out, "--budget-fraction", Shown(defaults.budget_fraction));
    ExpectDefault(r.out, "--budget", std::to_string(defaults.budget));
    ExpectDefault(r.out, "--surrogate", mobo::ToString(defaults.surrogate));
    ExpectDefault(r.out, "--strategy", mobo::ToString(defaults.strategy));
    ExpectDefault(r.out, "--initial", std::to_string(defaults.initial_design));
    ExpectDefault(r.out, "--batch", std::to_string(defaults.batch_size));
    ExpectDefault(r.out, "--seed", std::to_string(Context{}.seed));
    ExpectDefault(r.out, "--backend", "emulator");
    // The old help text promised 0.12 while the library used 0.15: no number but the
    // struct's may appear on the budget line.
    EXPECT_EQ(HelpOf(r.out, "--budget-fraction").find("0.12"), std::string::npos) << command;
  }
}

TEST(CliHelp, RunDefaultsComeFromRunOptions) {
  const methods::RunOptions defaults;
  const auto r = RunKareus("run --help");
  ASSERT_EQ(r.exit_code, 0);
  ExpectDefault(r.out, "--unit-time", Shown(defaults.unit_time_s * 1e3));
  ExpectDefault(r.out, "--evaluation", methods::ToString(defaults.evaluation));
  std::string names;
  for (const auto& m : methods::DefaultMethods()) names += (names.empty() ? "" : ",") + m.name;
  EXPECT_NE(HelpOf(r.out, "--methods").find("default: " + names), std::string::npos) << r.out;
}

TEST(CliHelp, SolveDefaultsComeFromSolveProfileOptions) {
  const plan::SolveProfileOptions defaults;
  const auto r = RunKareus("solve --help");
  ASSERT_EQ(r.exit_code, 0);
  ExpectDefault(r.out, "--unit-time", Shown(defaults.unit_time_s * 1e3));
  ExpectDefault(r.out, "--gpus-per-stage", std::to_string(defaults.gpus_per_stage));
}

TEST(CliHelp, UnknownCommandExitsTwoListingTheCommands) {
  const auto r = RunKareus("simulte");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("command = simulte: unknown command (valid: gpus, models,"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("simulate"), std::string::npos) << r.err;
  EXPECT_EQ(RunKareus("").exit_code, 2);  // no command at all: CLI11's usage error
}

TEST(CliHelp, VersionAndMisspeltFlags) {
  const auto version = RunKareus("--version");
  EXPECT_EQ(version.exit_code, 0) << version.err;
  EXPECT_EQ(version.out, "kareus 0.1.0\n");
  const auto typo = RunKareus(
      "run " +
      (testing::SourceDir() / "examples/paper/01-llama3.2-3b-tp8-mbs8-seq4096.yaml").string() +
      " --out /tmp/kareus_cli_help_typo --method kareus");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_THAT(typo.err, ::testing::HasSubstr(
                            "--method: unknown flag of kareus run; did you mean --methods?"));
  EXPECT_FALSE(std::filesystem::exists("/tmp/kareus_cli_help_typo"));
  const auto unknown = RunKareus("schedule run --iterations=3 --zzzz 1");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, ::testing::HasSubstr("--zzzz: unknown flag of kareus schedule (kareus "
                                                "schedule --help lists them)"));
  // --flag=value is a known flag with its value; a value after -- is positional.
  EXPECT_THAT(RunKareus("schedule run --iterations=3").err,
              ::testing::Not(::testing::HasSubstr("unknown flag")));
}

TEST(CliHelp, UnknownBackendExitsTwo) {
  const auto r = RunKareus(
      "profile " +
      (testing::SourceDir() / "examples/paper/01-llama3.2-3b-tp8-mbs8-seq4096.yaml").string() +
      " --backend tpu --quiet");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--backend = tpu"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("emulator"), std::string::npos) << r.err;
}

// README.md's command-line reference names every command `kareus --help` lists and every flag
// each command's --help prints: a flag added without documentation fails here.
TEST(CliHelp, ReadmeDocumentsEveryCommandAndFlag) {
  const std::string readme = ReadTextFile(testing::SourceDir() / "README.md");
  const auto documented = [&readme](const std::string& word) {
    for (auto at = readme.find(word); at != std::string::npos; at = readme.find(word, at + 1)) {
      const std::size_t end = at + word.size();
      const char next = end < readme.size() ? readme[end] : ' ';
      if (!std::isalnum(static_cast<unsigned char>(next)) && next != '-' && next != '_')
        return true;
    }
    return false;
  };
  const auto top = RunKareus("--help");
  ASSERT_EQ(top.exit_code, 0) << top.err;
  const auto commands_at = top.out.find("Subcommands:");
  ASSERT_NE(commands_at, std::string::npos) << top.out;
  std::istringstream lines(top.out.substr(commands_at));
  std::vector<std::string> commands;
  const std::regex command_line(R"(^  ([a-z][a-z-]*)\s)");
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, command_line)) commands.push_back(m[1]);
  }
  ASSERT_GE(commands.size(), 11u) << top.out;
  const std::regex flag_line(R"(^  (?:-[A-Za-z],)?(--[a-z0-9][a-z0-9-]*))");
  for (const std::string& command : commands) {
    EXPECT_TRUE(documented("`kareus " + command)) << "README.md: no `kareus " << command << "`";
    const auto help = RunKareus(command + " --help");
    ASSERT_EQ(help.exit_code, 0) << command << ": " << help.err;
    std::istringstream flags(help.out);
    std::set<std::string> seen;
    for (std::string line; std::getline(flags, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, flag_line) || m[1] == "--help") continue;
      seen.insert(m[1]);
      EXPECT_TRUE(documented(m[1]))
          << "README.md does not mention " << m[1] << " of kareus " << command;
    }
    EXPECT_FALSE(seen.empty()) << command << " --help listed no flags";
  }
}

}  // namespace
}  // namespace kareus
