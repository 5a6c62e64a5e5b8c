// SPDX-License-Identifier: Apache-2.0
#include "kareus/measure/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <algorithm>
#include <climits>
#include <map>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "kareus/common/context.h"
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
  int Type(int col) const { return sqlite3_column_type(stmt_, col); }
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

// A store that cannot be opened: nothing was written to it.
[[noreturn]] void Fail(const std::filesystem::path& path, const std::string& reason) {
  throw EnvironmentError("measurement store " + path.string() + ": " + reason +
                         " (the file was left unchanged; pass another --store path)");
}

// A failure after the store was opened: what was committed before stays.
[[noreturn]] void FailInUse(const std::filesystem::path& path, const std::string& reason) {
  throw EnvironmentError("measurement store " + path.string() + ": " + reason +
                         " (measurements committed before this are kept)");
}

// Claims live on bytes [2^62, 2^62 + 2^61) of the store file: far above SQLite's lock bytes
// (at 1 GiB), so OFD locks there never meet SQLite's own POSIX locks.
off_t ClaimOffset(const std::string& partition, const PartitionKnobs& knobs) {
  const std::string key = partition + "|" + std::to_string(knobs.freq_mhz) + "|" +
                          std::to_string(knobs.sms) + "|" + knobs.slot;
  const uint64_t hash = DeriveSeed(HashString(key.c_str()), 0x6b617265757321ULL);
  return static_cast<off_t>((uint64_t{1} << 62) + (hash & ((uint64_t{1} << 61) - 1)));
}

std::string RowName(const std::string& partition, const PartitionKnobs& knobs) {
  return fmt::format("row ({}, {} MHz, {} SMs, {})", ShownValue(partition, 60), knobs.freq_mhz,
                     knobs.sms, ShownValue(knobs.slot, 60));
}

// A stored measurement as read, checked: hand-edited or damaged rows are refused, not trusted.
Sample ReadSample(const Statement& row, int first, const std::filesystem::path& path,
                  const std::string& row_name) {
  static const char* const kNames[] = {"time_s", "energy_j", "static_energy_j",
                                       "dynamic_energy_j", "realized_freq_mhz", "gpu_seconds"};
  double values[6];
  for (int k = 0; k < 6; ++k) {
    const int type = row.Type(first + k);
    if (type != SQLITE_FLOAT && type != SQLITE_INTEGER) {
      FailInUse(path, row_name + ": " + kNames[k] + " is not a number (a hand-edited or damaged "
                                                    "store; delete the row or the file)");
    }
    values[k] = row.Real(first + k);
    if (!std::isfinite(values[k]) || (k != 3 && values[k] < 0.0) || (k == 0 && values[k] <= 0)) {
      FailInUse(path, fmt::format("{}: {} = {}: must be {} (a hand-edited or damaged store; "
                                  "delete the row or the file)",
                                  row_name, kNames[k], values[k],
                                  k == 0 ? "a finite time > 0" : k == 3 ? "finite"
                                                                        : "finite and >= 0"));
    }
  }
  const double sum = values[2] + values[3];
  if (std::abs(values[1] - sum) > 1e-6 * std::max(1.0, std::abs(values[1]))) {
    FailInUse(path, fmt::format("{}: energy_j = {} but static_energy_j + dynamic_energy_j = {} "
                                "(a hand-edited or damaged store; delete the row or the file)",
                                row_name, values[1], sum));
  }
  const int flag_type = row.Type(first + 6);
  const int64_t flag = row.Int(first + 6);
  if (flag_type != SQLITE_INTEGER || (flag != 0 && flag != 1)) {
    FailInUse(path, row_name + ": noise_free must be 0 or 1 (a hand-edited or damaged store)");
  }
  return Sample{.time_s = values[0],
                .energy_j = values[1],
                .static_energy_j = values[2],
                .dynamic_energy_j = values[3],
                .realized_freq_mhz = values[4],
                .seconds = values[5],
                .noise_free = flag != 0};
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
  // descriptor of a file drops the process's POSIX locks on it, SQLite's included.
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

std::unique_ptr<MeasurementStore> MeasurementStore::Open(const std::filesystem::path& path,
                                                         const StoreIdentity& identity) {
  using internal::Fail;
  using internal::Statement;
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  if (exists && !std::filesystem::is_regular_file(path, ec)) Fail(path, "not a regular file");
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
  // Another process may be creating, validating or writing the same store: wait for it.
  sqlite3_busy_timeout(handle->db, 60000);
  sqlite3* db = handle->db;

  // The tables, and whether the schema holds anything at all (an index, view or trigger
  // without tables is someone else's database, not an empty one).
  bool schema_empty = true;
  const auto read_tables = [&] {
    std::map<std::string, std::string> tables;
    Statement list(db, "SELECT type, name, sql FROM sqlite_master");
    if (!list.ok()) Fail(path, "not a SQLite database, or corrupted: " + list.error());
    int rc;
    schema_empty = true;
    while ((rc = list.Step()) == SQLITE_ROW) {
      schema_empty = false;
      if (list.Text(0) == "table") tables[list.Text(1)] = list.Text(2);
    }
    if (rc != SQLITE_DONE) Fail(path, "not a SQLite database, or corrupted: " + list.LastError());
    return tables;
  };
  const auto quick_check = [&] {
    Statement check(db, "PRAGMA quick_check");
    if (!check.ok() || check.Step() != SQLITE_ROW || check.Text(0) != "ok") {
      Fail(path, "integrity check failed (corrupted)");
    }
  };
  const auto validate = [&](const std::map<std::string, std::string>& tables) {
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
      Fail(path, "meta.format = '" + ShownValue(meta["format"]) + "', expected '" + kFormat + "'");
    }
    if (meta["schema_version"] != std::to_string(kSchemaVersion)) {
      Fail(path, "schema_version = " + ShownValue(meta["schema_version"]) +
                     ", this build reads " + std::to_string(kSchemaVersion));
    }
    quick_check();
    const auto mismatch = [&](const char* key, const std::string& expected) {
      if (meta[key] != expected) {
        Fail(path, std::string("belongs to another ") + key + ": store has '" +
                       ShownValue(meta[key]) + "', this run needs '" + ShownValue(expected) + "'");
      }
    };
    mismatch("gpu", identity.gpu);
    mismatch("workload_signature", identity.workload_signature);
    mismatch("backend", identity.backend);
  };
  const auto exec = [&](const char* sql, const char* what) {
    char* message = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &message) != SQLITE_OK) {
      const std::string reason = message ? message : sqlite3_errmsg(db);
      sqlite3_free(message);
      sqlite3_exec(db, "ROLLBACK;", nullptr, nullptr, nullptr);
      Fail(path, std::string(what) + ": " + reason);
    }
  };

  // PRAGMA journal_mode=WAL needs the database to itself for a moment, and SQLite answers
  // SQLITE_BUSY at once (its busy handler is not consulted: waiting could deadlock) or leaves
  // the old mode when another connection is inside a transaction, e.g. a second process that
  // opens the same new store at the same time (seen 6 times in 40 runs of the two-process
  // store test under CPU load). Retried for as long as the busy timeout, checking the mode
  // SQLite reports; an answer other than "wal" is retried for 5 s only (a file system without
  // WAL support answers so every time).
  const auto enable_wal = [&] {
    const auto start = std::chrono::steady_clock::now();
    std::string reason;
    for (int attempt = 0;; ++attempt) {
      Statement pragma(db, "PRAGMA journal_mode=WAL");
      const int rc = pragma.ok() ? pragma.Step() : SQLITE_ERROR;
      if (rc == SQLITE_ROW && pragma.Text(0) == "wal") return;
      reason = rc == SQLITE_ROW ? "the journal stayed '" + pragma.Text(0) + "'"
                                : (pragma.ok() ? pragma.LastError() : pragma.error());
      const int code = sqlite3_errcode(db) & 0xff;
      const bool busy = rc != SQLITE_ROW && (code == SQLITE_BUSY || code == SQLITE_LOCKED);
      const auto limit = busy ? std::chrono::seconds(60) : std::chrono::seconds(5);
      if ((!busy && rc != SQLITE_ROW) || std::chrono::steady_clock::now() - start >= limit) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(5 * (attempt + 1), 100)));
    }
    Fail(path, "cannot enable the WAL journal: " + reason);
  };

  std::map<std::string, std::string> tables = read_tables();
  if (!schema_empty) {
    validate(tables);  // nothing is written before the file is recognized
  } else {
    // A file with bytes but no schema (another process is creating the store, or a damaged
    // file): checked before the first write, so a damaged one is refused untouched (the store
    // fuzzer's find: a corrupt page 1 with no tables had its header switched to WAL first).
    if (exists) quick_check();
    // An empty or new file is ours. WAL first (a journal-mode change cannot happen inside a
    // transaction), then create under a write lock, looking again inside it: when two
    // processes start on one new store, the second finds the first one's schema and checks it.
    enable_wal();
    exec("BEGIN IMMEDIATE;", "cannot lock the new store");
    tables = read_tables();
    if (!schema_empty) {
      exec("ROLLBACK;", "cannot unlock the store");
      validate(tables);
    } else {
      exec(internal::kCreateSchema, "cannot create the schema");
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
        if (put.Step() != SQLITE_DONE) {
          const std::string reason = put.LastError();
          exec("ROLLBACK;", "cannot unlock the store");
          Fail(path, "cannot write meta: " + reason);
        }
      }
      exec("COMMIT;", "cannot commit the schema");
    }
  }
  // Recognized (or new): WAL journal so that each committed measurement survives a SIGKILL
  // and readers never block the writer; FULL sync so it also survives a power cut.
  enable_wal();
  exec("PRAGMA synchronous=FULL;", "cannot set full synchronous writes");
  handle->claim_fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (handle->claim_fd < 0) {
    Fail(path, std::string("cannot open for claims: ") + std::strerror(errno));
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
  return internal::ReadSample(find, 0, path_, internal::RowName(partition, knobs));
}

bool MeasurementStore::Insert(const std::string& partition, const PartitionKnobs& knobs,
                              const Sample& sample) {
  // Another process may have stored the configuration since we looked: its row stays.
  internal::Statement insert(
      handle_->db,
      "INSERT INTO measurements(gpu, workload, partition, freq_mhz, sms, slot, time_s, "
      "energy_j, static_energy_j, dynamic_energy_j, realized_freq_mhz, gpu_seconds, "
      "noise_free, measured_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
      "ON CONFLICT DO NOTHING");
  if (!insert.ok()) internal::FailInUse(path_, "insert failed: " + insert.error());
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
  if (insert.Step() != SQLITE_DONE) {
    internal::FailInUse(path_, "insert failed: " + insert.LastError());
  }
  const bool inserted = sqlite3_changes(handle_->db) > 0;
  Release(partition, knobs);
  return inserted;
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
                                     const std::vector<PartitionKnobs>& batch, const MeasureFn& measure,
                                     const ReadyFn& on_ready) {
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
  return count.Int(0);
}

int64_t MeasurementStore::Count(const std::string& partition) const {
  internal::Statement count(handle_->db,
                            "SELECT COUNT(*) FROM measurements WHERE partition = ?");
  if (!count.ok()) internal::FailInUse(path_, "count failed: " + count.error());
  count.Bind(1, partition);
  if (count.Step() != SQLITE_ROW) internal::FailInUse(path_, "count failed");
  return count.Int(0);
}

std::vector<StoredMeasurement> MeasurementStore::All() const {
  internal::Statement all(
      handle_->db,
      "SELECT partition, freq_mhz, sms, slot, time_s, energy_j, static_energy_j, "
      "dynamic_energy_j, realized_freq_mhz, gpu_seconds, noise_free FROM measurements "
      "ORDER BY rowid");
  if (!all.ok()) internal::FailInUse(path_, "query failed: " + all.error());
  std::vector<StoredMeasurement> rows;
  int rc;
  while ((rc = all.Step()) == SQLITE_ROW) {
    StoredMeasurement row{.partition = all.Text(0),
                          .knobs = {.freq_mhz = 0, .sms = 0, .slot = all.Text(3)},
                          .sample = {}};
    const int64_t freq = all.Int(1);
    const int64_t sms = all.Int(2);
    if (all.Type(1) != SQLITE_INTEGER || all.Type(2) != SQLITE_INTEGER || freq <= 0 ||
        freq > INT32_MAX || sms <= 0 || sms > INT32_MAX || !IsValidUtf8(row.partition) ||
        !IsValidUtf8(row.knobs.slot)) {
      internal::FailInUse(path_, "a row of partition '" + ShownValue(row.partition, 60) +
                                     "' has invalid knobs (a hand-edited or damaged store)");
    }
    row.knobs.freq_mhz = static_cast<int>(freq);
    row.knobs.sms = static_cast<int>(sms);
    row.sample = internal::ReadSample(all, 4, path_, internal::RowName(row.partition, row.knobs));
    rows.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) internal::FailInUse(path_, "query failed: " + all.LastError());
  return rows;
}

}  // namespace kareus::measure
