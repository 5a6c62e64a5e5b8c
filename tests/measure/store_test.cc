// SPDX-License-Identifier: Apache-2.0
#include "kareus/measure/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

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
  StoreIdentity identity_{.gpu = "A100-SXM4-40GB", .workload_signature = "sig-1",
                          .backend = "emulator(test)"};
};

Sample MakeSample(double t) {
  return Sample{.time_s = t, .energy_j = 2 * t, .static_energy_j = 0.5 * t,
                .dynamic_energy_j = 1.5 * t, .realized_freq_mhz = 1300, .seconds = 12, .gpus = 1,
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
  // A duplicate insert is refused, not silently replaced.
  EXPECT_THROW(store->Insert("fwd_mlp", {.freq_mhz = 1410, .sms = 6, .slot = "norm_0"},
                             MakeSample(9.0)),
               EnvironmentError);
  EXPECT_DOUBLE_EQ(store->Find("fwd_mlp", {.freq_mhz = 1410, .sms = 6, .slot = "norm_0"})->time_s,
                   3e-3);
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
  sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &stmt,
                     nullptr);
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
  for (StoreIdentity other : {StoreIdentity{identity_.gpu, "sig-2", identity_.backend},
                              StoreIdentity{"H100-SXM", identity_.workload_signature,
                                            identity_.backend},
                              StoreIdentity{identity_.gpu, identity_.workload_signature,
                                            "emulator(other)"}}) {
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
