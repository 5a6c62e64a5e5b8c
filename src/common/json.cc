// SPDX-License-Identifier: Apache-2.0
#include "kareus/common/json.h"

#include "kareus/common/error.h"
#include "kareus/common/io.h"

namespace kareus {

std::string DumpJson(const Json& value) { return value.dump(2) + "\n"; }

void WriteJsonFile(const std::filesystem::path& path, const Json& value) {
  WriteFileAtomic(path, DumpJson(value));
}

Json ReadJsonFile(const std::filesystem::path& path) {
  const std::string text = ReadTextFile(path);
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw InputError(path.string() + ": not valid JSON: " + e.what());
  }
}

}  // namespace kareus
