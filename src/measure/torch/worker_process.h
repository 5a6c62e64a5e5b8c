// SPDX-License-Identifier: Apache-2.0
// A child process spoken to in JSON lines: its standard input and output are pipes, its
// standard error a file (its tail goes into error messages). It runs in a process group of its
// own, so that stopping it stops what it started (the measurement ranks).
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kareus/common/json.h"

namespace kareus::measure::internal {

class WorkerProcess {
 public:
  // Starts argv[0] (a path, or a name looked up on PATH) with the current environment and
  // `environment` on top. EnvironmentError when it cannot be started.
  WorkerProcess(const std::vector<std::string>& argv,
                const std::map<std::string, std::string>& environment);
  ~WorkerProcess();  // closes its input, waits a little, then stops its process group
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // One line of JSON; false when the worker no longer reads (it exited).
  bool Send(const Json& message);
  // The next line, parsed into `line` (kLine); kTimeout after `timeout_s` of silence, kClosed
  // when the worker closed its output (exited), kGarbage (the text in `garbage`) for a line
  // that is not JSON.
  enum class Outcome { kLine, kTimeout, kClosed, kGarbage };
  Outcome Receive(double timeout_s, Json& line, std::string& garbage);

  // Stops the worker and its process group at once (SIGKILL) and reaps it.
  void Kill();
  pid_t pid() const { return pid_; }
  // How the worker ended ("exited with code 1", "was killed by signal 9"), reaping it if it has;
  // empty while it runs.
  std::string ExitStatus();
  // The last `bytes` of what it wrote on its standard error.
  std::string StderrTail(std::size_t bytes = 2000) const;

 private:
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  std::string stderr_path_;
  std::string buffer_;
  std::optional<int> status_;
};

}  // namespace kareus::measure::internal
