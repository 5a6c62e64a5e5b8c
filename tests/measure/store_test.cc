// SPDX-License-Identifier: Apache-2.0
#include "kareus/measure/store.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "kareus/common/context.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "measure/synthetic_backend.h"

namespace kareus::measure {
namespace {

namespace fs = std::filesystem;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kareus-store-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  StoreIdentity identity_{
      .gpu = "A100-SXM4-40GB", .workload_signature = "sig-1", .backend = "emulator(test)"};
};

Sample MakeSample(double t) {
  return Sample{.time_s = t,
                .energy_j = 2 * t,
                .static_energy_j = 0.5 * t,
                .dynamic_energy_j = 1.5 * t,
                .realized_freq_mhz = 1300,
                .seconds = 12,
                .gpus = 1,
                .noise_free = false};
}

// Everything that lives in a store's files (main file + WAL), to prove nothing was touched.
std::string Snapshot(const fs::path& path) {
  std::string all;
  for (const char* suffix : {"", "-wal"}) {
    const fs::path p = path.string() + suffix;
    if (fs::exists(p)) all += ReadTextFile(p) + "|";
  }
  return all;
}

TEST_F(StoreTest, RoundTripAndReopen) {
  const fs::path path = dir_ / "store.db";
  {
    auto store = MeasurementStore::Open(path, identity_);
    EXPECT_EQ(store->Count(), 0);
    store->Insert("fwd_attn", {.freq_mhz = 1410, .sms = 6, .slot = "norm_0"}, MakeSample(1e-3));
    store->Insert("fwd_attn", {.freq_mhz = 1380, .sms = 6, .slot = "norm_0"}, MakeSample(2e-3));
    store->Insert("fwd_mlp", {.freq_mhz = 1410, .sms = 6, .slot = "norm_0"}, MakeSample(3e-3));
    EXPECT_EQ(store->Count(), 3);
    EXPECT_EQ(store->Count("fwd_attn"), 2);
    // The same knobs of another partition type are a different key.
    EXPECT_FALSE(store->Find("fwd_mlp", {.freq_mhz = 1380, .sms = 6, .slot = "norm_0"}));
  }
  auto store = MeasurementStore::Open(path, identity_);
  EXPECT_EQ(store->Count(), 3);
  const auto found = store->Find("fwd_attn", {.freq_mhz = 1380, .sms = 6, .slot = "norm_0"});
  ASSERT_TRUE(found.has_value());
  EXPECT_DOUBLE_EQ(found->time_s, 2e-3);
  EXPECT_DOUBLE_EQ(found->energy_j, 4e-3);
  EXPECT_DOUBLE_EQ(found->dynamic_energy_j, 3e-3);
  EXPECT_FALSE(found->noise_free);
  const auto rows = store->All();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[2].partition, "fwd_mlp");
  // A duplicate insert (another process measured it meanwhile) keeps the stored row.
  EXPECT_FALSE(
      store->Insert("fwd_mlp", {.freq_mhz = 1410, .sms = 6, .slot = "norm_0"}, MakeSample(9.0)));
  EXPECT_DOUBLE_EQ(store->Find("fwd_mlp", {.freq_mhz = 1410, .sms = 6, .slot = "norm_0"})->time_s,
                   3e-3);
}

TEST_F(StoreTest, OptionsOutsideTheirEnumsAreRefusedBeforeAnyFileIsMade) {
  EXPECT_FALSE(StoreOptions{}.Validate().has_value());
  StoreOptions options;
  options.access = static_cast<StoreOptions::Access>(7);
  ASSERT_TRUE(options.Validate().has_value());
  EXPECT_EQ(options.Validate()->field, "access");
  options = StoreOptions{};
  options.damaged = static_cast<StoreOptions::DamagedRows>(-1);
  EXPECT_EQ(options.Validate()->Message(),
            "damaged = -1: must be one of set-aside (0), fail (1), skip (2)");
  const fs::path path = dir_ / "store.db";
  EXPECT_THROW(MeasurementStore::Open(path, identity_, options), InputError);
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(StoreTest, UsesWalJournalAndSchemaVersion) {
  const fs::path path = dir_ / "store.db";
  MeasurementStore::Open(path, identity_);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nullptr);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "wal");
  sqlite3_finalize(stmt);
  sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &stmt, nullptr);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(stmt, 0), MeasurementStore::kSchemaVersion);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST_F(StoreTest, AnotherWorkloadGpuOrBackendIsRefusedAndUntouched) {
  const fs::path path = dir_ / "store.db";
  {
    auto store = MeasurementStore::Open(path, identity_);
    store->Insert("fwd_attn", {.freq_mhz = 1410, .sms = 6, .slot = "norm_0"}, MakeSample(1e-3));
  }
  const std::string before = Snapshot(path);
  for (StoreIdentity other :
       {StoreIdentity{identity_.gpu, "sig-2", identity_.backend},
        StoreIdentity{"H100-SXM", identity_.workload_signature, identity_.backend},
        StoreIdentity{identity_.gpu, identity_.workload_signature, "emulator(other)"}}) {
    try {
      MeasurementStore::Open(path, other);
      ADD_FAILURE() << "expected EnvironmentError";
    } catch (const EnvironmentError& e) {
      EXPECT_NE(std::string(e.what()).find("belongs to another"), std::string::npos) << e.what();
    }
    EXPECT_EQ(Snapshot(path), before);
  }
  EXPECT_EQ(MeasurementStore::Open(path, identity_)->Count(), 1);
}

TEST_F(StoreTest, CorruptedFileIsRefusedAndUntouched) {
  const fs::path path = dir_ / "garbage.db";
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 4096; ++i) out.put(static_cast<char>((i * 131 + 7) & 0xff));
  }
  const std::string before = Snapshot(path);
  EXPECT_THROW(MeasurementStore::Open(path, identity_), EnvironmentError);
  EXPECT_EQ(Snapshot(path), before);
  EXPECT_FALSE(fs::exists(path.string() + "-wal"));
}

// Found by the store fuzzer: a database with no schema and a damaged page 1 was taken for an
// empty store and switched to WAL (its header rewritten) before the damage showed.
TEST_F(StoreTest, DamagedFileWithoutTablesIsRefusedUntouched) {
  const fs::path path = dir_ / "damaged.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE x(a); DROP TABLE x;", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  std::string bytes = ReadTextFile(path);
  ASSERT_GT(bytes.size(), 104u);
  bytes[101] = 0x0f;  // page 1's first free block: past the cells, inside nothing
  bytes[102] = 0x00;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const std::string before = Snapshot(path);
  try {
    MeasurementStore::Open(path, identity_);
    ADD_FAILURE() << "a damaged file was opened";
  } catch (const EnvironmentError& e) {
    EXPECT_NE(std::string(e.what()).find("corrupted"), std::string::npos) << e.what();
  }
  EXPECT_EQ(Snapshot(path), before);
  EXPECT_FALSE(fs::exists(path.string() + "-wal"));
}

// A database whose schema holds no table but something else is not an empty store.
TEST_F(StoreTest, SchemaWithoutTablesIsAnotherSchema) {
  const fs::path path = dir_ / "view.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE VIEW v AS SELECT 1 AS one;", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  const std::string before = Snapshot(path);
  EXPECT_THROW(MeasurementStore::Open(path, identity_), EnvironmentError);
  EXPECT_EQ(Snapshot(path), before);
}

TEST_F(StoreTest, TruncatedStoreIsRefused) {
  const fs::path path = dir_ / "store.db";
  {
    auto store = MeasurementStore::Open(path, identity_);
    for (int f = 900; f <= 1410; f += 30) {
      store->Insert("fwd_attn", {.freq_mhz = f, .sms = 6, .slot = "norm_0"}, MakeSample(f));
    }
  }
  // Keep the first page only (header intact, tables gone).
  const std::string bytes = ReadTextFile(path);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), 1024);
  }
  fs::remove(path.string() + "-wal");
  fs::remove(path.string() + "-shm");
  const std::string before = Snapshot(path);
  EXPECT_THROW(MeasurementStore::Open(path, identity_), EnvironmentError);
  EXPECT_EQ(Snapshot(path), before);
}

TEST_F(StoreTest, ForeignSchemaAndOtherVersionAreRefused) {
  const fs::path foreign = dir_ / "foreign.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(foreign.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "CREATE TABLE results(x INTEGER); INSERT INTO results VALUES (1);", nullptr,
               nullptr, nullptr);
  sqlite3_close(db);
  std::string before = Snapshot(foreign);
  EXPECT_THROW(MeasurementStore::Open(foreign, identity_), EnvironmentError);
  EXPECT_EQ(Snapshot(foreign), before);

  const fs::path old = dir_ / "old.db";
  MeasurementStore::Open(old, identity_);
  ASSERT_EQ(sqlite3_open(old.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "UPDATE meta SET value = '99' WHERE key = 'schema_version';", nullptr, nullptr,
               nullptr);
  sqlite3_close(db);
  before = Snapshot(old);
  try {
    MeasurementStore::Open(old, identity_);
    ADD_FAILURE() << "expected EnvironmentError";
  } catch (const EnvironmentError& e) {
    EXPECT_NE(std::string(e.what()).find("schema_version"), std::string::npos) << e.what();
  }
  EXPECT_EQ(Snapshot(old), before);
}

TEST_F(StoreTest, EmptyFileBecomesAStore) {
  const fs::path path = dir_ / "empty.db";
  { std::ofstream out(path); }
  auto store = MeasurementStore::Open(path, identity_);
  EXPECT_EQ(store->Count(), 0);
}

// Runs `sql` on the store file directly (a hand edit).
void EditStore(const fs::path& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  char* message = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message), SQLITE_OK)
      << (message ? message : "");
  sqlite3_free(message);
  sqlite3_close(db);
}

// Hand edits of every kind, each of which a row's checks or its checksum catch at open: named
// and set aside (then measured again), or, told not to re-measure, refused with the file
// unchanged.
TEST_F(StoreTest, DamagedRowsAreSetAsideOrRefused) {
  const fs::path path = dir_ / "store.db";
  const PartitionKnobs knobs{.freq_mhz = 1410, .sms = 6, .slot = "norm_0"};
  struct Edit {
    std::string sql, expected;
  };
  const std::vector<Edit> edits = {
      {"UPDATE measurements SET time_s = -1", "time_s = -1: must be a finite time > 0"},
      {"UPDATE measurements SET time_s = 0", "time_s = 0"},
      {"UPDATE measurements SET energy_j = -5, dynamic_energy_j = -5.0005", "energy_j = -5"},
      {"UPDATE measurements SET energy_j = 1", "static_energy_j + dynamic_energy_j"},
      {"UPDATE measurements SET time_s = 'fast'", "time_s is not a number"},
      {"UPDATE measurements SET gpu_seconds = -12", "gpu_seconds = -12"},
      {"UPDATE measurements SET noise_free = 7", "noise_free must be 0 or 1"},
      // Plausible values: only the checksum tells.
      {"UPDATE measurements SET time_s = 0.002", "checksum does not match"},
      {"UPDATE measurements SET checksum = checksum + 1", "checksum does not match"},
      {"UPDATE measurements SET checksum = NULL", "checksum is missing"},
      {"UPDATE measurements SET partition = CAST(X'66776400' AS TEXT)", "checksum"},
      {"UPDATE measurements SET slot = CAST(X'6e6f726de1' AS TEXT)", "slot is not UTF-8 text"},
  };
  for (const Edit& edit : edits) {
    SCOPED_TRACE(edit.sql);
    fs::remove(path);
    {
      auto store = MeasurementStore::Open(path, identity_);
      store->Insert("fwd_attn", knobs, MakeSample(1e-3));
      store->Insert("fwd_attn", {.freq_mhz = 1380, .sms = 6, .slot = "norm_0"}, MakeSample(2e-3));
    }
    EditStore(path, edit.sql + " WHERE freq_mhz = 1410");
    const std::string before = Snapshot(path);
    try {
      MeasurementStore::Open(path, identity_, {.damaged = StoreOptions::DamagedRows::kFail});
      ADD_FAILURE() << "trusted";
    } catch (const EnvironmentError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(edit.expected));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("1 row fails its checks"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("the file was left unchanged"));
    }
    EXPECT_EQ(Snapshot(path), before);
    std::vector<std::string> warnings;
    {
      auto store = MeasurementStore::Open(
          path, identity_, {.warn = [&](const std::string& w) { warnings.push_back(w); }});
      ASSERT_EQ(store->damaged_rows().size(), 1u);
      EXPECT_THAT(store->damaged_rows()[0], ::testing::HasSubstr(edit.expected));
      EXPECT_FALSE(store->Find("fwd_attn", knobs));  // measured again
      EXPECT_EQ(store->Count(), 1);
      ASSERT_EQ(warnings.size(), 1u);
      EXPECT_THAT(warnings[0], ::testing::HasSubstr("set aside"));
      EXPECT_TRUE(store->Insert("fwd_attn", knobs, MakeSample(1e-3)));
    }
    // Kept, not deleted: the damaged row is in set_aside with the reason.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* stmt = nullptr;
    sqlite3_prepare_v2(db, "SELECT reason FROM set_aside", -1, &stmt, nullptr);
    ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
    EXPECT_THAT(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)),
                ::testing::HasSubstr(edit.expected));
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    auto reopened = MeasurementStore::Open(path, identity_);
    EXPECT_TRUE(reopened->damaged_rows().empty());
    EXPECT_EQ(reopened->Count(), 2);
  }
  // A row damaged while the store is open is refused when read, not trusted.
  fs::remove(path);
  auto store = MeasurementStore::Open(path, identity_);
  store->Insert("fwd_attn", knobs, MakeSample(1e-3));
  EditStore(path, "UPDATE measurements SET time_s = 0.002");
  try {
    store->Find("fwd_attn", knobs);
    ADD_FAILURE() << "trusted";
  } catch (const EnvironmentError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("(fwd_attn, 1410 MHz, 6 SMs, norm_0)"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("checksum does not match"));
  }
  EXPECT_THROW(store->All(), EnvironmentError);
}

TEST_F(StoreTest, DamagedMetaTableIsRefusedUntouched) {
  const fs::path path = dir_ / "store.db";
  MeasurementStore::Open(path, identity_)
      ->Insert("fwd_attn", {.freq_mhz = 1410, .sms = 6, .slot = "norm_0"}, MakeSample(1e-3));
  EditStore(path, "UPDATE meta SET value = 'sig-2' WHERE key = 'workload_signature'");
  const std::string before = Snapshot(path);
  try {
    MeasurementStore::Open(path, {identity_.gpu, "sig-2", identity_.backend});
    ADD_FAILURE() << "a damaged meta table was trusted";
  } catch (const EnvironmentError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("meta table fails its checksum"));
  }
  EXPECT_EQ(Snapshot(path), before);
}

// A version 1 store (no checksums) as the previous schema wrote it: one good row and one with a
// negative time; `extra` is more SQL run on it.
void WriteVersionOneStore(const fs::path& path, const char* extra = "") {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const char* v1 = R"sql(
    CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE measurements(gpu TEXT NOT NULL, workload TEXT NOT NULL,
      partition TEXT NOT NULL, freq_mhz INTEGER NOT NULL, sms INTEGER NOT NULL,
      slot TEXT NOT NULL, time_s REAL NOT NULL, energy_j REAL NOT NULL,
      static_energy_j REAL NOT NULL, dynamic_energy_j REAL NOT NULL,
      realized_freq_mhz REAL NOT NULL, gpu_seconds REAL NOT NULL,
      noise_free INTEGER NOT NULL, measured_at TEXT NOT NULL,
      PRIMARY KEY (gpu, workload, partition, freq_mhz, sms, slot));
    INSERT INTO meta VALUES ('format', 'kareus-measurement-store'), ('schema_version', '1'),
      ('gpu', 'A100-SXM4-40GB'), ('workload_signature', 'sig-1'),
      ('backend', 'emulator(test)'), ('created_at', '2026-01-01T00:00:00Z');
    INSERT INTO measurements VALUES ('A100-SXM4-40GB', 'sig-1', 'fwd_attn', 1410, 6, 'norm_0',
      0.001, 0.002, 0.0005, 0.0015, 1300, 12, 0, '2026-01-01T00:00:00Z');
    INSERT INTO measurements VALUES ('A100-SXM4-40GB', 'sig-1', 'fwd_attn', 1380, 6, 'norm_0',
      -1, 0.002, 0.0005, 0.0015, 1300, 12, 0, '2026-01-01T00:00:00Z');
  )sql";
  ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, extra, nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
}

// Version 1 stores (no checksums) are upgraded in place on a read-write open; their rows are
// kept (checked by value as before) and the damaged ones set aside.
TEST_F(StoreTest, VersionOneStoreIsUpgraded) {
  const fs::path path = dir_ / "v1.db";
  WriteVersionOneStore(path);
  // Told not to re-measure, the damaged row refuses it before anything is upgraded.
  const std::string v1_bytes = Snapshot(path);
  EXPECT_THROW(
      MeasurementStore::Open(path, identity_, {.damaged = StoreOptions::DamagedRows::kFail}),
      EnvironmentError);
  EXPECT_EQ(Snapshot(path), v1_bytes);
  // Read-only, it is read as it is: the good row served, the bad one skipped.
  {
    auto store = MeasurementStore::Open(
        path, identity_,
        {.access = StoreOptions::Access::kReadOnly, .warn = [](const std::string&) {}});
    EXPECT_EQ(store->Count(), 1);
    EXPECT_FALSE(fs::exists(path.string() + "-wal"));
  }
  {
    auto store = MeasurementStore::Open(path, identity_, {.warn = [](const std::string&) {}});
    EXPECT_EQ(store->damaged_rows().size(), 1u);
    EXPECT_EQ(store->Count(), 1);
    EXPECT_DOUBLE_EQ(
        store->Find("fwd_attn", {.freq_mhz = 1410, .sms = 6, .slot = "norm_0"})->time_s, 1e-3);
  }
  auto store = MeasurementStore::Open(path, identity_);
  EXPECT_TRUE(store->damaged_rows().empty());
  EditStore(path, "UPDATE measurements SET time_s = 0.003");  // now the checksum tells
  EXPECT_THROW(store->All(), EnvironmentError);
}

// A failed upgrade leaves the file byte for byte as it was: the writes run in the file's own
// journal, each transaction undone on failure, and the WAL switch comes last (the store
// fuzzer's find: a damaged header refused the upgrade after the header had been switched to
// WAL, and the message said "left unchanged"). Here a trigger refuses the upgrade's UPDATE.
TEST_F(StoreTest, FailedUpgradeLeavesTheFileAsItWas) {
  const fs::path path = dir_ / "v1.db";
  WriteVersionOneStore(path,
                       "CREATE TRIGGER no_update BEFORE UPDATE ON measurements "
                       "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END;");
  const std::string before = Snapshot(path);
  try {
    MeasurementStore::Open(path, identity_, {.warn = [](const std::string&) {}});
    ADD_FAILURE() << "the trigger did not refuse the upgrade";
  } catch (const EnvironmentError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cannot upgrade the store"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("the file was left unchanged"));
  }
  EXPECT_TRUE(Snapshot(path) == before) << "the file changed";
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    EXPECT_FALSE(fs::exists(path.string() + suffix)) << suffix;
  }
}

// A failure after a committed write says what was committed, not "left unchanged": here the
// upgrade commits and a trigger then refuses to move the damaged row to set_aside.
TEST_F(StoreTest, FailureAfterTheUpgradeSaysTheStoreWasUpgraded) {
  const fs::path path = dir_ / "v1.db";
  WriteVersionOneStore(path,
                       "CREATE TRIGGER no_delete BEFORE DELETE ON measurements "
                       "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END;");
  try {
    MeasurementStore::Open(path, identity_, {.warn = [](const std::string&) {}});
    ADD_FAILURE() << "the trigger did not refuse the set-aside";
  } catch (const EnvironmentError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cannot set a damaged row aside"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("before this failure the store was upgraded to "
                                               "schema version 2"));
    EXPECT_THAT(e.what(), ::testing::Not(::testing::HasSubstr("left unchanged")));
  }
  // Read-only, the upgraded store serves its good row (the damaged one skipped).
  auto store = MeasurementStore::Open(
      path, identity_,
      {.access = StoreOptions::Access::kReadOnly, .warn = [](const std::string&) {}});
  EXPECT_EQ(store->Count(), 1);
}

// What a store opened read-only does: no file is created beside it, what it holds is served,
// and a configuration it lacks is refused before anything is measured.
TEST_F(StoreTest, ReadOnlyStoreServesWhatItHoldsAndWritesNothing) {
  const fs::path path = dir_ / "store.db";
  const PartitionKnobs held{.freq_mhz = 1410, .sms = 6, .slot = "norm_0"};
  const PartitionKnobs lacking{.freq_mhz = 1380, .sms = 6, .slot = "norm_0"};
  MeasurementStore::Open(path, identity_)->Insert("fwd_attn", held, MakeSample(1e-3));
  ASSERT_FALSE(fs::exists(path.string() + "-wal"));
  const std::string before = Snapshot(path);
  auto store = MeasurementStore::Open(path, identity_, {.access = StoreOptions::Access::kReadOnly});
  EXPECT_TRUE(store->read_only());
  EXPECT_DOUBLE_EQ(store->Find("fwd_attn", held)->time_s, 1e-3);
  int measured = 0;
  const auto measure = [&](const std::vector<PartitionKnobs>& knobs,
                           const std::function<void(std::size_t, const Sample&)>& done) {
    for (std::size_t j = 0; j < knobs.size(); ++j) {
      ++measured;
      done(j, MakeSample(1.0));
    }
  };
  int ready = 0;
  store->FindOrMeasure("fwd_attn", {held}, measure,
                       [&](std::size_t, const Sample&, bool from_store) { ready += from_store; });
  EXPECT_EQ(ready, 1);
  try {
    store->FindOrMeasure("fwd_attn", {held, lacking}, measure,
                         [](std::size_t, const Sample&, bool) {});
    ADD_FAILURE() << "measured into a read-only store";
  } catch (const EnvironmentError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("read-only"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("lacks 1 of the 2"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr(path.string()));
  }
  EXPECT_EQ(measured, 0);
  EXPECT_THROW(store->Insert("fwd_attn", lacking, MakeSample(1.0)), EnvironmentError);
  store.reset();
  EXPECT_EQ(Snapshot(path), before);
  for (const char* side : {"-wal", "-shm", "-journal"}) {
    EXPECT_FALSE(fs::exists(path.string() + side)) << side;
  }
  // A missing file is not created by a read-only open.
  EXPECT_THROW(MeasurementStore::Open(dir_ / "none.db", identity_,
                                      {.access = StoreOptions::Access::kReadOnly}),
               EnvironmentError);
  EXPECT_FALSE(fs::exists(dir_ / "none.db"));
}

// A new store that cannot be created (the disk fills up at once: here a file size limit) is
// removed again, and the message says so; nothing is left behind.
TEST_F(StoreTest, ANewStoreThatCannotBeWrittenIsRemovedAndSaysSo) {
  const fs::path path = dir_ / "full.db";
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit {};
    limit.rlim_cur = limit.rlim_max = 2048;  // bytes: less than the schema needs
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::string message = "opened";
    try {
      MeasurementStore::Open(path, identity_);
    } catch (const EnvironmentError& e) {
      message = e.what();
    }
    if (::write(pipe_fds[1], message.data(), message.size()) < 0) std::_Exit(3);
    std::_Exit(0);
  }
  ::close(pipe_fds[1]);
  std::string message;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0;) message.append(buffer, n);
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_THAT(message, ::testing::HasSubstr("nothing was left behind"));
  EXPECT_THAT(message, ::testing::Not(::testing::HasSubstr("left unchanged")));
  for (const char* side : {"", "-wal", "-shm", "-journal"}) {
    EXPECT_FALSE(fs::exists(path.string() + side)) << side << ": " << message;
  }
}

// Issue 31: random bit flips anywhere in a store (page headers, cells, every column kind, the
// indexes, the checksums) never change what the store answers without a word. Each trial is
// refused at open (EnvironmentError), or names the rows it sets aside, or answers exactly the
// intact store's rows.
TEST_F(StoreTest, BitFlipsNeverChangeAnAnswerSilently) {
  const fs::path intact = dir_ / "intact.db";
  using Key = std::tuple<std::string, int, int, std::string>;
  std::map<Key, Sample> rows;
  {
    auto store = MeasurementStore::Open(intact, identity_);
    for (int i = 0; i < 48; ++i) {
      const std::string partition = i % 2 ? "fwd_attn" : "bwd_mlp";
      const PartitionKnobs knobs{
          .freq_mhz = 900 + 15 * (i / 2), .sms = 2 + i % 5, .slot = i % 3 ? "norm_0" : "linear_1"};
      Sample sample = MakeSample(1e-3 * (1 + i) + 1e-7 * i * i);
      sample.noise_free = i % 4 == 0;
      store->Insert(partition, knobs, sample);
      rows[{partition, knobs.freq_mhz, knobs.sms, knobs.slot}] = sample;
    }
  }
  ASSERT_FALSE(fs::exists(intact.string() + "-wal"));  // checkpointed into the file at close
  const std::string bytes = ReadTextFile(intact);
  // Where to flip: anywhere (uniform), the page headers, and the bytes of the stored values
  // (SQLite writes a REAL as 8 big-endian bytes), texts and checksums.
  std::vector<std::size_t> targeted;
  const auto find_all = [&](const std::string& needle) {
    for (std::size_t at = bytes.find(needle); at != std::string::npos;
         at = bytes.find(needle, at + 1)) {
      for (std::size_t k = 0; k < needle.size(); ++k) targeted.push_back(at + k);
    }
  };
  const auto big_endian = [](double v) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(bits));
    std::string out(8, '\0');
    for (int k = 0; k < 8; ++k) out[k] = static_cast<char>(bits >> (8 * (7 - k)));
    return out;
  };
  for (const auto& [key, sample] : rows) {
    for (double v :
         {sample.time_s, sample.energy_j, sample.static_energy_j, sample.dynamic_energy_j}) {
      find_all(big_endian(v));
    }
  }
  for (const char* text : {"fwd_attn", "bwd_mlp", "linear_1", "sig-1", "A100-SXM4-40GB"}) {
    find_all(text);
  }
  const std::size_t page = 4096;
  for (std::size_t p = 0; p * page < bytes.size(); ++p) {
    for (std::size_t k = 0; k < 12; ++k) targeted.push_back(p * page + (p == 0 ? 100 : 0) + k);
  }
  for (std::size_t k = 0; k < 100; ++k) targeted.push_back(k);  // the database header

  Rng rng(31);
  const fs::path trial_path = dir_ / "trial.db";
  int refused = 0, set_aside = 0, unchanged = 0, silent = 0;
  const int trials = 640;
  for (int t = 0; t < trials; ++t) {
    std::string damaged = bytes;
    const std::size_t at =
        t % 2 ? targeted[rng() % targeted.size()] : static_cast<std::size_t>(rng() % bytes.size());
    damaged[at] = static_cast<char>(damaged[at] ^ (1 << (rng() % 8)));
    for (const char* side : {"", "-wal", "-shm"}) fs::remove(trial_path.string() + side);
    {
      std::ofstream out(trial_path, std::ios::binary);
      out.write(damaged.data(), static_cast<std::streamsize>(damaged.size()));
    }
    try {
      auto store =
          MeasurementStore::Open(trial_path, identity_, {.warn = [](const std::string&) {}});
      std::size_t served = 0;
      bool changed = false;
      for (const StoredMeasurement& row : store->All()) {
        const auto it =
            rows.find({row.partition, row.knobs.freq_mhz, row.knobs.sms, row.knobs.slot});
        const Sample& s = row.sample;
        changed |= it == rows.end() || s.time_s != it->second.time_s ||
                   s.energy_j != it->second.energy_j ||
                   s.static_energy_j != it->second.static_energy_j ||
                   s.dynamic_energy_j != it->second.dynamic_energy_j ||
                   s.realized_freq_mhz != it->second.realized_freq_mhz ||
                   s.seconds != it->second.seconds || s.noise_free != it->second.noise_free;
        ++served;
      }
      for (const auto& [key, sample] : rows) {  // the lookups (through the index) agree
        const auto found = store->Find(
            std::get<0>(key),
            {.freq_mhz = std::get<1>(key), .sms = std::get<2>(key), .slot = std::get<3>(key)});
        changed |= found && found->time_s != sample.time_s;
      }
      const std::size_t missing = rows.size() - std::min(rows.size(), served);
      if (changed || missing > store->damaged_rows().size()) {
        ++silent;
        ADD_FAILURE() << "flip at byte " << at << ": " << (changed ? "a changed row" : "") << " "
                      << missing << " rows missing, " << store->damaged_rows().size() << " named";
      } else if (!store->damaged_rows().empty()) {
        ++set_aside;
      } else {
        ++unchanged;
      }
    } catch (const EnvironmentError&) {
      ++refused;
    }
  }
  std::printf(
      "%d bit flips: %d refused at open, %d with rows set aside (named), %d unchanged, "
      "%d silent\n",
      trials, refused, set_aside, unchanged, silent);
  EXPECT_EQ(silent, 0);
  // The flips did hit what matters: many trials needed the checks.
  EXPECT_GT(refused + set_aside, trials / 4);
}

// A fake measurement: slow enough that two processes overlap, recorded so that the test can
// count how often each configuration was measured.
Sample SlowSample(const PartitionKnobs& knobs) {
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  return MakeSample(knobs.freq_mhz * 1e-6 + knobs.sms * 1e-9);
}

std::vector<PartitionKnobs> Configurations(int count) {
  std::vector<PartitionKnobs> knobs;
  for (int i = 0; i < count; ++i) {
    knobs.push_back({.freq_mhz = 900 + 30 * (i % 18), .sms = 1 + i / 18, .slot = "norm_0"});
  }
  return knobs;
}

// One process's profiling of `batches` through the store; every measurement it takes is
// appended (one line, O_APPEND) to `log`.
void ProfileThroughStore(const fs::path& store_path, const StoreIdentity& identity,
                         const std::vector<std::vector<PartitionKnobs>>& batches,
                         const fs::path& log) {
  auto store = MeasurementStore::Open(store_path, identity);
  for (const auto& batch : batches) {
    std::vector<bool> ready(batch.size(), false);
    store->FindOrMeasure(
        "fwd_attn", batch,
        [&](const std::vector<PartitionKnobs>& knobs,
            const std::function<void(std::size_t, const Sample&)>& on_sample) {
          for (std::size_t j = 0; j < knobs.size(); ++j) {
            const Sample sample = SlowSample(knobs[j]);
            const std::string line =
                std::to_string(knobs[j].freq_mhz) + " " + std::to_string(knobs[j].sms) + "\n";
            const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (::write(fd, line.data(), line.size()) < 0) std::abort();
            ::close(fd);
            on_sample(j, sample);
          }
        },
        [&](std::size_t i, const Sample& sample, bool) {
          if (ready[i] || sample.time_s != SlowSample(batch[i]).time_s) std::abort();
          ready[i] = true;
        });
    for (bool r : ready) {
      if (!r) std::abort();
    }
  }
}

std::multiset<std::string> Lines(const fs::path& path) {
  std::multiset<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.insert(line);
  return lines;
}

TEST_F(StoreTest, TwoProcessesOnANewStoreEndWithTheUnionAndMeasureNothingTwice) {
  const fs::path path = dir_ / "shared.db";
  const fs::path log = dir_ / "measured.log";
  const std::vector<PartitionKnobs> all = Configurations(72);
  // Both go through the same configurations in the same order (two runs of one profile),
  // in batches of 8, plus a part of their own.
  std::vector<std::vector<PartitionKnobs>> shared;
  for (std::size_t i = 0; i < 48; i += 8) shared.emplace_back(all.begin() + i, all.begin() + i + 8);
  pid_t children[2];
  for (int c = 0; c < 2; ++c) {
    children[c] = fork();
    ASSERT_GE(children[c], 0);
    if (children[c] == 0) {
      auto batches = shared;
      batches.emplace_back(all.begin() + 48 + 12 * c, all.begin() + 60 + 12 * c);
      try {
        ProfileThroughStore(path, identity_, batches, log);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", c, e.what());
        _exit(1);
      }
      _exit(0);
    }
  }
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  auto store = MeasurementStore::Open(path, identity_);
  EXPECT_EQ(store->Count(), 72) << "the union of both processes' measurements";
  const std::multiset<std::string> measured = Lines(log);
  EXPECT_EQ(measured.size(), 72u) << "a configuration was measured twice";
  EXPECT_EQ(std::set<std::string>(measured.begin(), measured.end()).size(), 72u);
}

TEST_F(StoreTest, AClaimOfAKilledProcessIsTakenOver) {
  const fs::path path = dir_ / "shared.db";
  const fs::path log = dir_ / "measured.log";
  const std::vector<PartitionKnobs> all = Configurations(6);
  MeasurementStore::Open(path, identity_);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {  // claims everything, measures nothing, dies
    auto store = MeasurementStore::Open(path, identity_);
    store->FindOrMeasure(
        "fwd_attn", all,
        [&](const std::vector<PartitionKnobs>&,
            const std::function<void(std::size_t, const Sample&)>&) {
          if (write(ready[1], "x", 1) != 1) std::abort();
          while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
        },
        [](std::size_t, const Sample&, bool) {});
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  std::thread killer([child] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    kill(child, SIGKILL);
  });
  ProfileThroughStore(path, identity_, {all}, log);  // waits for the claims, then measures
  killer.join();
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_EQ(MeasurementStore::Open(path, identity_)->Count(), 6);
  EXPECT_EQ(Lines(log).size(), 6u);
}

TEST(SyntheticBackend, AccountsCostAndIsDeterministicPerConfiguration) {
  testing::SyntheticBackend a(7), b(7);
  const auto type = testing::SyntheticPartition("fwd_attn", 3);
  const PartitionKnobs k1{.freq_mhz = 1200, .sms = 9, .slot = "linear_0"};
  const PartitionKnobs k2{.freq_mhz = 990, .sms = 3, .slot = "norm_0"};
  const auto first = a.MeasureAll(type, {k1, k2});
  const auto second = b.MeasureAll(type, {k2, k1});  // order does not change a reading
  EXPECT_DOUBLE_EQ(first[0].energy_j, second[1].energy_j);
  EXPECT_DOUBLE_EQ(first[1].time_s, second[0].time_s);
  EXPECT_EQ(a.Measurements(), 2);
  EXPECT_DOUBLE_EQ(a.GpuSeconds(), 10.0 + 2 * 12.0);
}

}  // namespace
}  // namespace kareus::measure
