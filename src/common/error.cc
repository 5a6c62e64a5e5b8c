// SPDX-License-Identifier: Apache-2.0
#include "kareus/common/error.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace kareus {
namespace {

// Length of the UTF-8 sequence starting at text[i], or 0 when it is not well formed
// (RFC 3629 table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF).
std::size_t Utf8SequenceLength(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    length = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    length = 3;
    if (c == 0xE0) low = 0xA0;
    if (c == 0xED) high = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    length = 4;
    if (c == 0xF0) low = 0x90;
    if (c == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  if (byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (std::size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return length;
}

// `text` up to `max_bytes` (never cutting a character in half), with bytes that are not UTF-8
// and, with `controls`, control characters written as \xNN.
std::string Escaped(std::string_view text, std::size_t max_bytes, bool controls) {
  std::string out;
  const std::size_t shown = std::min(text.size(), max_bytes);
  for (std::size_t i = 0; i < shown;) {
    const std::size_t length = Utf8SequenceLength(text, i);
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (length > 1 && i + length > shown) break;
    if (length == 0 || (controls && length == 1 && (c < 0x20 || c == 0x7F))) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02X", c);
      out += escaped;
      ++i;
      continue;
    }
    out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = Utf8SequenceLength(text, i);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

std::size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<std::string> ClosestChoice(std::string_view word,
                                         const std::vector<std::string>& choices) {
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const std::string& choice : choices) {
    const std::size_t d = EditDistance(word, choice);
    if (d < best_distance) {
      best_distance = d;
      best = choice;
    }
  }
  return best;
}

std::string ShownValue(std::string_view text, std::size_t max_bytes) {
  std::string out = Escaped(text, max_bytes, /*controls=*/true);
  if (max_bytes < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

std::string Utf8Escaped(std::string_view text) {
  return Escaped(text, text.size(), /*controls=*/false);
}

Error::Error(const std::string& message)
    : std::runtime_error(IsValidUtf8(message) ? message : Utf8Escaped(message)) {}

void ThrowInput(const std::string& field, const std::string& value, const std::string& rule) {
  throw InputError(ShownValue(field, 400) + " = " + ShownValue(value) + ": " + rule);
}

}  // namespace kareus

namespace kareus::internal {

CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  stream_ << file << ":" << line << ": check failed: " << condition << " ";
}

CheckFailure::~CheckFailure() {
  std::fprintf(stderr, "%s\n", stream_.str().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace kareus::internal
