// SPDX-License-Identifier: Apache-2.0
#include "kareus/measure/store.h"

#include <sqlite3.h>

#include <chrono>
#include <ctime>
#include <map>
#include <system_error>

#include "kareus/common/error.h"

namespace kareus::measure {
namespace internal {
namespace {

constexpr const char* kCreateSchema = R"sql(
CREATE TABLE meta(
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE measurements(
  gpu               TEXT    NOT NULL,
  workload          TEXT    NOT NULL,
  partition         TEXT    NOT NULL,
  freq_mhz          INTEGER NOT NULL,
  sms               INTEGER NOT NULL,
  slot              TEXT    NOT NULL,
  time_s            REAL    NOT NULL,
  energy_j          REAL    NOT NULL,
  static_energy_j   REAL    NOT NULL,
  dynamic_energy_j  REAL    NOT NULL,
  realized_freq_mhz REAL    NOT NULL,
  gpu_seconds       REAL    NOT NULL,
  noise_free        INTEGER NOT NULL,
  measured_at       TEXT    NOT NULL,
  PRIMARY KEY (gpu, workload, partition, freq_mhz, sms, slot)
);
)sql";

std::string UtcNow() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// RAII prepared statement.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) {
      error_ = sqlite3_errmsg(db);
      stmt_ = nullptr;
    }
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  bool ok() const { return stmt_ != nullptr; }
  const std::string& error() const { return error_; }
  sqlite3_stmt* get() const { return stmt_; }
  void Bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  int Step() { return sqlite3_step(stmt_); }
  std::string Text(int col) const {
    const unsigned char* text = sqlite3_column_text(stmt_, col);
    return text == nullptr ? std::string() : reinterpret_cast<const char*>(text);
  }
  double Real(int col) const { return sqlite3_column_double(stmt_, col); }
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  std::string LastError() const { return sqlite3_errmsg(db_); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string error_;
};

[[noreturn]] void Fail(const std::filesystem::path& path, const std::string& reason) {
  throw EnvironmentError("measurement store " + path.string() + ": " + reason +
                         " (the file was left unchanged; pass another --store path)");
}

}  // namespace
}  // namespace internal

struct MeasurementStore::Handle {
  sqlite3* db = nullptr;
  ~Handle() {
    if (db != nullptr) sqlite3_close_v2(db);
  }
};

MeasurementStore::MeasurementStore(std::filesystem::path path, StoreIdentity identity,
                                   std::unique_ptr<Handle> handle)
    : path_(std::move(path)), identity_(std::move(identity)), handle_(std::move(handle)) {}

MeasurementStore::~MeasurementStore() = default;

std::unique_ptr<MeasurementStore> MeasurementStore::Open(const std::filesystem::path& path,
                                                         const StoreIdentity& identity) {
  using internal::Fail;
  using internal::Statement;
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  if (exists && !std::filesystem::is_regular_file(path, ec)) Fail(path, "not a regular file");
  const bool fresh = !exists || std::filesystem::file_size(path, ec) == 0;
  if (!exists && path.has_parent_path()) {
    std::filesystem::create_directories(path.parent_path(), ec);
  }

  auto handle = std::make_unique<Handle>();
  // An existing file is opened without SQLITE_OPEN_CREATE and nothing is written to it until
  // it has been recognized as a store of this identity.
  const int flags = SQLITE_OPEN_READWRITE | (exists ? 0 : SQLITE_OPEN_CREATE);
  if (sqlite3_open_v2(path.c_str(), &handle->db, flags, nullptr) != SQLITE_OK) {
    Fail(path, std::string("cannot open: ") +
                   (handle->db ? sqlite3_errmsg(handle->db) : "out of memory"));
  }
  sqlite3_busy_timeout(handle->db, 10000);
  sqlite3* db = handle->db;

  std::map<std::string, std::string> tables;
  {
    Statement list(db, "SELECT name, sql FROM sqlite_master WHERE type = 'table'");
    if (!list.ok()) Fail(path, "not a SQLite database, or corrupted: " + list.error());
    int rc;
    while ((rc = list.Step()) == SQLITE_ROW) tables[list.Text(0)] = list.Text(1);
    if (rc != SQLITE_DONE) Fail(path, "not a SQLite database, or corrupted: " + list.LastError());
  }
  if (!fresh && !tables.empty()) {
    if (!tables.contains("meta") || !tables.contains("measurements")) {
      Fail(path, "a SQLite database with another schema (no meta/measurements tables)");
    }
    std::map<std::string, std::string> meta;
    {
      Statement read(db, "SELECT key, value FROM meta");
      if (!read.ok()) Fail(path, "unreadable meta table: " + read.error());
      int rc;
      while ((rc = read.Step()) == SQLITE_ROW) meta[read.Text(0)] = read.Text(1);
      if (rc != SQLITE_DONE) Fail(path, "corrupted meta table: " + read.LastError());
    }
    if (meta["format"] != kFormat) {
      Fail(path, "meta.format = '" + meta["format"] + "', expected '" + kFormat + "'");
    }
    if (meta["schema_version"] != std::to_string(kSchemaVersion)) {
      Fail(path, "schema_version = " + meta["schema_version"] + ", this build reads " +
                     std::to_string(kSchemaVersion));
    }
    {
      Statement check(db, "PRAGMA quick_check");
      if (!check.ok() || check.Step() != SQLITE_ROW || check.Text(0) != "ok") {
        Fail(path, "integrity check failed (corrupted)");
      }
    }
    const auto mismatch = [&](const char* key, const std::string& expected) {
      if (meta[key] != expected) {
        Fail(path, std::string("belongs to another ") + key + ": store has '" + meta[key] +
                       "', this run needs '" + expected + "'");
      }
    };
    mismatch("gpu", identity.gpu);
    mismatch("workload_signature", identity.workload_signature);
    mismatch("backend", identity.backend);
  } else if (!tables.empty()) {
    Fail(path, "unexpected tables in an empty file");
  }

  // Recognized (or new): WAL journal so that each committed measurement survives a SIGKILL
  // and readers never block the writer; FULL sync so it also survives a power cut.
  char* message = nullptr;
  if (sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;", nullptr, nullptr,
                   &message) != SQLITE_OK) {
    const std::string reason = message ? message : "unknown";
    sqlite3_free(message);
    Fail(path, "cannot enable the WAL journal: " + reason);
  }
  if (tables.empty()) {
    std::string sql = std::string("BEGIN;") + internal::kCreateSchema;
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
      const std::string reason = message ? message : "unknown";
      sqlite3_free(message);
      Fail(path, "cannot create the schema: " + reason);
    }
    Statement put(db, "INSERT INTO meta(key, value) VALUES (?, ?)");
    const std::pair<std::string, std::string> rows[] = {
        {"format", kFormat},
        {"schema_version", std::to_string(kSchemaVersion)},
        {"gpu", identity.gpu},
        {"workload_signature", identity.workload_signature},
        {"backend", identity.backend},
        {"created_at", internal::UtcNow()},
    };
    for (const auto& [key, value] : rows) {
      sqlite3_reset(put.get());
      put.Bind(1, key);
      put.Bind(2, value);
      if (put.Step() != SQLITE_DONE) Fail(path, "cannot write meta: " + put.LastError());
    }
    if (sqlite3_exec(db, "COMMIT;", nullptr, nullptr, &message) != SQLITE_OK) {
      const std::string reason = message ? message : "unknown";
      sqlite3_free(message);
      Fail(path, "cannot commit the schema: " + reason);
    }
  }
  return std::unique_ptr<MeasurementStore>(
      new MeasurementStore(path, identity, std::move(handle)));
}

std::optional<Sample> MeasurementStore::Find(const std::string& partition,
                                             const PartitionKnobs& knobs) const {
  internal::Statement find(
      handle_->db,
      "SELECT time_s, energy_j, static_energy_j, dynamic_energy_j, realized_freq_mhz, "
      "gpu_seconds, noise_free FROM measurements WHERE gpu = ? AND workload = ? AND "
      "partition = ? AND freq_mhz = ? AND sms = ? AND slot = ?");
  if (!find.ok()) internal::Fail(path_, "query failed: " + find.error());
  find.Bind(1, identity_.gpu);
  find.Bind(2, identity_.workload_signature);
  find.Bind(3, partition);
  find.Bind(4, static_cast<int64_t>(knobs.freq_mhz));
  find.Bind(5, static_cast<int64_t>(knobs.sms));
  find.Bind(6, knobs.slot);
  const int rc = find.Step();
  if (rc == SQLITE_DONE) return std::nullopt;
  if (rc != SQLITE_ROW) internal::Fail(path_, "query failed: " + find.LastError());
  return Sample{
      .time_s = find.Real(0),
      .energy_j = find.Real(1),
      .static_energy_j = find.Real(2),
      .dynamic_energy_j = find.Real(3),
      .realized_freq_mhz = find.Real(4),
      .seconds = find.Real(5),
      .noise_free = find.Int(6) != 0,
  };
}

void MeasurementStore::Insert(const std::string& partition, const PartitionKnobs& knobs,
                              const Sample& sample) {
  internal::Statement insert(
      handle_->db,
      "INSERT INTO measurements(gpu, workload, partition, freq_mhz, sms, slot, time_s, "
      "energy_j, static_energy_j, dynamic_energy_j, realized_freq_mhz, gpu_seconds, "
      "noise_free, measured_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!insert.ok()) internal::Fail(path_, "insert failed: " + insert.error());
  insert.Bind(1, identity_.gpu);
  insert.Bind(2, identity_.workload_signature);
  insert.Bind(3, partition);
  insert.Bind(4, static_cast<int64_t>(knobs.freq_mhz));
  insert.Bind(5, static_cast<int64_t>(knobs.sms));
  insert.Bind(6, knobs.slot);
  insert.Bind(7, sample.time_s);
  insert.Bind(8, sample.energy_j);
  insert.Bind(9, sample.static_energy_j);
  insert.Bind(10, sample.dynamic_energy_j);
  insert.Bind(11, sample.realized_freq_mhz);
  insert.Bind(12, sample.seconds);
  insert.Bind(13, static_cast<int64_t>(sample.noise_free ? 1 : 0));
  insert.Bind(14, internal::UtcNow());
  // Autocommit: the row is durable when the statement completes.
  if (insert.Step() != SQLITE_DONE) internal::Fail(path_, "insert failed: " + insert.LastError());
}

int64_t MeasurementStore::Count() const {
  internal::Statement count(handle_->db, "SELECT COUNT(*) FROM measurements");
  if (!count.ok() || count.Step() != SQLITE_ROW) internal::Fail(path_, "count failed");
  return count.Int(0);
}

int64_t MeasurementStore::Count(const std::string& partition) const {
  internal::Statement count(handle_->db,
                            "SELECT COUNT(*) FROM measurements WHERE partition = ?");
  if (!count.ok()) internal::Fail(path_, "count failed: " + count.error());
  count.Bind(1, partition);
  if (count.Step() != SQLITE_ROW) internal::Fail(path_, "count failed");
  return count.Int(0);
}

std::vector<StoredMeasurement> MeasurementStore::All() const {
  internal::Statement all(
      handle_->db,
      "SELECT partition, freq_mhz, sms, slot, time_s, energy_j, static_energy_j, "
      "dynamic_energy_j, realized_freq_mhz, gpu_seconds, noise_free FROM measurements "
      "ORDER BY rowid");
  if (!all.ok()) internal::Fail(path_, "query failed: " + all.error());
  std::vector<StoredMeasurement> rows;
  while (all.Step() == SQLITE_ROW) {
    rows.push_back(StoredMeasurement{
        .partition = all.Text(0),
        .knobs = {.freq_mhz = static_cast<int>(all.Int(1)),
                  .sms = static_cast<int>(all.Int(2)),
                  .slot = all.Text(3)},
        .sample = {.time_s = all.Real(4),
                   .energy_j = all.Real(5),
                   .static_energy_j = all.Real(6),
                   .dynamic_energy_j = all.Real(7),
                   .realized_freq_mhz = all.Real(8),
                   .seconds = all.Real(9),
                   .noise_free = all.Int(10) != 0},
    });
  }
  return rows;
}

}  // namespace kareus::measure
