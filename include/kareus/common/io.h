// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kareus {

// Reads a whole file; throws InputError naming the path when it cannot be read.
std::string ReadTextFile(const std::filesystem::path& path);

// Writes `contents` to a temporary file beside `path`, flushes it to disk and renames it over
// `path`, so a reader (or a killed run) sees either the old file or the new one, never half.
// Creates missing parent directories. Throws EnvironmentError on failure.
void WriteFileAtomic(const std::filesystem::path& path, std::string_view contents);

// The folder holding GPU and model presets: $KAREUS_DATA_DIR, else the source tree's data/
// recorded at build time, else <prefix>/share/kareus/data next to the executable.
std::filesystem::path DataDir();

// The presets of one kind: the stems of DataDir()/<folder>/*.yaml, sorted.
std::vector<std::string> PresetNames(const std::string& folder);

// "a, b, c": names for an error message listing the valid choices.
std::string JoinNames(const std::vector<std::string>& names);

}  // namespace kareus
