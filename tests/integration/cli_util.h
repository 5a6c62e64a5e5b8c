// SPDX-License-Identifier: Apache-2.0
// Runs the built `kareus` binary for end-to-end CLI tests.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kareus::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;  // standard output
  std::string err;  // standard error
};

inline std::filesystem::path SourceDir() {
  const char* dir = std::getenv("KAREUS_SOURCE_DIR");
  return dir ? std::filesystem::path(dir) : std::filesystem::current_path();
}

inline std::filesystem::path KareusBinary() {
  const char* dir = std::getenv("KAREUS_BINARY_DIR");
  return std::filesystem::path(dir ? dir : ".") / "apps" / "kareus" / "kareus";
}

inline std::string Slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// `args` is appended to the binary's path as shell words; the working directory is unchanged.
inline CliResult RunKareus(const std::string& args) {
  static int counter = 0;
  const auto tmp = std::filesystem::temp_directory_path() /
                   ("kareus_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  const std::string command = KareusBinary().string() + " " + args + " >" + tmp.string() +
                              ".out 2>" + tmp.string() + ".err </dev/null";
  const int status = std::system(command.c_str());
  CliResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = Slurp(tmp.string() + ".out");
  result.err = Slurp(tmp.string() + ".err");
  std::filesystem::remove(tmp.string() + ".out");
  std::filesystem::remove(tmp.string() + ".err");
  return result;
}

}  // namespace kareus::testing
