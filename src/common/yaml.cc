// SPDX-License-Identifier: Apache-2.0
#include "kareus/common/yaml.h"

#include "kareus/common/error.h"
#include "kareus/common/io.h"

namespace kareus {

YamlMap::YamlMap(YAML::Node node, std::string source, std::string path)
    : node_(std::move(node)), source_(std::move(source)), path_(std::move(path)) {
  if (!node_.IsMap()) {
    throw InputError(source_ + ": " + (path_.empty() ? "document" : path_) +
                     ": must be a mapping of key: value");
  }
}

YamlMap YamlMap::Parse(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw InputError(source + ": not valid YAML: " + e.what());
  }
  return YamlMap(root, source);
}

std::string YamlMap::FieldName(const std::string& key) const {
  return source_ + ": " + (path_.empty() ? key : path_ + "." + key);
}

void YamlMap::Fail(const std::string& key, const std::string& value,
                   const std::string& rule) const {
  throw InputError(FieldName(key) + " = " + value + ": " + rule);
}

bool YamlMap::Has(const std::string& key) const {
  read_.insert(key);
  return static_cast<bool>(node_[key]) && !node_[key].IsNull();
}

YAML::Node YamlMap::Get(const std::string& key) const {
  read_.insert(key);
  YAML::Node value = node_[key];
  if (!value || value.IsNull()) throw InputError(FieldName(key) + ": required field is missing");
  return value;
}

int64_t YamlMap::Int(const std::string& key) const {
  const YAML::Node value = Get(key);
  try {
    if (!value.IsScalar()) throw YAML::Exception(YAML::Mark(), "");
    return value.as<int64_t>();
  } catch (const YAML::Exception&) {
    Fail(key, value.IsScalar() ? value.Scalar() : "(not a scalar)", "must be an integer");
  }
}

double YamlMap::Double(const std::string& key) const {
  const YAML::Node value = Get(key);
  try {
    if (!value.IsScalar()) throw YAML::Exception(YAML::Mark(), "");
    return value.as<double>();
  } catch (const YAML::Exception&) {
    Fail(key, value.IsScalar() ? value.Scalar() : "(not a scalar)", "must be a number");
  }
}

bool YamlMap::Bool(const std::string& key) const {
  const YAML::Node value = Get(key);
  try {
    if (!value.IsScalar()) throw YAML::Exception(YAML::Mark(), "");
    return value.as<bool>();
  } catch (const YAML::Exception&) {
    Fail(key, value.IsScalar() ? value.Scalar() : "(not a scalar)", "must be true or false");
  }
}

std::string YamlMap::String(const std::string& key) const {
  const YAML::Node value = Get(key);
  if (!value.IsScalar()) Fail(key, "(not a scalar)", "must be a string");
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
    try {
      out.push_back(item.as<int64_t>());
    } catch (const YAML::Exception&) {
      Fail(key, item.IsScalar() ? item.Scalar() : "(not a scalar)",
           "every entry must be an integer");
    }
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
    const std::string key = entry.first.as<std::string>();
    if (read_.count(key) == 0) {
      throw InputError(FieldName(key) + ": unknown key (known keys here: " +
                       JoinNames({read_.begin(), read_.end()}) + ")");
    }
  }
}

}  // namespace kareus
