// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>
#include <vector>

namespace kareus {

// A plain-text table for the terminal: a header row, then rows; numbers right-aligned,
// text left-aligned, columns separated by two spaces.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void AddRow(std::vector<std::string> cells);
  std::string ToString() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// Fixed-point formatting helper for table cells ("12.35").
std::string FormatFixed(double value, int decimals);

}  // namespace kareus
