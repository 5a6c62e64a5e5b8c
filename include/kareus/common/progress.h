// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <chrono>
#include <string>

namespace kareus {

// One self-rewriting status line on stderr for long work (DESIGN.md §6). Silent when disabled
// or when stderr is not a terminal, so logs and pipes never see carriage returns.
class Progress {
 public:
  explicit Progress(bool enabled);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  static bool StderrIsTerminal();
  bool active() const { return active_; }
  // Rewrites the line; redraws at most ~10 times a second unless `force`.
  void Update(const std::string& line, bool force = false);
  // Leaves `line` (if not empty) on its own line and clears the status line.
  void Finish(const std::string& line = "");

 private:
  bool active_;
  std::size_t last_width_ = 0;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace kareus
