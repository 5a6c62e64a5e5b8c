// SPDX-License-Identifier: Apache-2.0
#include "kareus/measure/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "kareus/common/context.h"
#include "kareus/common/error.h"
#include "kareus/common/io.h"

namespace kareus::measure {
namespace internal {
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

constexpr const char* kColumns =
    "gpu, workload, partition, freq_mhz, sms, slot, time_s, energy_j, static_energy_j, "
    "dynamic_energy_j, realized_freq_mhz, gpu_seconds, noise_free, measured_at, checksum";
// What is read: a version 1 store (read without upgrading it) has no checksum column.
const char* ReadColumns(bool has_checksum) {
  return has_checksum ? kColumns
                      : "gpu, workload, partition, freq_mhz, sms, slot, time_s, energy_j, "
                        "static_energy_j, dynamic_energy_j, realized_freq_mhz, gpu_seconds, "
                        "noise_free, measured_at, NULL AS checksum";
}

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

const char* const kValueNames[] = {"time_s",           "energy_j",          "static_energy_j",
                                   "dynamic_energy_j", "realized_freq_mhz", "gpu_seconds"};

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

[[noreturn]] void Fail(const std::filesystem::path&, const std::string& reason) {
  throw OpenFailure{reason};
}

// A failure after the store was opened: what was committed before stays.
[[noreturn]] void FailInUse(const std::filesystem::path& path, const std::string& reason) {
  throw EnvironmentError("measurement store " + path.string() + ": " + reason +
                         " (measurements committed before this are kept)");
}

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

std::string RowName(const std::string& partition, const PartitionKnobs& knobs) {
  return fmt::format("row ({}, {} MHz, {} SMs, {})", ShownValue(partition, 60), knobs.freq_mhz,
                     knobs.sms, ShownValue(knobs.slot, 60));
}

std::string RowName(const Row& row) { return RowName(row.partition, row.Knobs()); }

// Reads the row whose rowid is column `first` and whose columns (kColumns) follow. Returns why
// the row cannot be trusted, or nullopt: a text that is not UTF-8 text, knobs out of range, a
// value that is not a measurement (a time that is not positive, a negative or non-finite
// energy, energies that do not add up, a text where a number belongs) or, with `verify`, a
// checksum that does not match.
std::optional<std::string> ReadRow(const Statement& st, int first, bool verify, Row* row) {
  row->rowid = st.Int(first);
  const int c = first + 1;
  std::string* const texts[] = {&row->gpu, &row->workload, &row->partition};
  static const char* const kTextNames[] = {"gpu", "workload", "partition"};
  for (int k = 0; k < 3; ++k) *texts[k] = st.Text(c + k);
  row->slot = st.Text(c + 5);
  row->measured_at = st.Text(c + 13);
  row->freq_mhz = st.Int(c + 3);
  row->sms = st.Int(c + 4);
  for (int k = 0; k < 3; ++k) {
    if (st.Type(c + k) != SQLITE_TEXT || !IsValidUtf8(*texts[k])) {
      return std::string(kTextNames[k]) + " is not UTF-8 text";
    }
  }
  if (st.Type(c + 5) != SQLITE_TEXT || !IsValidUtf8(row->slot)) return "slot is not UTF-8 text";
  if (st.Type(c + 3) != SQLITE_INTEGER || row->freq_mhz <= 0 || row->freq_mhz > INT32_MAX) {
    return "freq_mhz is not a clock in MHz";
  }
  if (st.Type(c + 4) != SQLITE_INTEGER || row->sms <= 0 || row->sms > INT32_MAX) {
    return "sms is not a count of SMs";
  }
  for (int k = 0; k < 6; ++k) {
    const int type = st.Type(c + 6 + k);
    if (type != SQLITE_FLOAT && type != SQLITE_INTEGER) {
      return std::string(kValueNames[k]) + " is not a number";
    }
    const double v = st.Real(c + 6 + k);
    row->values[k] = v;
    if (!std::isfinite(v) || (k != 3 && v < 0.0) || (k == 0 && v <= 0)) {
      return fmt::format("{} = {}: must be {}", kValueNames[k], v,
                         k == 0   ? "a finite time > 0"
                         : k == 3 ? "finite"
                                  : "finite and >= 0");
    }
  }
  const double sum = row->values[2] + row->values[3];
  if (std::abs(row->values[1] - sum) > 1e-6 * std::max(1.0, std::abs(row->values[1]))) {
    return fmt::format("energy_j = {} but static_energy_j + dynamic_energy_j = {}", row->values[1],
                       sum);
  }
  row->noise_free = st.Int(c + 12);
  if (st.Type(c + 12) != SQLITE_INTEGER || (row->noise_free != 0 && row->noise_free != 1)) {
    return "noise_free must be 0 or 1";
  }
  if (st.Type(c + 13) != SQLITE_TEXT || !IsValidUtf8(row->measured_at)) {
    return "measured_at is not UTF-8 text";
  }
  row->checksum.reset();
  if (st.Type(c + 14) == SQLITE_INTEGER) row->checksum = st.Int(c + 14);
  if (verify && row->checksum != row->Checksum()) {
    return row->checksum ? "its checksum does not match its key and values"
                         : "its checksum is missing";
  }
  return std::nullopt;
}

// The meta table's checksum: over every (key, value) but its own row, in key order.
std::string MetaChecksum(const std::map<std::string, std::string>& meta) {
  Digest d;
  for (const auto& [key, value] : meta) {
    if (key == "checksum") continue;
    d.Text(key);
    d.Text(value);
  }
  return fmt::format("{:016x}", static_cast<uint64_t>(d.value()));
}

// Claims live on bytes [2^62, 2^62 + 2^61) of the store file: far above SQLite's lock bytes
// (at 1 GiB), so OFD locks there never meet SQLite's own POSIX locks.
off_t ClaimOffset(const std::string& partition, const PartitionKnobs& knobs) {
  const std::string key = partition + "|" + std::to_string(knobs.freq_mhz) + "|" +
                          std::to_string(knobs.sms) + "|" + knobs.slot;
  const uint64_t hash = DeriveSeed(HashString(key.c_str()), 0x6b617265757321ULL);
  return static_cast<off_t>((uint64_t{1} << 62) + (hash & ((uint64_t{1} << 61) - 1)));
}

// Why the existing store at `path` cannot be written by this process, or "" when it can.
// SQLite writes its -wal and -shm files beside the store, so the folder counts too (unless
// both exist and can be written).
std::string WhyNotWritable(const std::filesystem::path& path) {
  const auto why = [](int error) {
    return error == EROFS ? std::string("on a read-only file system")
                          : std::string("not writable by this user (") + std::strerror(error) + ")";
  };
  if (::access(path.c_str(), W_OK) != 0) return why(errno);
  const std::string wal = path.string() + "-wal", shm = path.string() + "-shm";
  if (::access(wal.c_str(), W_OK) == 0 && ::access(shm.c_str(), W_OK) == 0) return "";
  const std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : ".";
  if (::access(folder.c_str(), W_OK) != 0) {
    return "in a folder this process cannot write (" + std::string(std::strerror(errno)) +
           "; SQLite's -wal and -shm files go beside the store)";
  }
  return "";
}

// A read-only URI for `path`: mode=ro, and immutable when there is no WAL beside it to read (a
// WAL-mode store opened read-only otherwise creates -wal and -shm files, or cannot be opened
// at all on a read-only mount).
std::string ReadOnlyUri(const std::filesystem::path& path, bool immutable) {
  std::string uri = "file:";
  for (const unsigned char c : std::filesystem::absolute(path).string()) {
    if (c == '%' || c == '?' || c == '#' || c <= 0x20 || c >= 0x7F) {
      uri += fmt::format("%{:02X}", c);
    } else {
      uri += static_cast<char>(c);
    }
  }
  return uri + (immutable ? "?mode=ro&immutable=1" : "?mode=ro");
}

// True when another process has the SQLite store at `path` open: its connection holds a read
// lock on the -shm file's DMS byte (WAL mode) or a lock on the main file's lock bytes.
bool InUseByAnotherProcess(const std::filesystem::path& path) {
  const auto locked = [](const std::string& file, off_t start, off_t length) {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct flock probe {};
    probe.l_type = F_WRLCK;
    probe.l_whence = SEEK_SET;
    probe.l_start = start;
    probe.l_len = length;
    const bool held = fcntl(fd, F_GETLK, &probe) == 0 && probe.l_type != F_UNLCK;
    close(fd);
    return held;
  };
  return locked(path.string() + "-shm", 120, 16) || locked(path.string(), 0x40000000, 512 + 2);
}

// Locks one byte with an OFD lock; false when another open file (process) holds it and
// `wait` is false.
bool LockByte(int fd, off_t offset, bool wait, const std::filesystem::path& path) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = offset;
  lock.l_len = 1;
  while (true) {
    if (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &lock) == 0) return true;
    if (errno == EINTR) continue;
    if (!wait && (errno == EAGAIN || errno == EACCES)) return false;
    FailInUse(path, std::string("cannot claim a configuration (fcntl): ") + std::strerror(errno));
  }
}

void UnlockByte(int fd, off_t offset) {
  struct flock lock {};
  lock.l_type = F_UNLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = offset;
  lock.l_len = 1;
  fcntl(fd, F_OFD_SETLK, &lock);
}

}  // namespace
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

MeasurementStore::MeasurementStore(std::filesystem::path path, StoreIdentity identity,
                                   std::unique_ptr<Handle> handle)
    : path_(std::move(path)), identity_(std::move(identity)), handle_(std::move(handle)) {}

MeasurementStore::~MeasurementStore() = default;

namespace internal {
namespace {

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

// True when the SQLite file at `path` is empty or a database without any schema (read without
// locks or side files).
bool HoldsNoSchema(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) == 0 && !ec) return true;
  sqlite3* db = nullptr;
  bool empty = false;
  if (sqlite3_open_v2(ReadOnlyUri(path, /*immutable=*/true).c_str(), &db,
                      SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr) == SQLITE_OK) {
    Statement count(db, "SELECT COUNT(*) FROM sqlite_master");
    empty = count.ok() && count.Step() == SQLITE_ROW && count.Int(0) == 0;
  }
  sqlite3_close_v2(db);
  return empty;
}

// What a failed Open left behind, in words; removes a store it created that holds nothing.
// `changes` are what was committed to an existing store before the failure (an upgrade, rows
// set aside, the WAL switch), each in words.
std::string WhatWasLeft(const std::filesystem::path& path, const Files& before, bool created,
                        const std::vector<std::string>& changes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const Files now = Files::Of(path);
  std::vector<std::string> side_files;
  if (now.wal && !before.wal) side_files.push_back(path.filename().string() + "-wal");
  if (now.shm && !before.shm) side_files.push_back(path.filename().string() + "-shm");
  if (now.journal && !before.journal) side_files.push_back(path.filename().string() + "-journal");
  if (!created) {
    // Another process may have created the file meanwhile: not ours to judge or remove.
    if (!before.main && !now.main) return "nothing was created";
    if (!before.main) return "the file, created meanwhile by another process, was not touched";
  } else {
    if (!now.main) return "nothing was created";
    // Created here, holding no table (an empty file, or one whose header was switched to WAL)
    // and no journal, and not opened by another process: removed.
    const auto wal_size = now.wal ? fs::file_size(path.string() + "-wal", ec) : 0;
    if (!ec && wal_size == 0 && HoldsNoSchema(path) && !InUseByAnotherProcess(path)) {
      for (const char* suffix : {"-wal", "-shm", "-journal", ""}) {
        fs::remove(path.string() + suffix, ec);
      }
      if (!Files::Of(path).main) {
        return "the new, empty store this run created was removed: nothing was left behind";
      }
    }
    side_files.insert(side_files.begin(), path.filename().string());
    return "left behind: " + JoinNames(side_files) +
           ", created by this run and holding no measurements; delete them";
  }
  if (!changes.empty()) {
    return "before this failure the store was " + JoinNames(changes) +
           "; no measurement in it was changed or lost";
  }
  if (side_files.empty()) return "the file was left unchanged";
  return "the store was left unchanged; SQLite's " + JoinNames(side_files) +
         " were created beside it (they hold nothing of this run; SQLite removes them when the "
         "store is next closed, or delete them when no process uses the store)";
}

}  // namespace
}  // namespace internal

std::unique_ptr<MeasurementStore> MeasurementStore::Open(const std::filesystem::path& path,
                                                         const StoreIdentity& identity,
                                                         const StoreOptions& options) {
  const internal::Files before = internal::Files::Of(path);
  bool created = false;              // set by OpenChecked when it creates the file
  std::vector<std::string> changes;  // what OpenChecked committed to an existing store
  try {
    return OpenChecked(path, identity, options, &created, &changes);
  } catch (const internal::OpenFailure& failure) {
    // The handle is closed by now: what is on disk is what this run leaves.
    throw EnvironmentError("measurement store " + path.string() + ": " + failure.reason + " (" +
                           internal::WhatWasLeft(path, before, created, changes) + ")");
  }
}

namespace internal {
namespace {

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

  std::map<std::string, std::string> ReadTables() {
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
  void IntegrityCheck() {
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

  std::map<std::string, std::string> ReadMeta() {
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
  StoreIdentity Validate(const std::map<std::string, std::string>& tables,
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
      const auto mismatch = [&](const char* key, const std::string& have,
                                const std::string& needed) {
        if (have != needed) {
          Fail(path_, std::string("belongs to another ") + key + ": store has '" +
                          ShownValue(have) + "', this run needs '" + ShownValue(needed) + "'");
        }
      };
      mismatch("gpu", stored.gpu, expected->gpu);
      mismatch("workload_signature", stored.workload_signature, expected->workload_signature);
      mismatch("backend", stored.backend, expected->backend);
    }
    return stored;
  }

  // Runs `sql`; on failure rolls back any transaction and fails with `what`.
  void Exec(const char* sql, const char* what) {
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
  void EnableWal() {
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
  void Create(const StoreIdentity& identity) {
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
  bool UpgradeFromVersion1() {
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
  DamagedList DamagedRows(bool with_checksums) {
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

  [[noreturn]] void RefuseDamaged(const DamagedList& damaged) {
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
  void SetAside(DamagedList* damaged) {
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

 private:
  // The measurements table's columns as PRAGMA table_info reports them must be this schema's.
  void CheckColumns() {
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

  void PutMeta(const std::map<std::string, std::string>& rows) {
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
  const std::filesystem::path& path_;
  std::vector<std::string>* changes_;
  bool schema_empty_ = true;
  int schema_version_ = MeasurementStore::kSchemaVersion;
};

}  // namespace
}  // namespace internal

std::unique_ptr<MeasurementStore> MeasurementStore::OpenChecked(const std::filesystem::path& path,
                                                                const StoreIdentity& identity,
                                                                const StoreOptions& options,
                                                                bool* created,
                                                                std::vector<std::string>* changes) {
  using internal::Fail;
  using Access = StoreOptions::Access;
  using DamagedRows = StoreOptions::DamagedRows;
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  if (exists && !std::filesystem::is_regular_file(path, ec)) Fail(path, "not a regular file");
  std::string read_only;  // why the store is opened read-only; empty: read-write
  if (options.access == Access::kReadOnly) {
    if (!exists) Fail(path, "no such store");
    read_only = "opened read-only";
  } else if (exists) {
    const std::string why = internal::WhyNotWritable(path);
    if (!why.empty() && options.access == Access::kReadWrite) {
      Fail(path, "read-only: " + why + "; this run needs to write to it");
    }
    if (!why.empty()) read_only = why;
  }
  const bool writable = read_only.empty();
  const bool empty_file = exists && std::filesystem::file_size(path, ec) == 0;
  if (!writable && empty_file)
    Fail(path, "an empty file that cannot be written (" + read_only + ")");
  if (!exists && path.has_parent_path()) {
    std::filesystem::create_directories(path.parent_path(), ec);
  }

  auto handle = std::make_unique<Handle>();
  std::string journal_ignored;  // a read-only store's WAL that cannot be read
  // An existing file is opened without SQLITE_OPEN_CREATE and nothing is written to it until
  // it has been recognized as a store of this identity. A read-only store is opened so that
  // SQLite writes nothing at all, not even its -wal and -shm files.
  int rc;
  if (writable) {
    rc = sqlite3_open_v2(path.c_str(), &handle->db,
                         SQLITE_OPEN_READWRITE | (exists ? 0 : SQLITE_OPEN_CREATE), nullptr);
  } else {
    // Immutable (no locks, no -shm) unless a WAL and its index are there to be read; a WAL
    // without its index cannot be read without writing one, and is said to be ignored. A
    // process that starts writing the store later is not seen (a store this process cannot
    // write is, in practice, one nobody writes: a read-only mount, another user's finished run).
    const internal::Files files = internal::Files::Of(path);
    const bool immutable = !(files.wal && files.shm);
    if (immutable && files.wal && std::filesystem::file_size(path.string() + "-wal", ec) > 0) {
      journal_ignored = path.string() + "-wal";
    }
    rc = sqlite3_open_v2(internal::ReadOnlyUri(path, immutable).c_str(), &handle->db,
                         SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
  }
  *created = !exists && std::filesystem::exists(path, ec);
  if (rc != SQLITE_OK) {
    Fail(path, std::string("cannot open: ") +
                   (handle->db ? sqlite3_errmsg(handle->db) : "out of memory"));
  }
  // Another process may be creating, validating or writing the same store: wait for it.
  sqlite3_busy_timeout(handle->db, 60000);

  internal::Opening opening(handle->db, path, changes);
  const StoreIdentity* expected = options.check_identity ? &identity : nullptr;
  StoreIdentity stored = identity;
  std::map<std::string, std::string> tables = opening.ReadTables();
  if (!opening.schema_empty()) {
    stored = opening.Validate(tables, expected);  // nothing is written before it is recognized
  } else if (!writable) {
    Fail(path, "holds no measurement store (" + read_only + ")");
  } else {
    // A file with bytes but no schema (another process is creating the store, or a damaged
    // file): checked before the first write, so a damaged one is refused untouched (the store
    // fuzzer's find: a corrupt page 1 with no tables had its header switched to WAL first).
    if (exists) opening.IntegrityCheck();
    // An empty or new file is ours. WAL first (a journal-mode change cannot happen inside a
    // transaction), then create under a write lock, looking again inside it: when two
    // processes start on one new store, the second finds the first one's schema and checks it.
    opening.EnableWal();
    opening.Exec("BEGIN IMMEDIATE;", "cannot lock the new store");
    tables = opening.ReadTables();
    if (!opening.schema_empty()) {
      opening.Exec("ROLLBACK;", "cannot unlock the store");
      stored = opening.Validate(tables, expected);
    } else {
      opening.Create(identity);
    }
  }
  DamagedRows policy = options.damaged;
  if (!writable && policy == DamagedRows::kSetAside) policy = DamagedRows::kSkip;
  // Every row is read and checked before anything is written to an existing store: a store
  // that cannot be read, or (told not to re-measure) holds a damaged row, is refused as it was.
  internal::DamagedList damaged = opening.DamagedRows(opening.schema_version() >= 2);
  if (policy == DamagedRows::kFail && !damaged.empty()) opening.RefuseDamaged(damaged);
  if (writable) {
    // Then the writes, each in one transaction that SQLite undoes if it fails, in the file's
    // own journal mode: a failed version 1 upgrade (the store fuzzer's find: an ALTER TABLE
    // refused by a damaged header) leaves the file byte for byte as it was.
    if (opening.schema_version() == 1) {
      if (!opening.UpgradeFromVersion1()) stored = opening.Validate(opening.ReadTables(), expected);
      damaged = opening.DamagedRows(/*with_checksums=*/true);  // the upgrade gave rows checksums
    }
    if (!damaged.empty() && policy == DamagedRows::kSetAside) opening.SetAside(&damaged);
    // Last, the WAL journal, so that each committed measurement survives a SIGKILL and readers
    // never block the writer; FULL sync so it also survives a power cut.
    opening.EnableWal();
    opening.Exec("PRAGMA synchronous=FULL;", "cannot set full synchronous writes");
  }
  const bool verify = opening.schema_version() >= 2;  // false: version 1, read-only
  if (writable) {
    handle->claim_fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (handle->claim_fd < 0) {
      Fail(path, std::string("cannot open for claims: ") + std::strerror(errno));
    }
  }
  auto store = std::unique_ptr<MeasurementStore>(
      new MeasurementStore(path, options.check_identity ? identity : stored, std::move(handle)));
  store->read_only_reason_ = read_only;
  store->verify_checksums_ = verify;
  const auto warn = options.warn ? options.warn : [](const std::string& message) {
    std::fprintf(stderr, "kareus: warning: %s\n", message.c_str());
  };
  if (!journal_ignored.empty()) {
    warn("measurement store " + path.string() + ": read-only, and its journal " + journal_ignored +
         " has no -shm index beside it: the measurements committed only there are not read");
  }
  for (const auto& [rowid, why] : damaged) {
    store->damaged_rows_.push_back(why);
    if (policy == DamagedRows::kSkip) store->skipped_rowids_.push_back(rowid);
    warn("measurement store " + path.string() + ": " + why + ": " +
         (policy == DamagedRows::kSkip ? "not used"
                                       : "set aside (table set_aside) and measured again"));
  }
  std::sort(store->skipped_rowids_.begin(), store->skipped_rowids_.end());
  return store;
}

bool MeasurementStore::Skipped(int64_t rowid) const {
  return std::binary_search(skipped_rowids_.begin(), skipped_rowids_.end(), rowid);
}

std::optional<Sample> MeasurementStore::Find(const std::string& partition,
                                             const PartitionKnobs& knobs) const {
  internal::Statement find(
      handle_->db,
      fmt::format("SELECT rowid, {} FROM measurements WHERE gpu = ? AND workload = ? AND "
                  "partition = ? AND freq_mhz = ? AND sms = ? AND slot = ?",
                  internal::ReadColumns(verify_checksums_))
          .c_str());
  if (!find.ok()) internal::FailInUse(path_, "query failed: " + find.error());
  find.Bind(1, identity_.gpu);
  find.Bind(2, identity_.workload_signature);
  find.Bind(3, partition);
  find.Bind(4, static_cast<int64_t>(knobs.freq_mhz));
  find.Bind(5, static_cast<int64_t>(knobs.sms));
  find.Bind(6, knobs.slot);
  const int rc = find.Step();
  if (rc == SQLITE_DONE) return std::nullopt;
  if (rc != SQLITE_ROW) internal::FailInUse(path_, "query failed: " + find.LastError());
  internal::Row row;
  if (auto why = internal::ReadRow(find, 0, verify_checksums_, &row)) {
    if (Skipped(row.rowid)) return std::nullopt;  // reported at open
    // Damaged since the store was opened (another process, a hand edit): refused, not trusted.
    internal::FailInUse(path_, internal::RowName(partition, knobs) + ": " + *why +
                                   " (a hand-edited or damaged store; reopen it to set the row "
                                   "aside)");
  }
  return row.ToSample();
}

bool MeasurementStore::Insert(const std::string& partition, const PartitionKnobs& knobs,
                              const Sample& sample) {
  if (read_only()) {
    internal::FailInUse(path_, "is read-only (" + read_only_reason_ + "): cannot store " +
                                   internal::RowName(partition, knobs));
  }
  internal::Row row{.rowid = 0,
                    .gpu = identity_.gpu,
                    .workload = identity_.workload_signature,
                    .partition = partition,
                    .slot = knobs.slot,
                    .measured_at = internal::UtcNow(),
                    .freq_mhz = knobs.freq_mhz,
                    .sms = knobs.sms,
                    .values = {sample.time_s, sample.energy_j, sample.static_energy_j,
                               sample.dynamic_energy_j, sample.realized_freq_mhz, sample.seconds},
                    .noise_free = sample.noise_free ? 1 : 0,
                    .checksum = std::nullopt};
  // Another process may have stored the configuration since we looked: its row stays.
  internal::Statement insert(
      handle_->db,
      fmt::format("INSERT INTO measurements({}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                  "?, ?) ON CONFLICT DO NOTHING",
                  internal::kColumns)
          .c_str());
  if (!insert.ok()) internal::FailInUse(path_, "insert failed: " + insert.error());
  insert.Bind(1, row.gpu);
  insert.Bind(2, row.workload);
  insert.Bind(3, row.partition);
  insert.Bind(4, row.freq_mhz);
  insert.Bind(5, row.sms);
  insert.Bind(6, row.slot);
  for (int k = 0; k < 6; ++k) insert.Bind(7 + k, row.values[k]);
  insert.Bind(13, row.noise_free);
  insert.Bind(14, row.measured_at);
  insert.Bind(15, row.Checksum());
  // Autocommit: the row is durable when the statement completes.
  if (insert.Step() != SQLITE_DONE) {
    internal::FailInUse(path_, "insert failed: " + insert.LastError());
  }
  const bool inserted = sqlite3_changes(handle_->db) > 0;
  Release(partition, knobs);
  return inserted;
}

void MeasurementStore::RefuseToMeasure(const std::string& partition,
                                       const PartitionKnobs& first_missing, std::size_t missing,
                                       std::size_t wanted) const {
  if (!read_only()) return;
  throw EnvironmentError(fmt::format(
      "measurement store {} is read-only ({}) and lacks {} of the {} configurations to measure "
      "now (first: {}); nothing was measured: pass a writable --store (e.g. a copy of this one "
      "in a writable folder)",
      path_.string(), read_only_reason_, missing, wanted,
      internal::RowName(partition, first_missing)));
}

bool MeasurementStore::TryClaim(const std::string& partition, const PartitionKnobs& knobs) {
  return internal::LockByte(handle_->claim_fd, internal::ClaimOffset(partition, knobs),
                            /*wait=*/false, path_);
}

void MeasurementStore::Claim(const std::string& partition, const PartitionKnobs& knobs) {
  internal::LockByte(handle_->claim_fd, internal::ClaimOffset(partition, knobs), /*wait=*/true,
                     path_);
}

void MeasurementStore::Release(const std::string& partition, const PartitionKnobs& knobs) {
  internal::UnlockByte(handle_->claim_fd, internal::ClaimOffset(partition, knobs));
}

void MeasurementStore::FindOrMeasure(const std::string& partition,
                                     const std::vector<PartitionKnobs>& batch,
                                     const MeasureFn& measure, const ReadyFn& on_ready) {
  if (read_only()) {
    // Nothing can be stored: everything must be there already, which is known before anything
    // is measured.
    std::vector<std::optional<Sample>> found;
    std::size_t missing = 0;
    std::optional<std::size_t> first_missing;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      found.push_back(Find(partition, batch[i]));
      if (!found.back()) {
        ++missing;
        if (!first_missing) first_missing = i;
      }
    }
    if (missing > 0) RefuseToMeasure(partition, batch[*first_missing], missing, batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) on_ready(i, *found[i], true);
    return;
  }
  // Claims held while measuring; released when stored, or here if measuring fails.
  std::vector<std::size_t> claimed;
  struct ReleaseLeft {
    MeasurementStore* store;
    const std::string& partition;
    const std::vector<PartitionKnobs>& batch;
    std::vector<std::size_t>& claimed;
    ~ReleaseLeft() {
      for (std::size_t i : claimed) store->Release(partition, batch[i]);
    }
  } release_left{this, partition, batch, claimed};

  std::vector<std::size_t> mine;    // measured here
  std::vector<std::size_t> theirs;  // another process is measuring them now
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (auto stored = Find(partition, batch[i])) {
      on_ready(i, *stored, true);
    } else if (!TryClaim(partition, batch[i])) {
      theirs.push_back(i);
    } else if (auto late = Find(partition, batch[i])) {  // stored while we claimed it
      Release(partition, batch[i]);
      on_ready(i, *late, true);
    } else {
      claimed.push_back(i);
      mine.push_back(i);
    }
  }
  const auto measure_here = [&](const std::vector<std::size_t>& indices) {
    std::vector<PartitionKnobs> knobs;
    for (std::size_t i : indices) knobs.push_back(batch[i]);
    measure(knobs, [&](std::size_t j, const Sample& sample) {
      const std::size_t i = indices.at(j);
      Insert(partition, batch[i], sample);  // commits and releases the claim
      claimed.erase(std::find(claimed.begin(), claimed.end(), i));
      // If another process stored it first (it cannot while we hold the claim, unless it
      // ignores claims), the stored row is what every reader sees.
      const std::optional<Sample> stored = Find(partition, batch[i]);
      on_ready(i, stored ? *stored : sample, false);
    });
  };
  if (!mine.empty()) measure_here(mine);
  // Holding no claim now, wait for each configuration another process is measuring.
  for (std::size_t i : theirs) {
    Claim(partition, batch[i]);
    if (auto stored = Find(partition, batch[i])) {
      Release(partition, batch[i]);
      on_ready(i, *stored, true);
    } else {  // that process ended without storing it
      claimed.push_back(i);
      measure_here({i});
    }
  }
}

int64_t MeasurementStore::Count() const {
  internal::Statement count(handle_->db, "SELECT COUNT(*) FROM measurements");
  if (!count.ok() || count.Step() != SQLITE_ROW) internal::FailInUse(path_, "count failed");
  return count.Int(0) - static_cast<int64_t>(skipped_rowids_.size());
}

int64_t MeasurementStore::Count(const std::string& partition) const {
  int64_t n = 0;
  for (const StoredMeasurement& row : All()) n += row.partition == partition ? 1 : 0;
  return n;
}

std::vector<StoredMeasurement> MeasurementStore::All() const {
  internal::Statement all(handle_->db,
                          fmt::format("SELECT rowid, {} FROM measurements ORDER BY rowid",
                                      internal::ReadColumns(verify_checksums_))
                              .c_str());
  if (!all.ok()) internal::FailInUse(path_, "query failed: " + all.error());
  std::vector<StoredMeasurement> rows;
  int rc;
  while ((rc = all.Step()) == SQLITE_ROW) {
    internal::Row row;
    if (auto why = internal::ReadRow(all, 0, verify_checksums_, &row)) {
      if (Skipped(row.rowid)) continue;
      internal::FailInUse(path_, internal::RowName(row) + ": " + *why +
                                     " (a hand-edited or damaged store; reopen it to set the "
                                     "row aside)");
    }
    rows.push_back(StoredMeasurement{
        .partition = row.partition, .knobs = row.Knobs(), .sample = row.ToSample()});
  }
  if (rc != SQLITE_DONE) internal::FailInUse(path_, "query failed: " + all.LastError());
  return rows;
}

}  // namespace kareus::measure
