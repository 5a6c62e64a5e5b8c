// SPDX-License-Identifier: Apache-2.0
// The measurement store (include/kareus/measure/store.h): Open and the steps of an open
// (OpenChecked). The other parts are listed in store_internal.h.
#include "kareus/measure/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <system_error>

#include "kareus/common/error.h"
#include "store_internal.h"

namespace kareus::measure {
namespace internal {

[[noreturn]] void Fail(const std::filesystem::path&, const std::string& reason) {
  throw OpenFailure{reason};
}

// A failure after the store was opened: what was committed before stays.
[[noreturn]] void FailInUse(const std::filesystem::path& path, const std::string& reason) {
  throw EnvironmentError("measurement store " + path.string() + ": " + reason +
                         " (measurements committed before this are kept)");
}

}  // namespace internal

std::optional<OptionError> StoreOptions::Validate() const {
  switch (access) {
    case Access::kAuto:
    case Access::kReadWrite:
    case Access::kReadOnly:
      break;
    default:
      return OptionError{"access", Describe(static_cast<int>(access)),
                         "must be one of auto (0), read-write (1), read-only (2)"};
  }
  switch (damaged) {
    case DamagedRows::kSetAside:
    case DamagedRows::kFail:
    case DamagedRows::kSkip:
      break;
    default:
      return OptionError{"damaged", Describe(static_cast<int>(damaged)),
                         "must be one of set-aside (0), fail (1), skip (2)"};
  }
  return std::nullopt;
}

MeasurementStore::MeasurementStore(std::filesystem::path path, StoreIdentity identity,
                                   std::unique_ptr<Handle> handle)
    : path_(std::move(path)), identity_(std::move(identity)), handle_(std::move(handle)) {}

MeasurementStore::~MeasurementStore() = default;

std::unique_ptr<MeasurementStore> MeasurementStore::Open(const std::filesystem::path& path,
                                                         const StoreIdentity& identity,
                                                         const StoreOptions& options) {
  ThrowIfInvalid(options.Validate());
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

// Refuses a file that cannot be opened as `options` asks and creates the folder of a new store;
// returns why the store is opened read-only ("": read-write).
std::string CheckAccess(const std::filesystem::path& path, const StoreOptions& options,
                        bool exists) {
  using Access = StoreOptions::Access;
  std::error_code ec;
  if (exists && !std::filesystem::is_regular_file(path, ec)) Fail(path, "not a regular file");
  std::string read_only;  // why the store is opened read-only; empty: read-write
  if (options.access == Access::kReadOnly) {
    if (!exists) Fail(path, "no such store");
    read_only = "opened read-only";
  } else if (exists) {
    const std::string why = WhyNotWritable(path);
    if (!why.empty() && options.access == Access::kReadWrite) {
      Fail(path, "read-only: " + why + "; this run needs to write to it");
    }
    if (!why.empty()) read_only = why;
  }
  const bool empty_file = exists && std::filesystem::file_size(path, ec) == 0;
  if (!read_only.empty() && empty_file)
    Fail(path, "an empty file that cannot be written (" + read_only + ")");
  if (!exists && path.has_parent_path()) {
    std::filesystem::create_directories(path.parent_path(), ec);
  }
  return read_only;
}

// Opens the SQLite connection to the store at `path` (`*db`, closed by its owner even when this
// fails); `*journal_ignored` names a read-only store's WAL that cannot be read.
void Connect(const std::filesystem::path& path, bool exists, bool writable, sqlite3** db,
             std::string* journal_ignored, bool* created) {
  // An existing file is opened without SQLITE_OPEN_CREATE and nothing is written to it until
  // it has been recognized as a store of this identity. A read-only store is opened so that
  // SQLite writes nothing at all, not even its -wal and -shm files.
  std::error_code ec;
  int rc;
  if (writable) {
    rc = sqlite3_open_v2(path.c_str(), db,
                         SQLITE_OPEN_READWRITE | (exists ? 0 : SQLITE_OPEN_CREATE), nullptr);
  } else {
    // Immutable (no locks, no -shm) unless a WAL and its index are there to be read; a WAL
    // without its index cannot be read without writing one, and is said to be ignored. A
    // process that starts writing the store later is not seen (a store this process cannot
    // write is, in practice, one nobody writes: a read-only mount, another user's finished run).
    const Files files = Files::Of(path);
    const bool immutable = !(files.wal && files.shm);
    if (immutable && files.wal && std::filesystem::file_size(path.string() + "-wal", ec) > 0) {
      *journal_ignored = path.string() + "-wal";
    }
    rc = sqlite3_open_v2(ReadOnlyUri(path, immutable).c_str(), db,
                         SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
  }
  *created = !exists && std::filesystem::exists(path, ec);
  if (rc != SQLITE_OK) {
    Fail(path, std::string("cannot open: ") + (*db ? sqlite3_errmsg(*db) : "out of memory"));
  }
  // Another process may be creating, validating or writing the same store: wait for it.
  sqlite3_busy_timeout(*db, 60000);
}

// Recognizes the store (with `expected`, as that identity) or, in an empty or new file, creates
// it; returns whose it is.
StoreIdentity RecognizeOrCreate(Opening* opening, const std::filesystem::path& path,
                                const StoreIdentity& identity, const StoreIdentity* expected,
                                bool exists, const std::string& read_only) {
  StoreIdentity stored = identity;
  std::map<std::string, std::string> tables = opening->ReadTables();
  if (!opening->schema_empty()) {
    stored = opening->Validate(tables, expected);  // nothing is written before it is recognized
  } else if (!read_only.empty()) {
    Fail(path, "holds no measurement store (" + read_only + ")");
  } else {
    // A file with bytes but no schema (another process is creating the store, or a damaged
    // file): checked before the first write, so a damaged one is refused untouched (the store
    // fuzzer's find: a corrupt page 1 with no tables had its header switched to WAL first).
    if (exists) opening->IntegrityCheck();
    // An empty or new file is ours. WAL first (a journal-mode change cannot happen inside a
    // transaction), then create under a write lock, looking again inside it: when two
    // processes start on one new store, the second finds the first one's schema and checks it.
    opening->EnableWal();
    opening->Exec("BEGIN IMMEDIATE;", "cannot lock the new store");
    tables = opening->ReadTables();
    if (!opening->schema_empty()) {
      opening->Exec("ROLLBACK;", "cannot unlock the store");
      stored = opening->Validate(tables, expected);
    } else {
      opening->Create(identity);
    }
  }
  return stored;
}

}  // namespace
}  // namespace internal

std::unique_ptr<MeasurementStore> MeasurementStore::OpenChecked(const std::filesystem::path& path,
                                                                const StoreIdentity& identity,
                                                                const StoreOptions& options,
                                                                bool* created,
                                                                std::vector<std::string>* changes) {
  using internal::Fail;
  using DamagedRows = StoreOptions::DamagedRows;
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  // Why the store is opened read-only; empty: read-write.
  const std::string read_only = internal::CheckAccess(path, options, exists);
  const bool writable = read_only.empty();

  auto handle = std::make_unique<Handle>();
  std::string journal_ignored;  // a read-only store's WAL that cannot be read
  internal::Connect(path, exists, writable, &handle->db, &journal_ignored, created);

  internal::Opening opening(handle->db, path, changes);
  const StoreIdentity* expected = options.check_identity ? &identity : nullptr;
  StoreIdentity stored =
      internal::RecognizeOrCreate(&opening, path, identity, expected, exists, read_only);
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

}  // namespace kareus::measure
