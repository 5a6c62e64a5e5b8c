// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kareus {

// The base of every error Kareus raises on purpose. The message is kept as UTF-8: bytes that
// are not (a damaged file's text that SQLite or a parser quotes) are written as \xNN, so a
// message can always be printed, logged or carried in JSON and Python strings.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message);
  explicit Error(const char* message) : Error(std::string(message)) {}
};

// Expected failure caused by the user's input (a workload file, a flag, a CSV row, a plan file).
// The message names the field, the value and the rule; the CLI turns it into exit code 2.
class InputError : public Error {
 public:
  using Error::Error;
};

// Expected failure of the environment (a file that cannot be written, NVML missing, a store
// that belongs to another workload). The CLI also exits 2: nothing was lost or half-written.
class EnvironmentError : public Error {
 public:
  using Error::Error;
};

// Builds "field: value: rule" messages without a chain of string concatenations.
// Throws InputError when it goes out of scope through Throw().
template <typename T>
std::string Describe(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points above
// U+10FFFF): what JSON output and Python strings accept.
bool IsValidUtf8(std::string_view text);

// A value as a message shows it: control characters and bytes that are not UTF-8 written as
// \xNN, and when longer than `max_bytes` cut there with its length appended
// ("aaaa... (102400 bytes)"), so a 100 KB value never floods a terminal or a log.
std::string ShownValue(std::string_view text, std::size_t max_bytes = 120);

// `text` with every byte that is not part of well-formed UTF-8 written as \xNN; everything
// else (newlines included) kept as it is.
std::string Utf8Escaped(std::string_view text);

// The Levenshtein distance of two byte strings (insertions, deletions, substitutions).
std::size_t EditDistance(std::string_view a, std::string_view b);
// The choice closest to `word` by EditDistance when it is a likely typo of it (at most 2 edits,
// or a third of the word's length when longer; ties: the first), else nullopt: for the "did you
// mean" of a misspelt flag or key.
std::optional<std::string> ClosestChoice(std::string_view word,
                                         const std::vector<std::string>& choices);

// Throws InputError "field = value: rule"; the value (and the field, which may hold a key the
// user wrote) go through ShownValue.
[[noreturn]] void ThrowInput(const std::string& field, const std::string& value,
                             const std::string& rule);

// What an Options struct's Validate() reports (as Ceres's Solver::Options::IsValid): the field
// (its name in the struct, dotted for nested structs: "profile.budget_fraction"), the value
// found and the rule it breaks. Callers map field names to their own vocabulary (the CLI to its
// flags) and raise an InputError.
struct OptionError {
  std::string field;
  std::string value;
  std::string rule;

  // Prefixes the field with the name of the struct that holds it ("profile" + "budget").
  OptionError Nested(const std::string& parent) const {
    return {parent + "." + field, value, rule};
  }
  // "field = value: rule"
  std::string Message() const { return field + " = " + value + ": " + rule; }
};

// Throws InputError for an invalid option; nothing for nullopt-like empty results.
template <typename OptionalError>
void ThrowIfInvalid(const OptionalError& error) {
  if (error) throw InputError(error->Message());
}

namespace internal {

// Collects the message of a failed KAREUS_CHECK and aborts when destroyed.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  template <typename T>
  CheckFailure& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

}  // namespace internal
}  // namespace kareus

// Invariant check for bugs: aborts with file, line, condition and message. Not for user input.
#define KAREUS_CHECK(condition) \
  if (condition) {              \
  } else                        \
    ::kareus::internal::CheckFailure(__FILE__, __LINE__, #condition)

#ifdef NDEBUG
#define KAREUS_DCHECK(condition) \
  if (true) {                    \
  } else                         \
    ::kareus::internal::CheckFailure(__FILE__, __LINE__, #condition)
#else
#define KAREUS_DCHECK(condition) KAREUS_CHECK(condition)
#endif
