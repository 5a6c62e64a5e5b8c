// SPDX-License-Identifier: Apache-2.0
// Issue 31's reproducers, end to end through the `kareus` binary: a bit-flipped store never
// changes a profile without a word, read-only stores are read (and refused only when written
// to), output folders are checked before the work, export validates the plans it exports, and
// messages stay UTF-8 and say what a full disk left behind. The read-only mount, the mount
// point and the full disk are made in a user and mount namespace (`unshare -rm`); where the
// machine does not allow one, those parts are skipped and say so.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <array>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "integration/cli_util.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "plan/plan_for.h"

namespace kareus {
namespace {

namespace fs = std::filesystem;
using testing::KareusBinary;
using testing::RunKareus;
using testing::SourceDir;

constexpr const char* kWorkload = "examples/paper/01-llama3.2-3b-tp8-mbs8-seq4096.yaml";
constexpr const char* kProfile = " --partition fwd_mlp --budget 16 --quiet --json";

struct Shell {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

Shell Sh(const std::string& command) {
  Shell result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  std::array<char, 4096> buffer;
  for (std::size_t n; (n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0;) {
    result.out.append(buffer.data(), n);
  }
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// Runs `script` (sh) as root of a new user and mount namespace, where it may mount.
Shell InNamespace(const std::string& script) { return Sh("unshare -rm sh -c '" + script + "'"); }

bool NamespacesAvailable() {
  static const bool available =
      Sh("unshare -rm sh -c 'mount -t tmpfs none /tmp 2>/dev/null'").exit_code == 0;
  return available;
}

void WriteBytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

class ReliabilityCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(KareusBinary())) GTEST_SKIP() << "build the kareus target first";
    dir_ = fs::temp_directory_path() /
           ("kareus-reliability-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    workload_ = (SourceDir() / kWorkload).string();
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string Kareus() const { return KareusBinary().string(); }
  fs::path dir_;
  std::string workload_;
};

// Reproducer 1: flip random bits of a measurement store and profile from it. Every run exits 0
// or 2; one that exits 0 with another profile than the intact store's must have said which rows
// it set aside. (Before checksums: 14 of 40 trials exited 0, 9 of them with another profile.)
TEST_F(ReliabilityCli, ABitFlippedStoreNeverChangesAProfileSilently) {
  const fs::path store = dir_ / "s.sqlite";
  ASSERT_EQ(RunKareus("profile " + workload_ + kProfile + " --store " + store.string()).exit_code,
            0);
  const std::string bytes = ReadTextFile(store);
  const auto profile = [&] {
    return RunKareus("profile " + workload_ + kProfile + " --store " + store.string());
  };
  WriteBytes(store, bytes);
  const auto intact = profile();
  ASSERT_EQ(intact.exit_code, 0) << intact.err;
  std::mt19937_64 rng(2026);
  int refused = 0, named = 0, unchanged = 0, silent = 0;
  const int trials = 80;
  for (int t = 0; t < trials; ++t) {
    std::string damaged = bytes;
    const std::size_t at = rng() % damaged.size();
    damaged[at] = static_cast<char>(damaged[at] ^ (1 << (rng() % 8)));
    for (const char* side : {"-wal", "-shm"}) fs::remove(store.string() + side);
    WriteBytes(store, damaged);
    const auto run = profile();
    ASSERT_TRUE(run.exit_code == 0 || run.exit_code == 2) << "byte " << at << ": " << run.err;
    EXPECT_TRUE(IsValidUtf8(run.err)) << run.err;
    if (run.exit_code == 2) {
      ++refused;
    } else if (run.err.find("set aside") != std::string::npos) {
      ++named;
    } else if (run.out == intact.out) {
      ++unchanged;
    } else {
      ++silent;
      ADD_FAILURE() << "a flip at byte " << at << " changed the profile without a word";
    }
  }
  std::printf(
      "%d flipped stores: %d exit 2, %d named the rows set aside, %d unchanged, %d "
      "silent\n",
      trials, refused, named, unchanged, silent);
  EXPECT_EQ(silent, 0);
  // Told not to re-measure, a store with a damaged row stops the run naming it.
  WriteBytes(store, bytes);
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(store.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "UPDATE measurements SET time_s = time_s * 1.01 WHERE rowid = 3",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  const auto strict = RunKareus("profile " + workload_ + kProfile +
                                " --damaged-rows fail --store " + store.string());
  EXPECT_EQ(strict.exit_code, 2);
  EXPECT_THAT(strict.err, ::testing::HasSubstr("1 row fails its checks"));
  EXPECT_THAT(strict.err, ::testing::HasSubstr("checksum does not match"));
  const auto lenient = profile();
  EXPECT_EQ(lenient.exit_code, 0) << lenient.err;
  EXPECT_THAT(lenient.err, ::testing::HasSubstr("set aside"));
}

// Reproducer 2: a valid store on a read-only mount is read; --related never leaves side files.
TEST_F(ReliabilityCli, ReadOnlyStoresAreReadAndRelatedLeavesNoSideFiles) {
  const fs::path related = dir_ / "related.sqlite";
  const std::string other =
      (SourceDir() / "examples/paper/06-qwen3-1.7b-tp8-mbs8-seq8192.yaml").string();
  const std::string related_workload =
      (SourceDir() / "examples/paper/05-qwen3-1.7b-tp8-mbs8-seq4096.yaml").string();
  ASSERT_EQ(RunKareus("profile " + related_workload + kProfile + " --store " + related.string())
                .exit_code,
            0);
  const std::string before = ReadTextFile(related);
  const auto transfer = RunKareus("profile " + other + kProfile + " --related " + related.string());
  ASSERT_EQ(transfer.exit_code, 0) << transfer.err;
  EXPECT_EQ(ReadTextFile(related), before);
  EXPECT_FALSE(fs::exists(related.string() + "-wal"));
  EXPECT_FALSE(fs::exists(related.string() + "-shm"));

  const fs::path store = dir_ / "s.sqlite";
  const auto first = RunKareus("profile " + workload_ + kProfile + " --store " + store.string());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto reread = RunKareus("profile " + workload_ + kProfile + " --store " + store.string());
  ASSERT_EQ(reread.exit_code, 0) << reread.err;  // all 16 from the store
  if (!NamespacesAvailable()) GTEST_SKIP() << "no user/mount namespaces here (unshare -rm)";
  const fs::path ro = dir_ / "ro";
  fs::create_directories(ro);
  const auto in_read_only_mount = [&](const std::string& args) {
    return InNamespace("mount -t tmpfs none " + ro.string() + " && cp " + store.string() + " " +
                       related.string() + " " + ro.string() + "/ && mount -o remount,ro " +
                       ro.string() + " && " + Kareus() + " " + args + " 2>" +
                       (dir_ / "err").string());
  };
  // Everything the profile needs is stored: the same profile, nothing written.
  Shell same = in_read_only_mount("profile " + workload_ + kProfile + " --store " +
                                  (ro / "s.sqlite").string());
  ASSERT_EQ(same.exit_code, 0) << same.out << ReadTextFile(dir_ / "err");
  EXPECT_TRUE(same.out == reread.out) << "another profile from the read-only store";
  // A profile that needs new measurements is refused before it measures, naming the file.
  Shell more = in_read_only_mount("profile " + workload_ +
                                  " --partition fwd_mlp --budget 24 --quiet --json --store " +
                                  (ro / "s.sqlite").string());
  EXPECT_EQ(more.exit_code, 2);
  const std::string err = ReadTextFile(dir_ / "err");
  EXPECT_THAT(err, ::testing::HasSubstr("read-only"));
  EXPECT_THAT(err, ::testing::HasSubstr((ro / "s.sqlite").string()));
  EXPECT_THAT(err, ::testing::HasSubstr("nothing was measured"));
  // A related store on a read-only mount.
  Shell transfer_ro = in_read_only_mount("profile " + other + kProfile + " --related " +
                                         (ro / "related.sqlite").string());
  EXPECT_EQ(transfer_ro.exit_code, 0) << transfer_ro.out << ReadTextFile(dir_ / "err");
}

// Reproducer 3: --out is checked before any work: a mount point, an empty path, a parent that
// is a file.
TEST_F(ReliabilityCli, OutputFoldersAreCheckedBeforeTheWork) {
  for (const char* command : {"run", "evaluate"}) {
    const auto run = RunKareus(std::string(command) + " " + workload_ + " --quiet --out /proc");
    EXPECT_EQ(run.exit_code, 2) << command;
    EXPECT_THAT(run.err, ::testing::HasSubstr("/proc: is a mount point")) << command;
  }
  const auto empty = RunKareus("evaluate " + workload_ + " --quiet --out ''");
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_THAT(empty.err, ::testing::HasSubstr("--out = \"\": an output folder is required"));
  EXPECT_THAT(empty.out, ::testing::Not(::testing::HasSubstr("Wrote")));
  { std::ofstream file(dir_ / "file"); }
  const auto under_file =
      RunKareus("run " + workload_ + " --quiet --out " + (dir_ / "file/out").string());
  EXPECT_EQ(under_file.exit_code, 2);
  EXPECT_THAT(under_file.err, ::testing::HasSubstr("cannot be created"));
  // solve and export, on a real input each.
  {
    std::ofstream csv(dir_ / "profile.csv");
    csv << "stage,instruction,frequency,time,energy\n";
    for (int s = 0; s < 2; ++s) {
      for (int f = 1410; f >= 1200; f -= 30) {
        const double t = 0.15 * 1410.0 / f;
        csv << s << ",forward," << f << "," << t << "," << 300 * t << "\n"
            << s << ",backward," << f << "," << 2 * t << "," << 600 * t << "\n";
      }
    }
  }
  const auto solve = RunKareus("solve " + (dir_ / "profile.csv").string() +
                               " --stages 2 --microbatches 4 --static-power 85 --out /proc");
  EXPECT_EQ(solve.exit_code, 2);
  EXPECT_THAT(solve.err, ::testing::HasSubstr("is a mount point"));
  plan::WritePlanFile(dir_ / "plan.json", plan::testing::PlanFor(fs::path(kWorkload).filename()));
  const auto exported =
      RunKareus("export " + (dir_ / "plan.json").string() + " --format kareus-scheds --out /proc");
  EXPECT_EQ(exported.exit_code, 2);
  EXPECT_THAT(exported.err, ::testing::HasSubstr("is a mount point"));

  if (!NamespacesAvailable()) GTEST_SKIP() << "no user/mount namespaces here (unshare -rm)";
  // An empty mount point (the reproducer): refused at once, not after the whole job.
  const fs::path mount_point = dir_ / "mnt";
  fs::create_directories(mount_point);
  Shell mounted = InNamespace("mount -t tmpfs none " + mount_point.string() + " && " + Kareus() +
                              " run " + workload_ + " --quiet --out " + mount_point.string());
  EXPECT_EQ(mounted.exit_code, 2) << mounted.out;
  // Not the swap's EBUSY after the whole job ("cannot swap in the new outputs"): the check.
  EXPECT_THAT(mounted.out, ::testing::HasSubstr("is a mount point"));
}

// Reproducer 4: export validates what it exports (the same check as the runtime's).
TEST_F(ReliabilityCli, ExportRefusesPlansThatDoNotFitTheirWorkload) {
  const plan::Plan good = plan::testing::PlanFor(fs::path(kWorkload).filename());
  const fs::path path = dir_ / "plan.json";
  const auto export_plan = [&](const plan::Plan& p, const std::string& format) {
    plan::WritePlanFile(path, p);
    fs::remove_all(dir_ / "out");
    return RunKareus("export " + path.string() + " --format " + format + " --out " +
                     (dir_ / "out").string());
  };
  ASSERT_EQ(export_plan(good, "kareus-scheds").exit_code, 0);
  ASSERT_EQ(export_plan(good, "zeus --clocks-only").exit_code, 0);
  for (int freq : {1, 5000, INT_MAX}) {
    plan::Plan bad = good;
    for (auto& stage : bad.stages) {
      for (auto& inst : stage.instructions) inst.freq_mhz = freq;
    }
    const auto run = export_plan(bad, "zeus --clocks-only");
    EXPECT_EQ(run.exit_code, 2) << freq;
    EXPECT_THAT(run.err, ::testing::HasSubstr("freq_mhz = " + std::to_string(freq) +
                                              ": not a clock the A100"));
  }
  plan::Plan wrong_pp = good;
  wrong_pp.workload["parallelism"]["pp"] = 4;
  const auto pp = export_plan(wrong_pp, "kareus-scheds");
  EXPECT_EQ(pp.exit_code, 2);
  EXPECT_THAT(pp.err, ::testing::HasSubstr("workload.parallelism.pp = 4: the plan lists 2 stages"));
  plan::Plan unknown_slot = good;
  unknown_slot.stages[0].instructions[0].partitions[0].slot = "norm_0', 'evil";
  const auto slot = export_plan(unknown_slot, "kareus-scheds");
  EXPECT_EQ(slot.exit_code, 2);
  EXPECT_THAT(slot.err, ::testing::HasSubstr("not a slot of"));
}

// Reproducer 5: messages carry no bytes that are not UTF-8 (a damaged schema name quoted by
// SQLite), and a full disk's message says exactly what was left.
TEST_F(ReliabilityCli, MessagesAreUtf8AndSayWhatAFullDiskLeft) {
  const fs::path store = dir_ / "s.sqlite";
  ASSERT_EQ(RunKareus("profile " + workload_ + kProfile + " --store " + store.string()).exit_code,
            0);
  std::string bytes = ReadTextFile(store);
  const std::size_t at = bytes.find("sqlite_autoindex_meta_1");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 20] = static_cast<char>(0xe1);  // "sqlite_autoindex_met\xe1_1"
  WriteBytes(store, bytes);
  const auto damaged = RunKareus("profile " + workload_ + kProfile + " --store " + store.string());
  EXPECT_EQ(damaged.exit_code, 2);
  EXPECT_TRUE(IsValidUtf8(damaged.err)) << damaged.err;

  if (!NamespacesAvailable()) GTEST_SKIP() << "no user/mount namespaces here (unshare -rm)";
  for (const char* size : {"4k", "8k", "12k", "16k", "20k"}) {
    const fs::path full = dir_ / "full";
    fs::create_directories(full);
    Shell run =
        InNamespace("mount -t tmpfs -o size=" + std::string(size) + " none " + full.string() +
                    " && head -c 1 /dev/zero > " + full.string() + "/x; " + Kareus() + " profile " +
                    workload_ + kProfile + " --store " + full.string() +
                    "/s.sqlite >/dev/null; echo rc=$?; ls -A " + full.string());
    SCOPED_TRACE(std::string(size) + ": " + run.out);
    EXPECT_TRUE(IsValidUtf8(run.out));
    if (run.out.find("rc=0") != std::string::npos) continue;  // it fitted
    EXPECT_THAT(run.out, ::testing::HasSubstr("rc=2"));
    EXPECT_THAT(run.out, ::testing::Not(::testing::HasSubstr("the file was left unchanged")));
    const std::string listing = run.out.substr(run.out.find("rc=2") + 4);
    if (run.out.find("nothing was left behind") != std::string::npos) {
      EXPECT_EQ(listing, "\nx\n");
    } else {
      EXPECT_THAT(run.out, ::testing::HasSubstr("left behind: s.sqlite"));
    }
  }
}

}  // namespace
}  // namespace kareus
