// SPDX-License-Identifier: Apache-2.0
// Timetables' text inputs (kareus/plan/timetable.h): UTC times and durations, and signal CSVs
// (prices, carbon intensities, power caps) read through common/csv.h.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "kareus/common/csv.h"
#include "kareus/common/io.h"
#include "kareus/plan/timetable.h"

namespace kareus::plan {
namespace {

// Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar (H. Hinnant's
// days_from_civil).
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

// Reads exactly `digits` decimal digits at `*pos`.
bool Digits(std::string_view text, std::size_t* pos, int digits, int* value) {
  if (*pos + digits > text.size()) return false;
  int v = 0;
  for (int i = 0; i < digits; ++i) {
    const char c = text[*pos + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *pos += digits;
  *value = v;
  return true;
}

std::string_view Trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t' || text.front() == '\r' ||
                           text.front() == '\n')) {
    text.remove_prefix(1);
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r' ||
                           text.back() == '\n')) {
    text.remove_suffix(1);
  }
  return text;
}

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::optional<double> ParseNumber(std::string_view text) {
  const CsvNumber number = ParseCsvNumber(Trimmed(text));
  return number.ok() ? std::optional<double>(number.value) : std::nullopt;
}

// One CSV record per line (RFC 4180 fields: quoted fields may hold commas and doubled quotes;
// a quoted newline is not supported, as no signal export writes one). A byte order mark, blank
// lines and lines starting with '#' (a file's note of its origin) are skipped; each row keeps its
// line number.
std::vector<CsvRow> ReadCsvRows(std::string_view text, const std::string& field,
                                const std::string& source) {
  CsvTable table =
      ParseCsv(text, {.allow_bom = true, .allow_comments = true, .trim = true, .quotes = true});
  if (table.error) {  // kUnclosedQuote: the only fault these options leave
    ThrowInput(field, fmt::format("{} line {}", source, table.error->line),
               "a quoted field is not closed on its line");
  }
  return std::move(table.rows);
}

bool NamesATime(const std::string& header) {
  const std::string h = Lower(header);
  for (const char* word : {"datetime", "timestamp", "time", "date", "start", "period"}) {
    if (h.find(word) != std::string::npos) return true;
  }
  return false;
}

bool NamesASignal(const std::string& header) {
  const std::string h = Lower(header);
  for (const char* word :
       {"carbon intensity", "carbon_intensity", "co2", "price", "cost", "signal", "intensity"}) {
    if (h.find(word) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

std::optional<double> ParseUtcTime(std::string_view text) {
  text = Trimmed(text);
  std::size_t pos = 0;
  int year = 0, month = 0, day = 0;
  if (!Digits(text, &pos, 4, &year) || pos >= text.size() || text[pos++] != '-' ||
      !Digits(text, &pos, 2, &month) || pos >= text.size() || text[pos++] != '-' ||
      !Digits(text, &pos, 2, &day)) {
    return std::nullopt;
  }
  if (month < 1 || month > 12 || day < 1 || day > 31) return std::nullopt;
  static constexpr int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  if (day > kDays[month - 1] || (month == 2 && day == 29 && !leap)) return std::nullopt;
  int hour = 0, minute = 0, second = 0;
  double fraction = 0.0;
  if (pos < text.size() && (text[pos] == 'T' || text[pos] == 't' || text[pos] == ' ')) {
    ++pos;
    if (!Digits(text, &pos, 2, &hour) || pos >= text.size() || text[pos++] != ':' ||
        !Digits(text, &pos, 2, &minute)) {
      return std::nullopt;
    }
    if (pos < text.size() && text[pos] == ':') {
      ++pos;
      if (!Digits(text, &pos, 2, &second)) return std::nullopt;
      if (pos < text.size() && (text[pos] == '.' || text[pos] == ',')) {
        ++pos;
        double scale = 0.1;
        const std::size_t first = pos;
        while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
          fraction += scale * (text[pos] - '0');
          scale /= 10;
          ++pos;
        }
        if (pos == first) return std::nullopt;
      }
    }
    if (hour > 23 || minute > 59 || second > 59) return std::nullopt;
  }
  int offset_s = 0;
  if (pos < text.size()) {
    std::string_view zone = text.substr(pos);
    if (!zone.empty() && zone.front() == ' ') zone.remove_prefix(1);
    if (zone == "Z" || zone == "z" || zone == "UTC" || zone == "GMT") {
      pos = text.size();
    } else if (!zone.empty() && (zone.front() == '+' || zone.front() == '-')) {
      const int sign = zone.front() == '+' ? 1 : -1;
      std::size_t zpos = 1;
      int oh = 0, om = 0;
      if (!Digits(zone, &zpos, 2, &oh)) return std::nullopt;
      if (zpos < zone.size() && zone[zpos] == ':') ++zpos;
      if (zpos < zone.size() && !Digits(zone, &zpos, 2, &om)) return std::nullopt;
      if (zpos != zone.size() || oh > 23 || om > 59) return std::nullopt;
      offset_s = sign * (oh * 3600 + om * 60);
      pos = text.size();
    } else {
      return std::nullopt;
    }
  }
  const int64_t days =
      DaysFromCivil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  return static_cast<double>(days * 86400 + hour * 3600 + minute * 60 + second - offset_s) +
         fraction;
}

std::string FormatUtcTime(double unix_s) {
  const auto seconds = static_cast<std::time_t>(std::llround(unix_s));
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

std::optional<double> ParseDuration(std::string_view text) {
  text = Trimmed(text);
  if (text.empty()) return std::nullopt;
  if (const auto plain = ParseNumber(text)) {
    return *plain > 0 ? plain : std::nullopt;
  }
  double total = 0.0;
  std::size_t pos = 0;
  std::string units_seen;
  while (pos < text.size()) {
    const std::size_t first = pos;
    while (pos < text.size() && ((text[pos] >= '0' && text[pos] <= '9') || text[pos] == '.')) ++pos;
    const auto number = ParseNumber(text.substr(first, pos - first));
    if (!number || pos >= text.size()) return std::nullopt;
    const char unit = text[pos++];
    const double scale = unit == 'd'   ? 86400
                         : unit == 'h' ? 3600
                         : unit == 'm' ? 60
                         : unit == 's' ? 1
                                       : 0;
    if (scale == 0 || units_seen.find(unit) != std::string::npos) return std::nullopt;
    units_seen += unit;
    total += *number * scale;
  }
  return total > 0 && std::isfinite(total) ? std::optional<double>(total) : std::nullopt;
}

Signal ParseSignalCsv(std::string_view text, const std::string& source, const std::string& field,
                      const std::string& column, bool non_negative, bool one_row_holds_on) {
  const std::vector<CsvRow> rows = ReadCsvRows(text, field, source);
  if (rows.empty()) ThrowInput(field, source, "holds no rows");
  const auto where = [&](const CsvRow& row) { return fmt::format("{} line {}", source, row.line); };
  // A header when the first row's first field is not a time.
  const bool has_header = !ParseUtcTime(rows[0].fields[0]).has_value();
  int time_column = 0;
  int value_column = 1;
  Signal signal;
  if (has_header) {
    const std::vector<std::string>& header = rows[0].fields;
    time_column = -1;
    value_column = -1;
    for (int c = 0; c < static_cast<int>(header.size()); ++c) {
      if (time_column < 0 && NamesATime(header[c])) time_column = c;
    }
    if (time_column < 0) {
      ThrowInput(field, where(rows[0]),
                 "no column names a time (datetime, timestamp, time, date, start, period), and "
                 "the first field is not an ISO-8601 time");
    }
    if (!column.empty()) {
      for (int c = 0; c < static_cast<int>(header.size()); ++c) {
        if (header[c] == column) value_column = c;
      }
      if (value_column < 0) {
        ThrowInput(field + "-column", column,
                   "no such column in " + source + " (it has: " + JoinNames(header) + ")");
      }
    } else if (header.size() == 2) {
      value_column = 1 - time_column;
    } else {
      for (int c = 0; c < static_cast<int>(header.size()); ++c) {
        if (value_column < 0 && c != time_column && NamesASignal(header[c])) value_column = c;
      }
      if (value_column < 0) {
        ThrowInput(field, where(rows[0]),
                   "no column names a carbon intensity or a price; name one with " + field +
                       "-column (columns: " + JoinNames(header) + ")");
      }
    }
    signal.column = header[value_column];
  } else if (!column.empty()) {
    ThrowInput(field + "-column", column, source + " has no header row to find it in");
  }
  for (std::size_t r = has_header ? 1 : 0; r < rows.size(); ++r) {
    const CsvRow& row = rows[r];
    const int needed = std::max(time_column, value_column) + 1;
    if (static_cast<int>(row.fields.size()) < needed) {
      ThrowInput(field, where(row),
                 fmt::format("{} fields, expected at least {}", row.fields.size(), needed));
    }
    const auto time = ParseUtcTime(row.fields[time_column]);
    if (!time) {
      ThrowInput(field, where(row) + ": " + row.fields[time_column],
                 "not an ISO-8601 time (e.g. 2025-03-01T14:00:00Z)");
    }
    const auto value = ParseNumber(row.fields[value_column]);
    if (!value || (non_negative && *value < 0)) {
      ThrowInput(field, where(row) + ": " + row.fields[value_column],
                 non_negative ? "must be a finite number >= 0" : "must be a finite number");
    }
    if (!signal.time.empty() && *time <= signal.time.back()) {
      ThrowInput(field, where(row) + ": " + row.fields[time_column],
                 "times must increase: the row before is at " + FormatUtcTime(signal.time.back()));
    }
    signal.time.push_back(*time);
    signal.value.push_back(*value);
  }
  if (signal.time.empty()) ThrowInput(field, source, "holds a header and no rows");
  if (signal.time.size() == 1) {
    if (one_row_holds_on) {
      signal.end = std::numeric_limits<double>::infinity();
      return signal;
    }
    ThrowInput(field, source, "holds one row: its length cannot be told (give two or more)");
  }
  signal.end = signal.time.back() + (signal.time.back() - signal.time[signal.time.size() - 2]);
  return signal;
}

Signal ReadSignalCsv(const std::filesystem::path& path, const std::string& field,
                     const std::string& column, bool non_negative, bool one_row_holds_on) {
  std::string text;
  try {
    text = ReadTextFile(path);
  } catch (const Error& e) {
    ThrowInput(field, path.string(), std::string("cannot be read: ") + e.what());
  }
  return ParseSignalCsv(text, path.string(), field, column, non_negative, one_row_holds_on);
}

}  // namespace kareus::plan
