// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kareus {

// Key order is kept as written, so output files read in the order their schema lists fields.
using Json = nlohmann::ordered_json;

// Deepest nesting of arrays and objects a parsed document may have. Kareus's own files nest
// at most 8 levels (a plan: object > stages > stage > instructions > instruction > partitions >
// partition, plus its free-form workload); the bound keeps every recursive walk of a parsed
// value (printing it in a message, comparing it) far from the stack's end.
inline constexpr int kMaxJsonDepth = 64;

// Pretty-printed JSON with a trailing newline.
std::string DumpJson(const Json& value);

// Writes JSON atomically (see WriteFileAtomic).
void WriteJsonFile(const std::filesystem::path& path, const Json& value);

// Parses JSON text. Throws InputError starting with `source` on a syntax error (line and
// column), text that is not UTF-8, nesting deeper than kMaxJsonDepth and numbers beyond the
// range of a double (1e400).
Json ParseJson(std::string_view text, const std::string& source);

// Parses a JSON file (ParseJson with the path as source).
Json ReadJsonFile(const std::filesystem::path& path);

}  // namespace kareus
