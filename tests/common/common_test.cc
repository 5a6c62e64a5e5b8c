// SPDX-License-Identifier: Apache-2.0
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include "kareus/common/context.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "kareus/common/json.h"
#include "kareus/common/table.h"
#include "kareus/common/yaml.h"

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

TEST(DeriveSeed, StreamsArePinnedAndDistinct) {
  // SplitMix64's published first output from state 0 (tag 0 adds one golden-ratio step), and
  // a value pinned when the seeds were first derived: profiles and plans depend on these.
  EXPECT_EQ(DeriveSeed(0, 0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(DeriveSeed(7, 1), 0x044c3cd7f43c661cULL);
  EXPECT_NE(DeriveSeed(7, 1), DeriveSeed(7, 2));
  EXPECT_NE(DeriveSeed(7, 1), DeriveSeed(8, 1));
}

TEST(HashString, IsFnv1a64) {
  // FNV-1a's offset basis and its published test vector for "a".
  EXPECT_EQ(HashString(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(HashString("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(HashString("fwd_attn"), 0xdb30ce78f819480cULL);
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

using ::testing::HasSubstr;
using ::testing::Not;

// The message of the InputError that `body` throws ("" when it throws none).
template <typename Body>
std::string InputErrorOf(Body body) {
  try {
    body();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ShownValue, CutsLongValuesEscapesBytesAndKeepsCharactersWhole) {
  const std::string long_value(100 * 1024, 'a');
  const std::string shown = ShownValue(long_value);
  EXPECT_LT(shown.size(), 200u);
  EXPECT_THAT(shown, HasSubstr("(102400 bytes)"));
  EXPECT_EQ(ShownValue("ok \xC3\xA9"), "ok \xC3\xA9");  // é stays
  EXPECT_EQ(ShownValue(std::string("a\nb\xFF", 4)), "a\\x0Ab\\xFF");
  EXPECT_EQ(ShownValue("\xC3\xA9\xC3\xA9", 3), "\xC3\xA9... (4 bytes)");  // never half a character
  EXPECT_TRUE(IsValidUtf8(ShownValue(std::string("\xC0\x80\xED\xA0\x80\xF5\x80", 7))));
}

TEST(IsValidUtf8, FollowsRfc3629) {
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xE2\x82\xAC \xF0\x9F\x98\x80"));  // euro sign, emoji
  EXPECT_FALSE(IsValidUtf8("\xC0\x80"));                      // overlong NUL
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));                  // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));              // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xE2\x82"));                      // truncated
  EXPECT_FALSE(IsValidUtf8("\xFF"));
}

TEST(ThrowInput, NeverEchoesAHugeValue) {
  const std::string message =
      InputErrorOf([] { ThrowInput("field", std::string(100 * 1024, 'x'), "rule"); });
  EXPECT_LT(message.size(), 300u);
  EXPECT_THAT(message, HasSubstr("field = xxx"));
  EXPECT_THAT(message, HasSubstr(": rule"));
}

TEST(ParseJson, RefusesDeepNestingHugeNumbersAndBadText) {
  EXPECT_THAT(InputErrorOf([] { ParseJson(std::string(100000, '['), "deep.json"); }),
              HasSubstr("deep.json: nested deeper than 64 levels"));
  std::string ok;
  for (int i = 0; i < kMaxJsonDepth; ++i) ok += "[";
  for (int i = 0; i < kMaxJsonDepth; ++i) ok += "]";
  EXPECT_NO_THROW(ParseJson(ok, "ok.json"));
  EXPECT_THAT(InputErrorOf([&] { ParseJson("[" + ok + "]", "one.json"); }),
              HasSubstr("nested deeper"));
  EXPECT_THAT(InputErrorOf([] { ParseJson("{\"a\": 1e400}", "big.json"); }),
              HasSubstr("big.json: not valid JSON"));
  EXPECT_THAT(InputErrorOf([] { ParseJson("{\"a\": \"\xFF\"}", "bytes.json"); }),
              HasSubstr("bytes.json: not valid JSON"));
  const std::string unterminated = "{\"a\": \"" + std::string(100 * 1024, 'z');
  const std::string message = InputErrorOf([&] { ParseJson(unterminated, "long.json"); });
  EXPECT_THAT(message, HasSubstr("long.json: not valid JSON"));
  EXPECT_LT(message.size(), 1000u);
}

TEST(YamlMap, RefusesWhatYamlCppWouldSilentlyAccept) {
  const auto error = [](const std::string& text) {
    return InputErrorOf([&] {
      const YamlMap map = YamlMap::Parse(text, "w.yaml");
      if (map.Has("a")) (void)map.Int("a");
      if (map.Has("d")) (void)map.Double("d");
      if (map.Has("s")) (void)map.String("s");
      if (map.Has("l")) (void)map.IntList("l");
    });
  };
  EXPECT_THAT(error("a: 1\na: 2\n"), HasSubstr("key 'a' appears twice"));
  EXPECT_THAT(error("a: 1\n---\na: 2\n"), HasSubstr("more than one YAML document"));
  EXPECT_THAT(error("[1, 2]: 3\n"), HasSubstr("keys must be plain names"));
  // yaml-cpp's LoadAll never returned on these (the workload fuzzer's first find).
  EXPECT_THAT(error(","), HasSubstr("document is empty"));
  EXPECT_THAT(error("a: 1\n---\n,"), HasSubstr("more than one YAML document"));
  EXPECT_THAT(error("a: 1\n...\nb: 2\n"), HasSubstr("more than one YAML document"));
  EXPECT_THAT(error(""), HasSubstr("document is empty"));
  EXPECT_THAT(error("# only a comment\n"), HasSubstr("document is empty"));
  EXPECT_THAT(error("a: '010'\n"), HasSubstr("w.yaml: a = 010: must be a decimal integer"));
  EXPECT_THAT(error("a: 0x10\n"), HasSubstr("must be a decimal integer"));
  EXPECT_THAT(error("a: 1e3\n"), HasSubstr("must be a decimal integer"));
  EXPECT_THAT(error("a: 9223372036854775808\n"), HasSubstr("within 64 bits"));
  EXPECT_THAT(error("a: [1]\n"), HasSubstr("a = (a list)"));
  EXPECT_THAT(error("d: .inf\n"), HasSubstr("must be a finite number"));
  EXPECT_THAT(error("d: .nan\n"), HasSubstr("must be a finite number"));
  EXPECT_THAT(error("s: a\xFF"
                    "b\n"),
              HasSubstr("must be UTF-8 text"));
  EXPECT_THAT(error("l: [1, 010]\n"), HasSubstr("every entry must be a decimal integer"));
  EXPECT_EQ(error("a: -12\nd: 2.5\ns: text\nl: [0, +3]\n"), "");
  const YamlMap map = YamlMap::Parse("a: +7\n", "w.yaml");
  EXPECT_EQ(map.Int("a"), 7);
  // A 100 KB unknown key or value is shown cut.
  EXPECT_LT(error("a: " + std::string(100 * 1024, '9') + "\n").size(), 600u);
}

TEST(ReadTextFile, RefusesAFolder) {
  EXPECT_THAT(InputErrorOf([] { ReadTextFile(std::filesystem::temp_directory_path()); }),
              HasSubstr("is a folder"));
}

TEST(ValidatePathComponent, AcceptsPlainNamesOnly) {
  for (const char* good : {"01-llama3.2-3b-tp8", "qwen3 1.7b", "caf\xC3\xA9", "a"}) {
    EXPECT_EQ(InputErrorOf([&] { ValidatePathComponent("name", good); }), "") << good;
  }
  for (const std::string& bad :
       {std::string(""), std::string("."), std::string(".."), std::string("../../x"),
        std::string("/abs"), std::string("a/b"), std::string(".hidden"), std::string("-rf"),
        std::string("a\nb"), std::string("\xFF"), std::string(200, 'n'), std::string("a\\b")}) {
    EXPECT_THAT(InputErrorOf([&] { ValidatePathComponent("name", bad); }), HasSubstr("name = "))
        << bad;
  }
}

class OutputFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("kareus_output_folder_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
    out_ = root_ / "out";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::vector<std::string> Entries(const std::filesystem::path& dir) const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  std::filesystem::path root_;
  std::filesystem::path out_;
};

TEST_F(OutputFolderTest, EachCommitLeavesExactlyOneRunsOutputs) {
  {
    OutputFolder folder(out_);
    WriteFileAtomic(folder.staging() / "plans" / "plan_00001.json", "one");
    WriteFileAtomic(folder.staging() / "plans" / "plan_00002.json", "two");
    EXPECT_FALSE(std::filesystem::exists(out_)) << "nothing is visible before the commit";
    folder.Commit();
  }
  EXPECT_EQ(Entries(out_ / "plans"),
            (std::vector<std::string>{"plan_00001.json", "plan_00002.json"}));
  {
    OutputFolder folder(out_);
    WriteFileAtomic(folder.staging() / "plans" / "plan_00007.json", "seven");
    folder.Commit();
  }
  EXPECT_EQ(Entries(out_ / "plans"), std::vector<std::string>{"plan_00007.json"});
  EXPECT_EQ(Entries(out_), (std::vector<std::string>{".kareus-output", "plans"}));
  EXPECT_EQ(Entries(root_), std::vector<std::string>{"out"})
      << "no staging or previous folder left";
}

TEST_F(OutputFolderTest, AFailedRunLeavesThePreviousOutputsAndNoStaging) {
  {
    OutputFolder folder(out_);
    WriteFileAtomic(folder.staging() / "plan.json", "old");
    folder.Commit();
  }
  {
    OutputFolder folder(out_);
    WriteFileAtomic(folder.staging() / "plan.json", "new");
    // no Commit: an exception unwinds through here
  }
  EXPECT_EQ(ReadTextFile(out_ / "plan.json"), "old");
  EXPECT_EQ(Entries(root_), std::vector<std::string>{"out"});
}

TEST_F(OutputFolderTest, KeepsTheMeasurementStoreByHardLink) {
  std::filesystem::create_directories(out_);
  WriteFileAtomic(out_ / "measurements.sqlite", "store");
  WriteFileAtomic(out_ / "measurements.sqlite-wal", "wal");
  WriteFileAtomic(out_ / "summary.json", "{}");
  struct stat before {};
  ASSERT_EQ(stat((out_ / "measurements.sqlite").c_str(), &before), 0);
  OutputFolder folder(out_);
  folder.Keep(out_ / "measurements.sqlite");
  folder.Keep(root_ / "elsewhere.sqlite");  // not inside: ignored
  WriteFileAtomic(folder.staging() / "plan.json", "new");
  folder.Commit();
  EXPECT_EQ(Entries(out_), (std::vector<std::string>{".kareus-output", "measurements.sqlite",
                                                     "measurements.sqlite-wal", "plan.json"}));
  struct stat after {};
  ASSERT_EQ(stat((out_ / "measurements.sqlite").c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino) << "the store is the same file, never copied";
}

TEST_F(OutputFolderTest, RefusesFoldersKareusDidNotWrite) {
  std::filesystem::create_directories(out_);
  WriteFileAtomic(out_ / "thesis.tex", "years of work");
  EXPECT_THAT(InputErrorOf([&] { OutputFolder folder(out_); }), HasSubstr("'thesis.tex'"));
  EXPECT_EQ(Entries(out_), std::vector<std::string>{"thesis.tex"});
  WriteFileAtomic(root_ / "file", "x");
  EXPECT_THAT(InputErrorOf([&] { OutputFolder folder(root_ / "file"); }),
              HasSubstr("not a folder"));
  EXPECT_THAT(InputErrorOf([] { OutputFolder folder(""); }), HasSubstr("out = \"\""));
  EXPECT_THAT(InputErrorOf([] { OutputFolder folder("/"); }), HasSubstr("below /"));
  EXPECT_THAT(InputErrorOf([] { OutputFolder folder("."); }), HasSubstr("current folder"));
  EXPECT_THAT(InputErrorOf([] { OutputFolder folder(".."); }), HasSubstr("current folder"));
  // Written by an earlier version (no marker): only Kareus's names, a workload folder.
  const auto legacy = root_ / "legacy";
  WriteFileAtomic(legacy / "evaluation.json", "{}");
  WriteFileAtomic(legacy / "w1" / "summary.json", "{}");
  WriteFileAtomic(legacy / "w1" / "plans" / "plan_00001.json", "{}");
  EXPECT_EQ(InputErrorOf([&] { OutputFolder folder(legacy); }), "");
}

TEST_F(OutputFolderTest, RemovesStagingFoldersOfProcessesThatAreGone) {
  const pid_t child = fork();
  if (child == 0) {
    OutputFolder folder(out_);
    WriteFileAtomic(folder.staging() / "plan.json", "half");
    raise(SIGKILL);  // nothing runs: the staging folder stays
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(Entries(root_).size(), 1u);
  EXPECT_THAT(Entries(root_)[0], HasSubstr(".out.kareus-staging-" + std::to_string(child)));
  OutputFolder folder(out_);
  EXPECT_EQ(Entries(root_).size(), 1u) << "only our own staging folder";
  EXPECT_THAT(Entries(root_)[0], HasSubstr(std::to_string(::getpid())));
}

TEST_F(OutputFolderTest, ASignalRemovesTemporariesAndLeavesTheOldOutputs) {
  {
    OutputFolder folder(out_);
    WriteFileAtomic(folder.staging() / "plan.json", "old");
    folder.Commit();
  }
  const pid_t child = fork();
  if (child == 0) {
    RemoveTemporariesOnTermination();
    OutputFolder folder(out_);
    WriteFileAtomic(folder.staging() / "plan.json", "new");
    WriteFileAtomic(folder.staging() / "plans" / "plan_00001.json", "new");
    kill(getpid(), SIGTERM);
    while (true) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_EQ(Entries(root_), std::vector<std::string>{"out"});
  EXPECT_EQ(ReadTextFile(out_ / "plan.json"), "old");
}

}  // namespace
}  // namespace kareus
