// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace kareus {

// Input files larger than this are refused (a workload, plan or profile is kilobytes; a path
// such as /dev/zero must not eat the memory).
inline constexpr std::size_t kMaxInputFileBytes = std::size_t{256} << 20;  // 256 MiB

// Reads a whole file; throws InputError naming the path when it cannot be read, is a folder,
// or is larger than kMaxInputFileBytes.
std::string ReadTextFile(const std::filesystem::path& path);

// Writes `contents` to a temporary file beside `path`, flushes it to disk and renames it over
// `path`, so a reader (or a killed run) sees either the old file or the new one, never half.
// Creates missing parent directories. Throws EnvironmentError on failure. The temporary file is
// registered for removal on SIGINT/SIGTERM/SIGHUP/SIGQUIT (see RemoveTemporariesOnTermination).
void WriteFileAtomic(const std::filesystem::path& path, std::string_view contents);

// Throws InputError unless `name` can be one file or folder name on every system Kareus writes
// to: 1..128 bytes of UTF-8 without '/', '\' or control characters (the message names `field`),
// not starting with '.' or '-' (no ".", "..", hidden or option-like names).
void ValidatePathComponent(const std::string& field, const std::string& name);

// True when `path` is a mount point (listed in /proc/self/mountinfo, bind mounts included; where
// that cannot be read, on another device than its parent), "/" included.
bool IsMountPoint(const std::filesystem::path& path);

// An output folder written as a whole (a folder transaction). Files go into a fresh staging
// folder beside the target (".NAME.kareus-staging-PID-N"); Commit() swaps it in place of the
// target in one step (renameat2 RENAME_EXCHANGE, or two renames on a filesystem without it) and
// then removes the previous outputs. So the target holds exactly one run's outputs; a run that
// fails, throws or is interrupted by a signal leaves the previous outputs exactly as they were
// and its staging folder is removed (by the destructor, by the signal thread of
// RemoveTemporariesOnTermination, or, after SIGKILL, by the next OutputFolder beside the same
// target, which removes staging folders of processes that no longer exist).
//
// Only folders Kareus wrote may be replaced: an existing target must be empty, carry the marker
// file `.kareus-output` that Commit writes, or hold only names Kareus writes (plan.json,
// frontier.json, plans/, methods/, summary.json, report.html, measurements.sqlite*, evaluation.*,
// freqs_pipeline_*.py, scheds_pipeline_*.py, and subfolders that qualify themselves). Anything
// else (a home folder, a source tree, a file) is refused with InputError before anything runs.
class OutputFolder {
 public:
  // Throws InputError for an empty path, "/", the current folder or one of its parents, an
  // existing file, a mount point, or a folder of other things; EnvironmentError when the staging
  // folder cannot be created.
  explicit OutputFolder(const std::filesystem::path& target);
  ~OutputFolder();  // without Commit(): removes the staging folder, the target is untouched
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;

  // Carries `path` (absolute or relative to the working folder) from the current target into
  // the new one at Commit(), with its SQLite companions (-wal, -shm, -journal) when present:
  // e.g. a measurement store that reruns resume from. Hard links, so the store is never copied
  // or absent. Ignored when `path` is not inside the target.
  void Keep(const std::filesystem::path& path);

  const std::filesystem::path& target() const { return target_; }  // absolute, normalized
  const std::filesystem::path& staging() const { return staging_; }

  // Writes the marker, carries the kept entries, swaps the staging folder in and removes the
  // previous outputs. Throws EnvironmentError when the swap fails (the target is unchanged).
  void Commit();

 private:
  std::filesystem::path target_;
  std::filesystem::path staging_;
  std::vector<std::filesystem::path> keep_;  // relative to target_
  bool committed_ = false;
};

// For command-line programs: SIGINT, SIGTERM, SIGHUP and SIGQUIT (those the process does not
// ignore) are taken by one thread, which removes the temporary files of unfinished atomic
// writes and the staging folders of uncommitted OutputFolders, then ends the process by the same
// signal (the parent sees the usual status). Call first thing in main(), before any thread
// exists: the signals are blocked in the calling thread and every thread it creates later.
void RemoveTemporariesOnTermination();

// A line the clean-up of RemoveTemporariesOnTermination writes to stderr when SIGTERM ends the
// process (e.g. rank 0 of an MPI job saying what the store holds); nullptr for none. The text
// must outlive the process (a string literal).
void SetTerminationMessage(const char* message);

// The folder holding GPU and model presets: $KAREUS_DATA_DIR, else data/ beside the loaded
// Kareus object or the executable (a pip-installed package: kareus/data), else the source
// tree's data/ recorded at build time, else <prefix>/share/kareus/data next to the executable.
std::filesystem::path DataDir();

// The presets of one kind: the stems of DataDir()/<folder>/*.yaml, sorted.
std::vector<std::string> PresetNames(const std::string& folder);

// "a, b, c": names for an error message listing the valid choices.
std::string JoinNames(const std::vector<std::string>& names);

}  // namespace kareus
