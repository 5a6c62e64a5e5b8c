// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kareus {

// The one CSV reader of Kareus's input files (measured profiles, Perseus profiles, signal
// exports). A record is one line: lines end at '\n', and a '\r' before it (or at the end of the
// text) belongs to the line end. Fields are separated by ',' ("a,,b" has three fields, "a," two).
// Empty lines are skipped (with `trim`, lines of spaces too); every row keeps its line number.
// What else a file may hold is a choice of the reader that asks:
struct CsvOptions {
  // A UTF-8 byte order mark at the start of the text is skipped (else it is part of the first
  // field).
  bool allow_bom = false;
  // Lines whose first character other than spaces is '#' (a note of the file's origin) are
  // skipped.
  bool allow_comments = false;
  // Spaces around a field (CsvTrimmed's: space, \t, \n, \v, \f, \r) are not part of it, and a
  // line of spaces only is skipped as an empty one.
  bool trim = false;
  // RFC 4180 double-quoted fields within a line: a '"' that opens a field (after spaces, with
  // `trim`) starts a quoted section, which may hold ',' and '""' for a '"' and ends at the next
  // single '"'. A field with a quoted section is kept as written, untrimmed, and anything after
  // the closing quote belongs to it. A quoted section cannot span lines (kUnclosedQuote). Without
  // `quotes`, '"' is a character like any other.
  bool quotes = false;
  // The whole text must be well-formed UTF-8 (IsValidUtf8); checked before the first row, so no
  // row is read from a text that is not (kNotUtf8).
  bool require_utf8 = false;
  // Every row has as many fields as the first one (the header) (kFieldCount).
  bool fixed_field_count = false;
};

struct CsvRow {
  std::size_t line = 0;  // 1-based, counting every line of the text
  std::string raw;       // the line as written, without its line end
  std::vector<std::string> fields;
};

// Why a text is not CSV for the options asked. Readers word it in their own vocabulary (a
// message naming the file, the field or the flag); Message() is a plain default.
struct CsvError {
  enum class Kind {
    kNotUtf8,        // require_utf8: `line` is the first line with bytes that are not UTF-8
    kUnclosedQuote,  // quotes: a quoted section of `line` is not closed on its line
    kFieldCount,     // fixed_field_count: `line` has `fields` fields, the header `expected`
  };
  Kind kind = Kind::kNotUtf8;
  std::size_t line = 0;
  std::string raw;  // that line as written, without its line end
  std::size_t fields = 0;
  std::size_t expected = 0;

  // "SOURCE:LINE: 3 fields, the header has 5", "SOURCE:LINE: a quoted field is not closed on its
  // line", "SOURCE:LINE: bytes that are not UTF-8".
  std::string Message(const std::string& source) const;
};

// Reads rows one at a time from a text that outlives it (a reader that checks each row before
// the next is read reports the first fault of the file, whether the CSV's or its own).
class CsvReader {
 public:
  CsvReader(std::string_view text, const CsvOptions& options);

  // The next row into *row: true. False at the end of the text, or at a fault (then error()
  // says which; no row is read after it).
  bool Next(CsvRow* row);
  const std::optional<CsvError>& error() const { return error_; }

 private:
  std::string_view text_;
  CsvOptions options_;
  std::size_t pos_ = 0;
  std::size_t line_ = 0;
  std::size_t header_fields_ = 0;  // 0 until the first row
  std::optional<CsvError> error_;
};

// A whole text: the rows before the first fault, and the fault if any.
struct CsvTable {
  std::vector<CsvRow> rows;
  std::optional<CsvError> error;
};
CsvTable ParseCsv(std::string_view text, const CsvOptions& options);

// The rows of a whole text; throws InputError(error.Message(source)) at a fault.
std::vector<CsvRow> ParseCsvOrThrow(std::string_view text, const std::string& source,
                                    const CsvOptions& options);

// `text` without the spaces (space, \t, \n, \v, \f, \r) at either end.
std::string_view CsvTrimmed(std::string_view text);

// A field read as a number: the whole field as std::from_chars reads a double (decimal or
// scientific, "inf" and "nan"; no spaces, no '+' sign, no hexadecimal), whatever the locale.
struct CsvNumber {
  enum class Status {
    kOk,
    kNotANumber,  // empty, not the syntax above, something after the number, or a magnitude
                  // a double cannot hold (from_chars's result_out_of_range: 1e999, 1e-999)
    kNotFinite,   // inf or nan (value holds it)
  };
  Status status = Status::kNotANumber;
  double value = 0.0;

  bool ok() const { return status == Status::kOk; }
};
CsvNumber ParseCsvNumber(std::string_view text);

}  // namespace kareus
