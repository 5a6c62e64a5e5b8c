// SPDX-License-Identifier: Apache-2.0
#include "kareus/common/progress.h"

#include <unistd.h>

#include <cstdio>

namespace kareus {

Progress::Progress(bool enabled) : active_(enabled && StderrIsTerminal()) {}

Progress::~Progress() {
  if (active_ && last_width_ > 0) Finish();
}

bool Progress::StderrIsTerminal() { return isatty(STDERR_FILENO) == 1; }

void Progress::Update(const std::string& line, bool force) {
  if (!active_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && last_width_ > 0 && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  std::string padded = line;
  if (padded.size() < last_width_) padded.append(last_width_ - padded.size(), ' ');
  std::fprintf(stderr, "\r%s", padded.c_str());
  std::fflush(stderr);
  last_width_ = line.size();
}

void Progress::Finish(const std::string& line) {
  if (!active_) return;
  std::string text = "\r" + std::string(last_width_, ' ') + "\r";
  if (!line.empty()) text += line + "\n";
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
  last_width_ = 0;
}

}  // namespace kareus
