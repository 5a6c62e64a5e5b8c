// SPDX-License-Identifier: Apache-2.0
// The store's files: whether they can be written, read-only URIs, another process using the
// store, the claims (OFD locks on the store file), what a failed open left behind (part of
// MeasurementStore; see store_internal.h).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

#include "kareus/common/context.h"
#include "kareus/common/io.h"
#include "store_internal.h"

namespace kareus::measure::internal {

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

namespace {

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

}  // namespace

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

}  // namespace kareus::measure::internal
