// SPDX-License-Identifier: Apache-2.0
// The measurement store's internal header (not installed): what the parts of MeasurementStore
// share, each part defined in its own file of src/measure/:
//   store_rows.cc     a row as stored: the columns read, its checks and checksum (ReadRow), the
//                     meta table's checksum, a row's name, the timestamps
//   store_files.cc    the store's files: can they be written, read-only URIs, another process
//                     using the store, the claims (OFD locks), what a failed open left behind
//   store_opening.cc  one open of a store file (Opening): reading, recognizing and creating the
//                     schema, the version 1 upgrade, the WAL journal, damaged rows set aside
//   store.cc          Open and OpenChecked (the steps of an open), the failures
//   store_lookup.cc   reading what is stored: Find, Count, All
//   store_measure.cc  storing: Insert, the claims, FindOrMeasure, RefuseToMeasure
// See include/kareus/measure/store.h for what the store promises.
#pragma once

#include <sqlite3.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kareus/measure/store.h"

namespace kareus::measure {
namespace internal {

constexpr const char* kColumns =
    "gpu, workload, partition, freq_mhz, sms, slot, time_s, energy_j, static_energy_j, "
    "dynamic_energy_j, realized_freq_mhz, gpu_seconds, noise_free, measured_at, checksum";
// What is read: a version 1 store (read without upgrading it) has no checksum column.
const char* ReadColumns(bool has_checksum);

std::string UtcNow();

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
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  bool ok() const { return stmt_ != nullptr; }
  const std::string& error() const { return error_; }
  sqlite3_stmt* get() const { return stmt_; }
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  void Bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void Bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  int Step() { return sqlite3_step(stmt_); }
  int Type(int col) const { return sqlite3_column_type(stmt_, col); }
  // The column's bytes exactly as stored (not cut at a NUL, not required to be UTF-8).
  std::string Text(int col) const {
    const unsigned char* text = sqlite3_column_text(stmt_, col);
    const int bytes = sqlite3_column_bytes(stmt_, col);
    return text == nullptr
               ? std::string()
               : std::string(reinterpret_cast<const char*>(text), static_cast<std::size_t>(bytes));
  }
  double Real(int col) const { return sqlite3_column_double(stmt_, col); }
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  std::string LastError() const { return sqlite3_errmsg(db_); }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string error_;
};

// Thrown inside Open: a store that cannot be opened. Open adds what was left behind.
struct OpenFailure {
  std::string reason;
};

[[noreturn]] void Fail(const std::filesystem::path&, const std::string& reason);

// A failure after the store was opened: what was committed before stays.
[[noreturn]] void FailInUse(const std::filesystem::path& path, const std::string& reason);

// FNV-1a, 64 bits, over a typed, length-prefixed serialization: any change of one byte of the
// serialized row changes the digest (each step is a bijection of the state), so a flipped bit
// in a value, a key or the stored checksum is always caught.
class Digest {
 public:
  void Text(std::string_view text) {
    Mix('t');
    Word(text.size());
    for (const char c : text) Mix(static_cast<unsigned char>(c));
  }
  void Int(int64_t value) {
    Mix('i');
    Word(static_cast<uint64_t>(value));
  }
  void Real(double value) {
    if (value == 0.0) value = 0.0;  // -0.0 comes back from SQLite as +0.0
    uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(bits));
    Mix('r');
    Word(bits);
  }
  int64_t value() const { return static_cast<int64_t>(state_); }

 private:
  void Mix(unsigned char byte) {
    state_ ^= byte;
    state_ *= 0x100000001b3ULL;
  }
  void Word(uint64_t word) {
    for (int k = 0; k < 8; ++k) Mix(static_cast<unsigned char>(word >> (8 * k)));
  }
  uint64_t state_ = 0xcbf29ce484222325ULL;
};

// One row of the measurements table as stored.
struct Row {
  int64_t rowid = 0;
  std::string gpu, workload, partition, slot, measured_at;
  int64_t freq_mhz = 0, sms = 0;
  double values[6] = {};  // time_s .. gpu_seconds
  int64_t noise_free = 0;
  std::optional<int64_t> checksum;

  int64_t Checksum() const {
    Digest d;
    d.Text(gpu);
    d.Text(workload);
    d.Text(partition);
    d.Int(freq_mhz);
    d.Int(sms);
    d.Text(slot);
    for (const double v : values) d.Real(v);
    d.Int(noise_free);
    d.Text(measured_at);
    return d.value();
  }
  Sample ToSample() const {
    return Sample{.time_s = values[0],
                  .energy_j = values[1],
                  .static_energy_j = values[2],
                  .dynamic_energy_j = values[3],
                  .realized_freq_mhz = values[4],
                  .seconds = values[5],
                  .noise_free = noise_free != 0};
  }
  PartitionKnobs Knobs() const {
    return {.freq_mhz = static_cast<int>(std::clamp<int64_t>(freq_mhz, INT32_MIN, INT32_MAX)),
            .sms = static_cast<int>(std::clamp<int64_t>(sms, INT32_MIN, INT32_MAX)),
            .slot = slot};
  }
};

std::string RowName(const std::string& partition, const PartitionKnobs& knobs);
std::string RowName(const Row& row);

// Reads the row whose rowid is column `first` and whose columns (kColumns) follow. Returns why
// the row cannot be trusted, or nullopt: a text that is not UTF-8 text, knobs out of range, a
// value that is not a measurement (a time that is not positive, a negative or non-finite
// energy, energies that do not add up, a text where a number belongs) or, with `verify`, a
// checksum that does not match.
std::optional<std::string> ReadRow(const Statement& st, int first, bool verify, Row* row);

// The meta table's checksum: over every (key, value) but its own row, in key order.
std::string MetaChecksum(const std::map<std::string, std::string>& meta);

// Claims live on bytes [2^62, 2^62 + 2^61) of the store file: far above SQLite's lock bytes
// (at 1 GiB), so OFD locks there never meet SQLite's own POSIX locks.
off_t ClaimOffset(const std::string& partition, const PartitionKnobs& knobs);

// Why the existing store at `path` cannot be written by this process, or "" when it can.
// SQLite writes its -wal and -shm files beside the store, so the folder counts too (unless
// both exist and can be written).
std::string WhyNotWritable(const std::filesystem::path& path);

// A read-only URI for `path`: mode=ro, and immutable when there is no WAL beside it to read (a
// WAL-mode store opened read-only otherwise creates -wal and -shm files, or cannot be opened
// at all on a read-only mount).
std::string ReadOnlyUri(const std::filesystem::path& path, bool immutable);

// True when another process has the SQLite store at `path` open: its connection holds a read
// lock on the -shm file's DMS byte (WAL mode) or a lock on the main file's lock bytes.
bool InUseByAnotherProcess(const std::filesystem::path& path);

// Locks one byte with an OFD lock; false when another open file (process) holds it and
// `wait` is false.
bool LockByte(int fd, off_t offset, bool wait, const std::filesystem::path& path);
void UnlockByte(int fd, off_t offset);

// Which of a store's files exist.
struct Files {
  bool main = false, wal = false, shm = false, journal = false;
  static Files Of(const std::filesystem::path& path) {
    std::error_code ec;
    const auto exists = [&](const char* suffix) {
      return std::filesystem::exists(path.string() + suffix, ec);
    };
    return {exists(""), exists("-wal"), exists("-shm"), exists("-journal")};
  }
};

// What a failed Open left behind, in words; removes a store it created that holds nothing.
// `changes` are what was committed to an existing store before the failure (an upgrade, rows
// set aside, the WAL switch), each in words.
std::string WhatWasLeft(const std::filesystem::path& path, const Files& before, bool created,
                        const std::vector<std::string>& changes);

using DamagedList = std::vector<std::pair<int64_t, std::string>>;  // rowid, "row (...): why"

// One open of a store file: the SQLite connection and what has been learned of the file, with
// the steps MeasurementStore::OpenChecked takes. Every failure is an OpenFailure (Fail).
class Opening {
 public:
  // `changes` collects, in words, what is committed to an existing store (for the message of a
  // later failure).
  Opening(sqlite3* db, const std::filesystem::path& path, std::vector<std::string>* changes)
      : db_(db), path_(path), changes_(changes) {}

  int schema_version() const { return schema_version_; }
  // The last ReadTables found nothing at all in the schema (an index, view or trigger without
  // tables is someone else's database, not an empty one).
  bool schema_empty() const { return schema_empty_; }

  std::map<std::string, std::string> ReadTables();
  // SQLite's own check of the file's structure (PRAGMA integrity_check).
  void IntegrityCheck();
  std::map<std::string, std::string> ReadMeta();
  // Recognizes the file as a store and returns whose it is; with `expected`, it must be that
  // identity. Reads only.
  StoreIdentity Validate(const std::map<std::string, std::string>& tables,
                         const StoreIdentity* expected);
  // Runs `sql`; on failure rolls back any transaction and fails with `what`.
  void Exec(const char* sql, const char* what);
  // PRAGMA journal_mode=WAL, retried while another connection is busy.
  void EnableWal();
  // The tables and meta rows of a new store, inside the caller's write transaction, committed.
  void Create(const StoreIdentity& identity);
  // Version 1 upgraded in place, in one transaction; false when another process upgraded it
  // meanwhile.
  bool UpgradeFromVersion1();
  // Every row read and checked; those that fail, in rowid order.
  DamagedList DamagedRows(bool with_checksums);
  [[noreturn]] void RefuseDamaged(const DamagedList& damaged);
  // Moves the damaged rows to set_aside in one transaction; `damaged` becomes what was moved.
  void SetAside(DamagedList* damaged);

 private:
  // The measurements table's columns as PRAGMA table_info reports them must be this schema's.
  void CheckColumns();
  void PutMeta(const std::map<std::string, std::string>& rows);

  sqlite3* db_;
  const std::filesystem::path& path_;
  std::vector<std::string>* changes_;
  bool schema_empty_ = true;
  int schema_version_ = MeasurementStore::kSchemaVersion;
};

}  // namespace internal

struct MeasurementStore::Handle {
  sqlite3* db = nullptr;
  // Our own descriptor of the store file for the claims. Closed only after SQLite: closing any
  // descriptor of a file drops the process's POSIX locks on it, SQLite's included. -1 when the
  // store is read-only (nothing is measured into it, so nothing is claimed).
  int claim_fd = -1;
  ~Handle() {
    if (db != nullptr) sqlite3_close_v2(db);
    if (claim_fd >= 0) close(claim_fd);
  }
};

}  // namespace kareus::measure
