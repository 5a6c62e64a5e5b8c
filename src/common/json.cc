// SPDX-License-Identifier: Apache-2.0
#include "kareus/common/json.h"

#include "kareus/common/error.h"
#include "kareus/common/io.h"

namespace kareus {
namespace {

struct TooDeep {};

}  // namespace

std::string DumpJson(const Json& value) { return value.dump(2) + "\n"; }

void WriteJsonFile(const std::filesystem::path& path, const Json& value) {
  WriteFileAtomic(path, DumpJson(value));
}

Json ParseJson(std::string_view text, const std::string& source) {
  // nlohmann's parser is iterative; the callback sees the depth of every value as it starts,
  // so a document nested 100,000 levels deep is refused after kMaxJsonDepth levels.
  const Json::parser_callback_t limit = [](int depth, Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth) {
      throw TooDeep{};
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), limit);
  } catch (const TooDeep&) {
    throw InputError(ShownValue(source, 400) + ": nested deeper than " +
                     std::to_string(kMaxJsonDepth) + " levels of arrays and objects");
  } catch (const Json::parse_error& e) {
    throw InputError(ShownValue(source, 400) + ": not valid JSON: " + ShownValue(e.what(), 300));
  } catch (const Json::exception& e) {  // e.g. out_of_range 406: a number beyond a double
    throw InputError(ShownValue(source, 400) + ": not valid JSON: " + ShownValue(e.what(), 300));
  }
}

Json ReadJsonFile(const std::filesystem::path& path) {
  return ParseJson(ReadTextFile(path), path.string());
}

}  // namespace kareus
