// SPDX-License-Identifier: Apache-2.0
#include "kareus/common/yaml.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include <yaml-cpp/eventhandler.h>

#include "kareus/common/error.h"
#include "kareus/common/io.h"

namespace kareus {
namespace {

// A scalar as the user wrote it, for messages.
std::string ScalarText(const YAML::Node& value) {
  if (value.IsScalar()) return value.Scalar();
  if (value.IsSequence()) return "(a list)";
  return value.IsMap() ? "(a mapping)" : "(empty)";
}

// Counts nothing: HandleNextDocument only needs somewhere to send the events.
class IgnoreEvents : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

YamlMap::YamlMap(YAML::Node node, std::string source, std::string path)
    : node_(std::move(node)), source_(std::move(source)), path_(std::move(path)) {
  const std::string where = source_ + ": " + (path_.empty() ? "document" : ShownValue(path_, 200));
  if (!node_.IsMap()) throw InputError(where + ": must be a mapping of key: value");
  // yaml-cpp keeps the first of two equal keys and lets any node be a key; a workload must say
  // each thing once, with a plain name.
  std::set<std::string> keys;
  for (const auto& entry : node_) {
    if (!entry.first.IsScalar()) {
      throw InputError(where + ": a key is " + ScalarText(entry.first) +
                       "; keys must be plain names");
    }
    const std::string& key = entry.first.Scalar();
    if (!IsValidUtf8(key)) {
      throw InputError(where + ": key '" + ShownValue(key) + "' is not UTF-8 text");
    }
    if (!keys.insert(key).second) {
      throw InputError(where + ": key '" + ShownValue(key) +
                       "' appears twice; each key may be given once");
    }
  }
}

YamlMap YamlMap::Parse(const std::string& text, const std::string& source) {
  // Not YAML::LoadAll: yaml-cpp 0.7's LoadAll never returns on a stray ',' (found by the
  // workload fuzzer, fuzz/regressions/workload/). The first document through YAML::Load, then
  // a parser asked for at most one more document.
  YAML::Node root;
  bool second_document = false;
  try {
    root = YAML::Load(text);
    std::istringstream in(text);
    YAML::Parser parser(in);
    IgnoreEvents ignore;
    second_document = parser.HandleNextDocument(ignore) && parser.HandleNextDocument(ignore);
  } catch (const YAML::Exception& e) {
    throw InputError(source + ": not valid YAML: " + ShownValue(e.what(), 300));
  }
  if (!root.IsDefined() || root.IsNull()) {
    throw InputError(source + ": document is empty; it must be a mapping of key: value");
  }
  if (second_document) {
    throw InputError(source +
                     ": holds more than one YAML document (separated by --- or ...); "
                     "it must hold exactly one");
  }
  return YamlMap(root, source);
}

std::string YamlMap::FieldName(const std::string& key) const {
  return source_ + ": " + ShownValue(path_.empty() ? key : path_ + "." + key, 200);
}

void YamlMap::Fail(const std::string& key, const std::string& value,
                   const std::string& rule) const {
  throw InputError(FieldName(key) + " = " + ShownValue(value) + ": " + rule);
}

std::optional<int64_t> ParseDecimalInt(std::string_view text) {
  std::string_view digits = text;
  if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) digits.remove_prefix(1);
  if (digits.empty() || digits.size() > 19) return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  if (digits.size() > 1 && digits.front() == '0') return std::nullopt;  // 010: octal in YAML 1.1
  int64_t value = 0;
  const char* begin = text.data() + (text.front() == '+' ? 1 : 0);
  const auto [end, ec] = std::from_chars(begin, text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

bool YamlMap::Has(const std::string& key) const {
  read_.insert(key);
  return static_cast<bool>(node_[key]) && !node_[key].IsNull();
}

YAML::Node YamlMap::Get(const std::string& key) const {
  read_.insert(key);
  YAML::Node value = node_[key];
  if (!value || value.IsNull()) {
    // A key the file has that nothing has read yet and that is at most two edits from the
    // missing one: the typo is the error, not the missing key. Only for keys of 5 or more
    // characters: a short one (tp, pp, dp) may be a valid key read later, one edit away.
    std::vector<std::string> unread;
    for (const auto& entry : node_) {
      const std::string& name = entry.first.Scalar();
      if (read_.count(name) == 0 && name.size() >= 5 && key.size() >= 5 &&
          EditDistance(name, key) <= 2) {
        unread.push_back(name);
      }
    }
    if (const auto typo = ClosestChoice(key, unread)) {
      throw InputError(FieldName(*typo) + ": unknown key; did you mean " + key + "? (" + key +
                       " is required)");
    }
    throw InputError(FieldName(key) + ": required field is missing");
  }
  return value;
}

int64_t YamlMap::Int(const std::string& key) const {
  const YAML::Node value = Get(key);
  const std::optional<int64_t> number =
      value.IsScalar() ? ParseDecimalInt(value.Scalar()) : std::nullopt;
  if (!number) {
    Fail(key, ScalarText(value),
         "must be a decimal integer within 64 bits (no leading zeros, no exponent)");
  }
  return *number;
}

double YamlMap::Double(const std::string& key) const {
  const YAML::Node value = Get(key);
  double number = 0.0;
  try {
    if (!value.IsScalar()) throw YAML::Exception(YAML::Mark(), "");
    number = value.as<double>();
  } catch (const YAML::Exception&) {
    Fail(key, ScalarText(value), "must be a number");
  }
  if (!std::isfinite(number)) Fail(key, ScalarText(value), "must be a finite number");
  return number;
}

bool YamlMap::Bool(const std::string& key) const {
  const YAML::Node value = Get(key);
  try {
    if (!value.IsScalar()) throw YAML::Exception(YAML::Mark(), "");
    return value.as<bool>();
  } catch (const YAML::Exception&) {
    Fail(key, ScalarText(value), "must be true or false");
  }
}

std::string YamlMap::String(const std::string& key) const {
  const YAML::Node value = Get(key);
  if (!value.IsScalar()) Fail(key, ScalarText(value), "must be a string");
  if (!IsValidUtf8(value.Scalar())) Fail(key, value.Scalar(), "must be UTF-8 text");
  return value.Scalar();
}

std::optional<int64_t> YamlMap::OptionalInt(const std::string& key) const {
  if (!Has(key)) return std::nullopt;
  return Int(key);
}

std::optional<std::string> YamlMap::OptionalString(const std::string& key) const {
  if (!Has(key)) return std::nullopt;
  return String(key);
}

std::vector<int64_t> YamlMap::IntList(const std::string& key) const {
  const YAML::Node value = Get(key);
  if (!value.IsSequence()) Fail(key, "(not a list)", "must be a list of integers");
  std::vector<int64_t> out;
  for (const auto& item : value) {
    const std::optional<int64_t> number =
        item.IsScalar() ? ParseDecimalInt(item.Scalar()) : std::nullopt;
    if (!number) {
      Fail(key, ScalarText(item), "every entry must be a decimal integer within 64 bits");
    }
    out.push_back(*number);
  }
  return out;
}

bool YamlMap::IsMap(const std::string& key) const {
  read_.insert(key);
  return static_cast<bool>(node_[key]) && node_[key].IsMap();
}

YamlMap YamlMap::Map(const std::string& key) const {
  const YAML::Node value = Get(key);
  if (!value.IsMap()) Fail(key, "(not a mapping)", "must be a mapping of key: value");
  return YamlMap(value, source_, path_.empty() ? key : path_ + "." + key);
}

std::vector<YamlMap> YamlMap::MapList(const std::string& key) const {
  const YAML::Node value = Get(key);
  if (!value.IsSequence()) Fail(key, "(not a list)", "must be a list");
  std::vector<YamlMap> out;
  int index = 0;
  for (const auto& item : value) {
    const std::string path =
        (path_.empty() ? key : path_ + "." + key) + "[" + std::to_string(index++) + "]";
    out.emplace_back(item, source_, path);
  }
  return out;
}

void YamlMap::RejectUnknownKeys() const {
  for (const auto& entry : node_) {
    const std::string& key = entry.first.Scalar();  // the constructor checked: scalar keys
    if (read_.count(key) == 0) {
      const std::vector<std::string> known(read_.begin(), read_.end());
      const auto closest = ClosestChoice(key, known);
      throw InputError(FieldName(key) + ": unknown key" +
                       (closest ? "; did you mean " + *closest + "?" : "") +
                       " (known keys here: " + JoinNames(known) + ")");
    }
  }
}

}  // namespace kareus
