// SPDX-License-Identifier: Apache-2.0
// Strict reading of YAML mappings: every read names its dotted field path, and a mapping with
// a key nobody asked for is an error (a typo must not be silently ignored). Also refused: a
// key given twice, a key that is a list or a mapping, a file of several documents, integers
// that are not plain decimals within 64 bits (010, 0x10, 1e3, 2^63), numbers that are not
// finite (.inf, .nan) and strings that are not UTF-8.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace kareus {

// "[+-]digits" without leading zeros, within int64; nullopt for anything else.
std::optional<int64_t> ParseDecimalInt(std::string_view text);

class YamlMap {
 public:
  // `source` names the file for messages; `path` is the dotted path of this mapping ("" = root).
  // Throws InputError when `node` is not a mapping, or has a non-scalar, non-UTF-8 or repeated key.
  YamlMap(YAML::Node node, std::string source, std::string path = "");

  // One document; InputError on a syntax error, an empty text or several documents.
  static YamlMap Parse(const std::string& text, const std::string& source);

  bool Has(const std::string& key) const;
  int64_t Int(const std::string& key) const;
  double Double(const std::string& key) const;
  std::string String(const std::string& key) const;
  bool Bool(const std::string& key) const;
  std::optional<int64_t> OptionalInt(const std::string& key) const;
  std::optional<std::string> OptionalString(const std::string& key) const;
  std::vector<int64_t> IntList(const std::string& key) const;
  YamlMap Map(const std::string& key) const;
  std::vector<YamlMap> MapList(const std::string& key) const;
  bool IsMap(const std::string& key) const;

  // Throws InputError naming the first key that was never read.
  void RejectUnknownKeys() const;

  std::string FieldName(const std::string& key) const;  // "source: path.key"
  [[noreturn]] void Fail(const std::string& key, const std::string& value,
                         const std::string& rule) const;

 private:
  YAML::Node Get(const std::string& key) const;

  YAML::Node node_;
  std::string source_;
  std::string path_;
  mutable std::set<std::string> read_;
};

}  // namespace kareus
