// SPDX-License-Identifier: Apache-2.0
// One open of a store file (Opening): reading, recognizing and creating the schema, the version 1
// upgrade, the WAL journal, damaged rows set aside (part of MeasurementStore; see
// store_internal.h).
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "kareus/common/error.h"
#include "kareus/common/io.h"
#include "store_internal.h"

namespace kareus::measure::internal {
namespace {

// Version 2's tables. A version 1 store gains the checksum column (ALTER TABLE appends it
// last, as here) and the set_aside table when it is upgraded.
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
  checksum          INTEGER,
  PRIMARY KEY (gpu, workload, partition, freq_mhz, sms, slot)
);
)sql";

// Rows that failed their checks, moved here as they were (no types, no constraints: whatever
// the damaged row held fits), with when and why.
constexpr const char* kCreateSetAside = R"sql(
CREATE TABLE IF NOT EXISTS set_aside(
  set_aside_at, reason, gpu, workload, partition, freq_mhz, sms, slot, time_s, energy_j,
  static_energy_j, dynamic_energy_j, realized_freq_mhz, gpu_seconds, noise_free, measured_at,
  checksum
);
)sql";

// The measurements table as PRAGMA table_info must report it: name, declared type, NOT NULL,
// position in the primary key.
struct ColumnSpec {
  const char* name;
  const char* type;
  int not_null;
  int pk;
};
constexpr ColumnSpec kMeasurementColumns[] = {
    {"gpu", "TEXT", 1, 1},
    {"workload", "TEXT", 1, 2},
    {"partition", "TEXT", 1, 3},
    {"freq_mhz", "INTEGER", 1, 4},
    {"sms", "INTEGER", 1, 5},
    {"slot", "TEXT", 1, 6},
    {"time_s", "REAL", 1, 0},
    {"energy_j", "REAL", 1, 0},
    {"static_energy_j", "REAL", 1, 0},
    {"dynamic_energy_j", "REAL", 1, 0},
    {"realized_freq_mhz", "REAL", 1, 0},
    {"gpu_seconds", "REAL", 1, 0},
    {"noise_free", "INTEGER", 1, 0},
    {"measured_at", "TEXT", 1, 0},
    {"checksum", "INTEGER", 0, 0},
};
constexpr int kV1Columns = 14;  // all but the checksum

}  // namespace

std::map<std::string, std::string> Opening::ReadTables() {
  std::map<std::string, std::string> tables;
  Statement list(db_, "SELECT type, name, sql FROM sqlite_master");
  if (!list.ok()) Fail(path_, "not a SQLite database, or corrupted: " + list.error());
  int step;
  schema_empty_ = true;
  while ((step = list.Step()) == SQLITE_ROW) {
    schema_empty_ = false;
    if (list.Text(0) == "table") tables[list.Text(1)] = list.Text(2);
  }
  if (step != SQLITE_DONE) {
    Fail(path_, "not a SQLite database, or corrupted: " + list.LastError());
  }
  return tables;
}

// SQLite's own check of the file's structure: pages, records and indexes (an index entry
// that does not match its row would hide a measurement from a lookup).
void Opening::IntegrityCheck() {
  Statement check(db_, "PRAGMA integrity_check(3)");
  if (!check.ok()) Fail(path_, "integrity check failed (corrupted): " + check.error());
  std::vector<std::string> problems;
  int step;
  while ((step = check.Step()) == SQLITE_ROW) {
    if (check.Text(0) != "ok") problems.push_back(ShownValue(check.Text(0), 200));
  }
  if (step != SQLITE_DONE) {
    Fail(path_, "integrity check failed (corrupted): " + check.LastError());
  }
  if (!problems.empty()) {
    Fail(path_, "integrity check failed (corrupted): " + JoinNames(problems));
  }
}

std::map<std::string, std::string> Opening::ReadMeta() {
  std::map<std::string, std::string> meta;
  Statement read(db_, "SELECT key, value FROM meta");
  if (!read.ok()) Fail(path_, "unreadable meta table: " + read.error());
  int step;
  while ((step = read.Step()) == SQLITE_ROW) meta[read.Text(0)] = read.Text(1);
  if (step != SQLITE_DONE) Fail(path_, "corrupted meta table: " + read.LastError());
  return meta;
}

// Recognizes the file as a store (tables, format, version, integrity, meta checksum,
// columns) and returns whose it is; with `expected`, it must be that identity. Reads only.
StoreIdentity Opening::Validate(const std::map<std::string, std::string>& tables,
                                const StoreIdentity* expected) {
  if (!tables.contains("meta") || !tables.contains("measurements")) {
    Fail(path_, "a SQLite database with another schema (no meta/measurements tables)");
  }
  std::map<std::string, std::string> meta = ReadMeta();
  const char* format = MeasurementStore::kFormat;
  if (meta["format"] != format) {
    Fail(path_, "meta.format = '" + ShownValue(meta["format"]) + "', expected '" + format + "'");
  }
  const std::string current = std::to_string(MeasurementStore::kSchemaVersion);
  if (meta["schema_version"] == "1") {
    schema_version_ = 1;
  } else if (meta["schema_version"] == current) {
    schema_version_ = MeasurementStore::kSchemaVersion;
  } else {
    Fail(path_, "schema_version = " + ShownValue(meta["schema_version"]) + ", this build reads " +
                    current + " (and 1)");
  }
  IntegrityCheck();
  if (schema_version_ >= 2) {
    if (!meta.contains("checksum") || meta["checksum"] != MetaChecksum(meta)) {
      Fail(path_,
           "the meta table fails its checksum (damaged or hand-edited: which GPU, "
           "workload and backend the store belongs to cannot be trusted)");
    }
    if (!tables.contains("set_aside")) Fail(path_, "the set_aside table is missing (damaged)");
  }
  CheckColumns();
  StoreIdentity stored{.gpu = meta["gpu"],
                       .workload_signature = meta["workload_signature"],
                       .backend = meta["backend"]};
  if (expected != nullptr) {
    const auto mismatch = [&](const char* key, const std::string& have, const std::string& needed) {
      if (have != needed) {
        Fail(path_, std::string("belongs to another ") + key + ": store has '" + ShownValue(have) +
                        "', this run needs '" + ShownValue(needed) + "'");
      }
    };
    mismatch("gpu", stored.gpu, expected->gpu);
    mismatch("workload_signature", stored.workload_signature, expected->workload_signature);
    mismatch("backend", stored.backend, expected->backend);
  }
  return stored;
}

// Runs `sql`; on failure rolls back any transaction and fails with `what`.
void Opening::Exec(const char* sql, const char* what) {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    const std::string reason = message ? message : sqlite3_errmsg(db_);
    sqlite3_free(message);
    sqlite3_exec(db_, "ROLLBACK;", nullptr, nullptr, nullptr);
    Fail(path_, std::string(what) + ": " + reason);
  }
}

// PRAGMA journal_mode=WAL needs the database to itself for a moment, and SQLite answers
// SQLITE_BUSY at once (its busy handler is not consulted: waiting could deadlock) or leaves
// the old mode when another connection is inside a transaction, e.g. a second process that
// opens the same new store at the same time (seen 6 times in 40 runs of the two-process
// store test under CPU load). Retried for as long as the busy timeout, checking the mode
// SQLite reports; an answer other than "wal" is retried for 5 s only (a file system without
// WAL support answers so every time).
void Opening::EnableWal() {
  const auto start = std::chrono::steady_clock::now();
  std::string reason;
  bool was_wal = false;
  if (Statement mode(db_, "PRAGMA journal_mode"); mode.ok() && mode.Step() == SQLITE_ROW) {
    was_wal = mode.Text(0) == "wal";
  }
  for (int attempt = 0;; ++attempt) {
    Statement pragma(db_, "PRAGMA journal_mode=WAL");
    const int step = pragma.ok() ? pragma.Step() : SQLITE_ERROR;
    if (step == SQLITE_ROW && pragma.Text(0) == "wal") {
      if (!was_wal) changes_->push_back("switched to the WAL journal");
      return;
    }
    reason = step == SQLITE_ROW ? "the journal stayed '" + pragma.Text(0) + "'"
                                : (pragma.ok() ? pragma.LastError() : pragma.error());
    const int code = sqlite3_errcode(db_) & 0xff;
    const bool busy = step != SQLITE_ROW && (code == SQLITE_BUSY || code == SQLITE_LOCKED);
    const auto limit = busy ? std::chrono::seconds(60) : std::chrono::seconds(5);
    if ((!busy && step != SQLITE_ROW) || std::chrono::steady_clock::now() - start >= limit) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(5 * (attempt + 1), 100)));
  }
  Fail(path_, "cannot enable the WAL journal: " + reason);
}

// The tables and meta rows of a new store, inside the caller's write transaction, committed.
void Opening::Create(const StoreIdentity& identity) {
  Exec(kCreateSchema, "cannot create the schema");
  Exec(kCreateSetAside, "cannot create the schema");
  std::map<std::string, std::string> meta = {
      {"format", MeasurementStore::kFormat},
      {"schema_version", std::to_string(MeasurementStore::kSchemaVersion)},
      {"gpu", identity.gpu},
      {"workload_signature", identity.workload_signature},
      {"backend", identity.backend},
      {"created_at", UtcNow()},
  };
  meta["checksum"] = MetaChecksum(meta);
  PutMeta(meta);
  Exec("COMMIT;", "cannot commit the schema");
  schema_version_ = MeasurementStore::kSchemaVersion;
}

// Version 1 (no checksums) upgraded in place, in one transaction: the column, the table, each
// row's checksum from the row as it is (a row that fails the value checks gets none, and is
// set aside afterwards). False when another process upgraded it meanwhile (looked at again
// under the lock): the caller checks that version 2 as any other.
bool Opening::UpgradeFromVersion1() {
  Exec("BEGIN IMMEDIATE;", "cannot lock the store to upgrade it");
  std::map<std::string, std::string> meta = ReadMeta();
  const bool upgrade_here = meta["schema_version"] == "1";
  if (upgrade_here) {
    Exec("ALTER TABLE measurements ADD COLUMN checksum INTEGER;", "cannot upgrade the store");
    Exec(kCreateSetAside, "cannot upgrade the store");
    const auto fail = [&](const std::string& reason) {
      Exec("ROLLBACK;", "cannot unlock the store");
      Fail(path_, "cannot upgrade the store: " + reason);
    };
    Statement all(db_,
                  fmt::format("SELECT rowid, {} FROM measurements", ReadColumns(false)).c_str());
    Statement update(db_, "UPDATE measurements SET checksum = ? WHERE rowid = ?");
    if (!all.ok() || !update.ok()) fail(all.ok() ? update.error() : all.error());
    std::vector<std::pair<int64_t, int64_t>> checksums;
    int step;
    while ((step = all.Step()) == SQLITE_ROW) {
      Row row;
      if (!ReadRow(all, 0, /*verify=*/false, &row))
        checksums.emplace_back(row.rowid, row.Checksum());
    }
    if (step != SQLITE_DONE) fail(all.LastError());
    for (const auto& [rowid, checksum] : checksums) {
      update.Reset();
      update.Bind(1, checksum);
      update.Bind(2, rowid);
      if (update.Step() != SQLITE_DONE) fail(update.LastError());
    }
    meta["schema_version"] = std::to_string(MeasurementStore::kSchemaVersion);
    meta["upgraded_at"] = UtcNow();
    meta["checksum"] = MetaChecksum(meta);
    PutMeta(meta);
  }
  Exec("COMMIT;", "cannot commit the upgrade");
  if (upgrade_here) changes_->push_back("upgraded to schema version 2");
  schema_version_ = MeasurementStore::kSchemaVersion;
  return upgrade_here;
}

// Every row read and checked (values, and the checksum when the store has them); those that
// fail, in rowid order.
DamagedList Opening::DamagedRows(bool with_checksums) {
  DamagedList damaged;
  Statement all(db_, fmt::format("SELECT rowid, {} FROM measurements ORDER BY rowid",
                                 ReadColumns(with_checksums))
                         .c_str());
  if (!all.ok()) Fail(path_, "unreadable measurements table: " + all.error());
  int step;
  while ((step = all.Step()) == SQLITE_ROW) {
    Row row;
    if (auto why = ReadRow(all, 0, with_checksums, &row)) {
      damaged.emplace_back(row.rowid, RowName(row) + ": " + *why);
    }
  }
  if (step != SQLITE_DONE) Fail(path_, "unreadable measurements table: " + all.LastError());
  return damaged;
}

[[noreturn]] void Opening::RefuseDamaged(const DamagedList& damaged) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < damaged.size() && i < 3; ++i) names.push_back(damaged[i].second);
  Fail(path_,
       fmt::format("{} (a damaged or hand-edited store): {}{}; told not to measure "
                   "them again",
                   damaged.size() == 1 ? std::string("1 row fails its checks")
                                       : fmt::format("{} rows fail their checks", damaged.size()),
                   JoinNames(names), damaged.size() > 3 ? ", ..." : ""));
}

// Moves the damaged rows to set_aside in one transaction; under the write lock they are
// looked at again (another process may have set them aside already), and `damaged` becomes
// what was moved here.
void Opening::SetAside(DamagedList* damaged) {
  Exec("BEGIN IMMEDIATE;", "cannot lock the store to set damaged rows aside");
  *damaged = DamagedRows(/*with_checksums=*/true);
  Statement move(db_, fmt::format("INSERT INTO set_aside SELECT ?, ?, {} FROM measurements "
                                  "WHERE rowid = ?",
                                  kColumns)
                          .c_str());
  Statement remove(db_, "DELETE FROM measurements WHERE rowid = ?");
  const std::string now = UtcNow();
  for (const auto& [rowid, why] : *damaged) {
    move.Reset();
    move.Bind(1, now);
    move.Bind(2, why);
    move.Bind(3, rowid);
    remove.Reset();
    remove.Bind(1, rowid);
    const bool moved = move.ok() && move.Step() == SQLITE_DONE;
    const std::string move_error = move.ok() ? move.LastError() : move.error();
    if (!moved || !remove.ok() || remove.Step() != SQLITE_DONE) {
      const std::string reason =
          !moved ? move_error : (remove.ok() ? remove.LastError() : remove.error());
      Exec("ROLLBACK;", "cannot unlock the store");
      Fail(path_, "cannot set a damaged row aside: " + reason);
    }
  }
  Exec("COMMIT;", "cannot commit the rows set aside");
  if (!damaged->empty()) {
    changes_->push_back(damaged->size() == 1
                            ? std::string("1 damaged row moved to set_aside")
                            : fmt::format("{} damaged rows moved to set_aside", damaged->size()));
  }
}

// The measurements table's columns as PRAGMA table_info reports them must be this schema's.
void Opening::CheckColumns() {
  Statement info(db_, "PRAGMA table_info(measurements)");
  if (!info.ok()) Fail(path_, "unreadable measurements table: " + info.error());
  const int all_columns = static_cast<int>(std::size(kMeasurementColumns));
  // A version 1 store may be upgraded by another process between our reads: its checksum
  // column is then there too.
  int expected = schema_version_ == 1 ? kV1Columns : all_columns;
  int n = 0;
  while (info.Step() == SQLITE_ROW) {
    if (schema_version_ == 1 && n == kV1Columns) expected = all_columns;
    const ColumnSpec* spec = n < expected ? &kMeasurementColumns[n] : nullptr;
    if (spec == nullptr || info.Text(1) != spec->name || info.Text(2) != spec->type ||
        info.Int(3) != spec->not_null || info.Int(5) != spec->pk) {
      Fail(path_, fmt::format("the measurements table's column {} ({} {}) is not this "
                              "schema's (another schema, or a damaged one)",
                              n, ShownValue(info.Text(1), 40), ShownValue(info.Text(2), 20)));
    }
    ++n;
  }
  if (n != expected) {
    Fail(path_, fmt::format("the measurements table has {} columns, schema {} has {}", n,
                            schema_version_, expected));
  }
}

void Opening::PutMeta(const std::map<std::string, std::string>& rows) {
  Statement put(db_, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)");
  for (const auto& [key, value] : rows) {
    put.Reset();
    put.Bind(1, key);
    put.Bind(2, value);
    if (put.Step() != SQLITE_DONE) {
      const std::string reason = put.LastError();
      Exec("ROLLBACK;", "cannot unlock the store");
      Fail(path_, "cannot write meta: " + reason);
    }
  }
}

sqlite3* db_;

}  // namespace kareus::measure::internal
