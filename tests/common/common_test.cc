// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <filesystem>

#include "kareus/common/context.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/json.h"
#include "kareus/common/table.h"

namespace kareus {
namespace {

TEST(WriteFileAtomic, ReplacesWholeFileAndLeavesNoTemporaries) {
  const auto dir = std::filesystem::temp_directory_path() / "kareus_common_test";
  std::filesystem::remove_all(dir);
  const auto path = dir / "sub" / "file.json";
  WriteFileAtomic(path, "first");
  WriteFileAtomic(path, "second");
  EXPECT_EQ(ReadTextFile(path), "second");
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(path.parent_path())) {
    ++entries;
  }
  EXPECT_EQ(entries, 1);
  std::filesystem::remove_all(dir);
}

TEST(ReadTextFile, MissingFileIsInputError) {
  EXPECT_THROW(ReadTextFile("/nonexistent/kareus/file"), InputError);
}

TEST(ReadJsonFile, SyntaxErrorNamesThePath) {
  const auto path = std::filesystem::temp_directory_path() / "kareus_bad.json";
  WriteFileAtomic(path, "{\"a\": ");
  try {
    ReadJsonFile(path);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("kareus_bad.json"), std::string::npos);
  }
  std::filesystem::remove(path);
}

TEST(DeriveSeed, StreamsAreStableAndDistinct) {
  EXPECT_EQ(DeriveSeed(7, 1), DeriveSeed(7, 1));
  EXPECT_NE(DeriveSeed(7, 1), DeriveSeed(7, 2));
  EXPECT_NE(DeriveSeed(7, 1), DeriveSeed(8, 1));
  EXPECT_EQ(HashString("fwd_attn"), HashString("fwd_attn"));
}

TEST(Table, AlignsColumns) {
  Table table({"name", "value"});
  table.AddRow({"a", "1.5"});
  table.AddRow({"longer", "12.25"});
  const std::string text = table.ToString();
  EXPECT_NE(text.find("longer  12.25"), std::string::npos) << text;
  EXPECT_NE(text.find("a         1.5"), std::string::npos) << text;
}

TEST(DataDir, FindsPresets) { EXPECT_TRUE(std::filesystem::exists(DataDir() / "gpus")); }

}  // namespace
}  // namespace kareus
