// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: the shared CSV reader (kareus/common/csv.h) under every combination of its
// options (the low six bits of byte 0; the rest is the text), and ParseCsvNumber on each field.
// The reader never throws; its rows and fault must agree with the options: line numbers
// increase, no field holds a line end, rows read as written (joined by ',' without quotes and
// trimming), equal field counts with fixed_field_count, UTF-8 exactly when required, and a
// table written back as RFC 4180 reads as the same fields. A number that parses is finite and
// reads back from its shortest form.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "kareus/common/csv.h"
#include "kareus/common/error.h"

namespace {

void Check(bool condition) {
  if (!condition) __builtin_trap();
}

std::string Join(const std::vector<std::string>& fields) {
  std::string out;
  for (std::size_t i = 0; i < fields.size(); ++i) out += (i ? "," : "") + fields[i];
  return out;
}

// Every field in quotes, '"' doubled: what a reader with `quotes` takes back as the fields.
std::string Quoted(const std::vector<kareus::CsvRow>& rows) {
  std::string out;
  for (const kareus::CsvRow& row : rows) {
    for (std::size_t i = 0; i < row.fields.size(); ++i) {
      out += i ? ",\"" : "\"";
      for (const char c : row.fields[i]) {
        out += c;
        if (c == '"') out += '"';
      }
      out += '"';
    }
    out += "\r\n";
  }
  return out;
}

void CheckNumber(const std::string& field) {
  const kareus::CsvNumber number = kareus::ParseCsvNumber(field);
  if (number.status == kareus::CsvNumber::Status::kNotFinite) Check(!std::isfinite(number.value));
  if (!number.ok()) return;
  Check(std::isfinite(number.value));
  const kareus::CsvNumber again = kareus::ParseCsvNumber(fmt::format("{}", number.value));
  Check(again.ok() && again.value == number.value &&
        std::signbit(again.value) == std::signbit(number.value));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const kareus::CsvOptions options{.allow_bom = (data[0] & 1) != 0,
                                   .allow_comments = (data[0] & 2) != 0,
                                   .trim = (data[0] & 4) != 0,
                                   .quotes = (data[0] & 8) != 0,
                                   .require_utf8 = (data[0] & 16) != 0,
                                   .fixed_field_count = (data[0] & 32) != 0};
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const kareus::CsvTable table = kareus::ParseCsv(text, options);

  std::size_t last_line = 0;
  for (const kareus::CsvRow& row : table.rows) {
    Check(row.line > last_line && !row.fields.empty());
    last_line = row.line;
    Check(row.raw.find('\n') == std::string::npos);
    for (const std::string& field : row.fields) {
      Check(field.find('\n') == std::string::npos);
      if (options.trim && !options.quotes) Check(kareus::CsvTrimmed(field) == field);
      CheckNumber(field);
    }
    if (!options.trim && !options.quotes) Check(Join(row.fields) == row.raw);
    if (options.fixed_field_count) Check(row.fields.size() == table.rows[0].fields.size());
    if (options.allow_comments) Check(kareus::CsvTrimmed(row.raw).front() != '#');
  }
  if (options.require_utf8) {
    const bool utf8 = kareus::IsValidUtf8(text);
    Check(utf8 == !(table.error && table.error->kind == kareus::CsvError::Kind::kNotUtf8));
    if (!utf8) Check(table.rows.empty() && table.error->line >= 1);
  }
  if (table.error) {
    Check(table.error->line > last_line && table.error->raw.find('\n') == std::string::npos);
    if (!options.quotes) Check(table.error->kind != kareus::CsvError::Kind::kUnclosedQuote);
    if (!options.fixed_field_count) Check(table.error->kind != kareus::CsvError::Kind::kFieldCount);
    (void)table.error->Message("fuzz.csv");
  }

  // The same through the streaming reader.
  kareus::CsvReader reader(text, options);
  kareus::CsvRow row;
  std::size_t count = 0;
  while (reader.Next(&row)) {
    Check(count < table.rows.size() && row.fields == table.rows[count].fields);
    ++count;
  }
  Check(count == table.rows.size() && reader.error().has_value() == table.error.has_value());

  // Written back as RFC 4180, the rows read as the same fields.
  kareus::CsvOptions quoted = options;
  quoted.quotes = true;
  const kareus::CsvTable again = kareus::ParseCsv(Quoted(table.rows), quoted);
  Check(!again.error && again.rows.size() == table.rows.size());
  for (std::size_t r = 0; r < again.rows.size(); ++r) {
    Check(again.rows[r].fields == table.rows[r].fields);
  }
  return 0;
}
