// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace kareus {

// Key order is kept as written, so output files read in the order their schema lists fields.
using Json = nlohmann::ordered_json;

// Pretty-printed JSON with a trailing newline.
std::string DumpJson(const Json& value);

// Writes JSON atomically (see WriteFileAtomic).
void WriteJsonFile(const std::filesystem::path& path, const Json& value);

// Parses a JSON file; throws InputError naming the path, line and column on a syntax error.
Json ReadJsonFile(const std::filesystem::path& path);

}  // namespace kareus
