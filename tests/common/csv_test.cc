// SPDX-License-Identifier: Apache-2.0
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kareus/common/csv.h"
#include "kareus/common/error.h"

namespace kareus {
namespace {

using Fields = std::vector<std::vector<std::string>>;

const std::string kBom = "\xEF\xBB\xBF";  // a UTF-8 byte order mark

Fields FieldsOf(const std::vector<CsvRow>& rows) {
  Fields out;
  for (const CsvRow& row : rows) out.push_back(row.fields);
  return out;
}

Fields Parse(std::string_view text, const CsvOptions& options = {}) {
  return FieldsOf(ParseCsvOrThrow(text, "t.csv", options));
}

TEST(Csv, SplitsOnCommasAndKeepsEmptyFields) {
  EXPECT_EQ(Parse("a,b,c\n1,,3\n,\nx,\n"),
            (Fields{{"a", "b", "c"}, {"1", "", "3"}, {"", ""}, {"x", ""}}));
  EXPECT_EQ(Parse(""), Fields{});
  EXPECT_EQ(Parse("\n\n"), Fields{});
  EXPECT_EQ(Parse("only"), (Fields{{"only"}}));  // no line end after the last line
}

TEST(Csv, RowsKeepTheirLineNumbersAndRawText) {
  const std::vector<CsvRow> rows = ParseCsvOrThrow("a,b\n\n  1 , 2 \r\n\r\n3,4", "t.csv", {});
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].line, 1u);
  EXPECT_EQ(rows[1].line, 3u);
  EXPECT_EQ(rows[1].raw, "  1 , 2 ");                                    // without the \r\n
  EXPECT_EQ(rows[1].fields, (std::vector<std::string>{"  1 ", " 2 "}));  // untrimmed
  EXPECT_EQ(rows[2].line, 5u);
}

TEST(Csv, CrLfLineEndsAreNotPartOfTheLastField) {
  EXPECT_EQ(Parse("a,b\r\n1,2\r\n3,4\r"), (Fields{{"a", "b"}, {"1", "2"}, {"3", "4"}}));
  EXPECT_EQ(Parse("\"a\",\"b\"\r\n", {.quotes = true}), (Fields{{"a", "b"}}));
  // Only one \r belongs to the line end; a lone \r inside a line is a character.
  EXPECT_EQ(Parse("a\r\r\nb\rc\n"), (Fields{{"a\r"}, {"b\rc"}}));
}

TEST(Csv, ByteOrderMarkIsSkippedOnlyWhenAllowed) {
  const std::string text = kBom + "time,v\n1,2\n";
  EXPECT_EQ(Parse(text, {.allow_bom = true}), (Fields{{"time", "v"}, {"1", "2"}}));
  EXPECT_EQ(Parse(text)[0][0], kBom + "time");
  // Only at the start of the text.
  EXPECT_EQ(Parse("a\n" + kBom + "b\n", {.allow_bom = true})[1][0], kBom + "b");
  EXPECT_EQ(ParseCsvOrThrow(text, "t.csv", {.allow_bom = true})[1].line, 2u);
}

TEST(Csv, CommentLinesAreSkippedOnlyWhenAllowed) {
  const std::string text = "# from somewhere\n  # indented note\na,b\n1,#2\n";
  EXPECT_EQ(Parse(text, {.allow_comments = true}), (Fields{{"a", "b"}, {"1", "#2"}}));
  EXPECT_EQ(Parse(text).size(), 4u);
  EXPECT_EQ(ParseCsvOrThrow(text, "t.csv", {.allow_comments = true})[0].line, 3u);
}

TEST(Csv, TrimmingDropsSpacesAroundFieldsAndLinesOfSpaces) {
  const std::string text = " a ,\tb\t\n   \n\t\n 1 , 2 \v\n";
  EXPECT_EQ(Parse(text, {.trim = true}), (Fields{{"a", "b"}, {"1", "2"}}));
  // Without trim a line of spaces is a row.
  EXPECT_EQ(Parse(text), (Fields{{" a ", "\tb\t"}, {"   "}, {"\t"}, {" 1 ", " 2 \v"}}));
  EXPECT_EQ(CsvTrimmed(" \t\r\n\v\fx y\f\v\n\r\t "), "x y");
  EXPECT_EQ(CsvTrimmed(" \t "), "");
}

TEST(Csv, QuotedFieldsHoldCommasAndDoubledQuotes) {
  const CsvOptions options{.trim = true, .quotes = true};
  EXPECT_EQ(Parse("\"a,b\",\"say \"\"hi\"\"\",\"\",plain\n", options),
            (Fields{{"a,b", "say \"hi\"", "", "plain"}}));
  // A quote may follow spaces; the quoted text is kept as written, spaces included.
  EXPECT_EQ(Parse("  \" x \" ,y\n", options), (Fields{{" x  ", "y"}}));
  // A '"' inside an unquoted field is a character.
  EXPECT_EQ(Parse("ab\"c,d\n", options), (Fields{{"ab\"c", "d"}}));
  // Without quotes, '"' is a character everywhere.
  EXPECT_EQ(Parse("\"a,b\"\n", {.trim = true}), (Fields{{"\"a", "b\""}}));
  // A quoted section may open a line of its own; the row is not empty.
  EXPECT_EQ(Parse("\"\"\n", options), (Fields{{""}}));
}

TEST(Csv, UnclosedQuoteNamesTheLine) {
  const CsvTable table = ParseCsv("time,v\n\"2026-03-02,1\nnext,2\n", {.quotes = true});
  ASSERT_TRUE(table.error.has_value());
  EXPECT_EQ(table.error->kind, CsvError::Kind::kUnclosedQuote);
  EXPECT_EQ(table.error->line, 2u);
  EXPECT_EQ(table.error->raw, "\"2026-03-02,1");
  ASSERT_EQ(table.rows.size(), 1u);  // the rows before it
  EXPECT_EQ(table.error->Message("s.csv"), "s.csv:2: a quoted field is not closed on its line");
  EXPECT_THROW(ParseCsvOrThrow("\"a\"\"\n", "s.csv", {.quotes = true}), InputError);
}

TEST(Csv, FixedFieldCountNamesTheLineAndStopsThere) {
  const CsvOptions options{.fixed_field_count = true};
  const std::string text = "a,b,c\n1,2,3\n\n4,5\n6,7,8\n";
  const CsvTable table = ParseCsv(text, options);
  ASSERT_TRUE(table.error.has_value());
  EXPECT_EQ(table.error->kind, CsvError::Kind::kFieldCount);
  EXPECT_EQ(table.error->line, 4u);
  EXPECT_EQ(table.error->raw, "4,5");
  EXPECT_EQ(table.error->fields, 2u);
  EXPECT_EQ(table.error->expected, 3u);
  EXPECT_EQ(table.rows.size(), 2u);
  try {
    ParseCsvOrThrow(text, "m.csv", options);
    ADD_FAILURE() << "a short row was accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "m.csv:4: 2 fields, the header has 3");
  }
  // Without the option rows may differ.
  EXPECT_EQ(Parse(text).size(), 4u);
}

TEST(Csv, StreamingReaderStopsAtTheFault) {
  CsvReader reader("a,b\n1,2\n3\n4,5\n", {.fixed_field_count = true});
  CsvRow row;
  ASSERT_TRUE(reader.Next(&row));
  ASSERT_TRUE(reader.Next(&row));
  EXPECT_EQ(row.fields, (std::vector<std::string>{"1", "2"}));
  EXPECT_FALSE(reader.error().has_value());
  EXPECT_FALSE(reader.Next(&row));
  ASSERT_TRUE(reader.error().has_value());
  EXPECT_EQ(reader.error()->line, 3u);
  EXPECT_FALSE(reader.Next(&row));  // nothing after a fault
}

TEST(Csv, Utf8IsCheckedBeforeAnyRowWhenRequired) {
  const std::string text = "a,b\n1,2\n3,caf\xE9\n4,5\n";
  CsvReader reader(text, {.require_utf8 = true});
  CsvRow row;
  EXPECT_FALSE(reader.Next(&row));  // not even the header
  ASSERT_TRUE(reader.error().has_value());
  EXPECT_EQ(reader.error()->kind, CsvError::Kind::kNotUtf8);
  EXPECT_EQ(reader.error()->line, 3u);
  EXPECT_EQ(reader.error()->Message("p.csv"), "p.csv:3: bytes that are not UTF-8");
  EXPECT_THROW(ParseCsvOrThrow("\xC0\xAF\n", "p.csv", {.require_utf8 = true}), InputError);
  // Well-formed UTF-8 (and a byte order mark) passes; without the option, any bytes do.
  EXPECT_EQ(Parse(kBom + "k,caf\xC3\xA9\n", {.allow_bom = true, .require_utf8 = true}),
            (Fields{{"k", "caf\xC3\xA9"}}));
  EXPECT_EQ(Parse(text).size(), 4u);
}

TEST(Csv, NumbersTellGarbageFromNonFinite) {
  using Status = CsvNumber::Status;
  EXPECT_TRUE(ParseCsvNumber("1410").ok());
  EXPECT_EQ(ParseCsvNumber("1410").value, 1410.0);
  EXPECT_EQ(ParseCsvNumber("-0.5").value, -0.5);
  EXPECT_EQ(ParseCsvNumber("2.5e-3").value, 2.5e-3);
  EXPECT_EQ(ParseCsvNumber(".5").value, 0.5);
  EXPECT_EQ(ParseCsvNumber("0.05016166687011708").value, 0.05016166687011708);
  for (const char* text : {"nan", "NaN", "-nan", "inf", "-inf", "Infinity"}) {
    EXPECT_EQ(ParseCsvNumber(text).status, Status::kNotFinite) << text;
  }
  EXPECT_TRUE(std::isinf(ParseCsvNumber("-inf").value));
  for (const std::string text :
       {"", " ", "abc", "1x", "1 ", " 1", "+1", "0x10", "1,5", "--1", "1e", "1e999", "1e-999"}) {
    EXPECT_EQ(ParseCsvNumber(text).status, Status::kNotANumber) << text;
  }
  EXPECT_EQ(ParseCsvNumber(kBom + "1").status, Status::kNotANumber);
  EXPECT_EQ(ParseCsvNumber(std::string_view("1\0", 2)).status, Status::kNotANumber);
}

}  // namespace
}  // namespace kareus
