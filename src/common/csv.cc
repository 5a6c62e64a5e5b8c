// SPDX-License-Identifier: Apache-2.0
#include "kareus/common/csv.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <system_error>
#include <utility>

#include "kareus/common/error.h"

namespace kareus {
namespace {

constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// Line `*pos` onwards, without its line end; moves *pos past it (beyond the text's end after the
// last line). Call only while *pos <= text.size().
std::string_view NextLine(std::string_view text, std::size_t* pos) {
  const std::size_t end = std::min(text.find('\n', *pos), text.size());
  std::string_view line = text.substr(*pos, end - *pos);
  *pos = end + 1;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace

std::string CsvError::Message(const std::string& source) const {
  const std::string where = source + ":" + std::to_string(line) + ": ";
  switch (kind) {
    case Kind::kNotUtf8:
      return where + "bytes that are not UTF-8";
    case Kind::kUnclosedQuote:
      return where + "a quoted field is not closed on its line";
    case Kind::kFieldCount:
      return where + std::to_string(fields) + " fields, the header has " + std::to_string(expected);
  }
  return where + "not CSV";
}

std::string_view CsvTrimmed(std::string_view text) {
  while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
  return text;
}

CsvReader::CsvReader(std::string_view text, const CsvOptions& options)
    : text_(text), options_(options) {
  if (options_.allow_bom && text_.starts_with(kByteOrderMark)) pos_ = kByteOrderMark.size();
  if (options_.require_utf8 && !IsValidUtf8(text_)) {
    // '\n' is never part of a multi-byte sequence, so the first line that is not UTF-8 on its
    // own holds the first fault.
    CsvError error;
    error.kind = CsvError::Kind::kNotUtf8;
    std::size_t pos = 0;
    while (pos <= text_.size()) {
      const std::string_view line = NextLine(text_, &pos);
      ++error.line;
      if (!IsValidUtf8(line)) {
        error.raw = std::string(line);
        break;
      }
    }
    error_ = std::move(error);
  }
}

bool CsvReader::Next(CsvRow* row) {
  if (error_) return false;
  while (pos_ <= text_.size()) {
    const std::string_view line = NextLine(text_, &pos_);
    ++line_;
    const std::string_view content = CsvTrimmed(line);
    if (options_.trim ? content.empty() : line.empty()) continue;
    if (options_.allow_comments && !content.empty() && content.front() == '#') continue;

    row->line = line_;
    row->raw.assign(line);
    row->fields.clear();
    std::string current;
    bool quoted = false;      // inside a quoted section
    bool was_quoted = false;  // the current field had one: kept as written
    const auto finish = [&] {
      if (was_quoted || !options_.trim) {
        row->fields.push_back(std::move(current));
      } else {
        row->fields.emplace_back(CsvTrimmed(current));
      }
      current.clear();
      was_quoted = false;
    };
    for (std::size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (quoted) {
        if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
          current += '"';
          ++i;
        } else if (c == '"') {
          quoted = false;
        } else {
          current += c;
        }
      } else if (c == '"' && options_.quotes &&
                 (options_.trim ? CsvTrimmed(current).empty() : current.empty())) {
        quoted = true;
        was_quoted = true;
        current.clear();
      } else if (c == ',') {
        finish();
      } else {
        current += c;
      }
    }
    if (quoted) {
      error_ = CsvError{.kind = CsvError::Kind::kUnclosedQuote,
                        .line = line_,
                        .raw = row->raw,
                        .fields = 0,
                        .expected = 0};
      return false;
    }
    finish();
    if (header_fields_ == 0) {
      header_fields_ = row->fields.size();
    } else if (options_.fixed_field_count && row->fields.size() != header_fields_) {
      error_ = CsvError{.kind = CsvError::Kind::kFieldCount,
                        .line = line_,
                        .raw = row->raw,
                        .fields = row->fields.size(),
                        .expected = header_fields_};
      return false;
    }
    return true;
  }
  return false;
}

CsvTable ParseCsv(std::string_view text, const CsvOptions& options) {
  CsvTable table;
  CsvReader reader(text, options);
  CsvRow row;
  while (reader.Next(&row)) table.rows.push_back(std::move(row));
  table.error = reader.error();
  return table;
}

std::vector<CsvRow> ParseCsvOrThrow(std::string_view text, const std::string& source,
                                    const CsvOptions& options) {
  CsvTable table = ParseCsv(text, options);
  if (table.error) throw InputError(table.error->Message(source));
  return std::move(table.rows);
}

CsvNumber ParseCsvNumber(std::string_view text) {
  if (text.empty()) return {};
  double value = 0.0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return {};
  if (!std::isfinite(value)) return {.status = CsvNumber::Status::kNotFinite, .value = value};
  return {.status = CsvNumber::Status::kOk, .value = value};
}

}  // namespace kareus
