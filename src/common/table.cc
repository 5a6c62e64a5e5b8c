// SPDX-License-Identifier: Apache-2.0
#include "kareus/common/table.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "kareus/common/error.h"

namespace kareus {
namespace {

bool LooksNumeric(const std::string& cell) {
  if (cell.empty()) return false;
  const char c = cell[0];
  return std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.';
}

}  // namespace

Table::Table(std::vector<std::string> header) : header_(std::move(header)) {}

void Table::AddRow(std::vector<std::string> cells) {
  KAREUS_CHECK(cells.size() == header_.size())
      << "row has " << cells.size() << " cells, header has " << header_.size();
  rows_.push_back(std::move(cells));
}

std::string Table::ToString() const {
  std::vector<size_t> width(header_.size());
  for (size_t c = 0; c < header_.size(); ++c) width[c] = header_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto render = [&](const std::vector<std::string>& row, bool header) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      const bool right = !header && LooksNumeric(row[c]);
      line += right ? pad + row[c] : row[c] + pad;
      if (c + 1 < row.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    return line + "\n";
  };
  std::string out = render(header_, true);
  size_t total = 0;
  for (size_t c = 0; c < width.size(); ++c) total += width[c] + (c + 1 < width.size() ? 2 : 0);
  out += std::string(total, '-') + "\n";
  for (const auto& row : rows_) out += render(row, false);
  return out;
}

std::string FormatFixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

}  // namespace kareus
