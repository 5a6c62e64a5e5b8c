// SPDX-License-Identifier: Apache-2.0
// The measurement store: every measurement of a profiling run, in a SQLite file, committed as
// it arrives (WAL journal), keyed by (GPU, workload signature, partition type, knobs). A killed
// run resumes from it without re-measuring. A file that is not such a store (corrupted, another
// schema, another schema version) or that belongs to another GPU, workload or backend is
// reported and never modified. Several processes may use one store at once: each ends with
// the union of all measurements, and a configuration one process is measuring is waited for, not
// measured again, by the others (FindOrMeasure).
//
// Damage is detected, not trusted: every row carries a checksum of its key and values and the
// meta table one of its own; at open SQLite's integrity check runs and every row is verified. A
// row that fails is named and, by default, set aside (moved to the table `set_aside`, so nothing
// is deleted) and measured again; told not to re-measure, the open fails naming the rows and
// the file is left as it was. A store that cannot be written (a read-only mount, a file without
// write permission) is opened read-only, creating no side files; it answers what it holds, and
// a configuration it lacks is an error naming the file before anything is measured.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kareus/common/error.h"
#include "kareus/measure/backend.h"

namespace kareus::measure {

// What a store belongs to; recorded in its meta table when it is created and checked on open.
struct StoreIdentity {
  std::string gpu;                 // GPU preset name
  std::string workload_signature;  // workload::Workload::Signature()
  std::string backend;             // Backend::Description(): where values come from
};

struct StoredMeasurement {
  std::string partition;
  PartitionKnobs knobs;
  Sample sample;
};

// How a store is opened.
struct StoreOptions {
  enum class Access {
    kAuto,       // read-write, or read-only when the file exists and cannot be written
    kReadWrite,  // a store that cannot be written is an error
    kReadOnly,   // never writes, never creates a file or a side file (-wal, -shm)
  };
  // What to do with a row that fails its checks at open.
  enum class DamagedRows {
    kSetAside,  // move it to the table set_aside and warn; it is measured again (read-only
                // stores: kSkip)
    kFail,      // EnvironmentError naming the rows; the file is left as it was
    kSkip,      // leave it in the file, warn, and answer as if it were not there
  };
  Access access = Access::kAuto;
  DamagedRows damaged = DamagedRows::kSetAside;
  // False: any identity is accepted and identity() reports the store's own (a related
  // workload's store, read for transfer).
  bool check_identity = true;
  // Where warnings (rows set aside or skipped) go; default: stderr, "kareus: warning: ...".
  std::function<void(const std::string&)> warn = {};

  // The first field that holds no value of its enum (e.g. one cast from an integer), with the
  // rule; nullopt when valid. Open checks it first.
  std::optional<OptionError> Validate() const;
};

class MeasurementStore {
 public:
  static constexpr const char* kFormat = "kareus-measurement-store";
  // 2 added the rows' and the meta table's checksums and the set_aside table; a version 1
  // store is upgraded when it is opened for writing (its rows checked by value as before).
  static constexpr int kSchemaVersion = 2;

  // Opens `path`, creating a new store when the file does not exist (or is empty). Throws
  // EnvironmentError naming the path, the reason and what was left: an existing file is left
  // exactly as it was; a store this call created is removed again when it holds nothing.
  static std::unique_ptr<MeasurementStore> Open(const std::filesystem::path& path,
                                                const StoreIdentity& identity,
                                                const StoreOptions& options = {});
  ~MeasurementStore();
  MeasurementStore(const MeasurementStore&) = delete;
  MeasurementStore& operator=(const MeasurementStore&) = delete;

  // The stored measurement, checked: a row that is not a measurement (a time that is not
  // positive, a negative or non-finite energy, energies that do not add up, a text where a
  // number belongs: a hand-edited or damaged file) is an EnvironmentError naming the row.
  std::optional<Sample> Find(const std::string& partition, const PartitionKnobs& knobs) const;
  // Inserts and commits one measurement (durable when this returns) and releases this
  // process's claim on it. False when the configuration is already stored (another process
  // measured it meanwhile): the stored row is kept, as readers may have used it.
  bool Insert(const std::string& partition, const PartitionKnobs& knobs, const Sample& sample);

  // Measures a batch through the store: what is stored is read; the rest is measured with
  // `measure` (called once with the configurations to measure, in batch order; it calls back
  // for each sample as soon as it exists), each sample committed as it arrives. A configuration
  // that another process is measuring at this moment is not measured again: it is waited for
  // and read once that process has stored it (and measured here only if that process ends
  // without storing it). `on_ready(i, sample, from_store)` is called once for every entry of
  // `batch`. The claims are advisory locks on the store file (OFD locks, released by the kernel
  // when a process dies), so nothing stale is left behind by a killed process.
  using MeasureFn = std::function<void(const std::vector<PartitionKnobs>& knobs,
                                       const std::function<void(std::size_t, const Sample&)>&)>;
  using ReadyFn = std::function<void(std::size_t index, const Sample& sample, bool from_store)>;
  void FindOrMeasure(const std::string& partition, const std::vector<PartitionKnobs>& batch,
                     const MeasureFn& measure, const ReadyFn& on_ready);

  // Nothing can be stored in a read-only store: called before measuring `missing` of the
  // `wanted` configurations of `partition` (the first missing one: `first_missing`), throws
  // EnvironmentError naming the file when the store is read-only; does nothing otherwise.
  void RefuseToMeasure(const std::string& partition, const PartitionKnobs& first_missing,
                       std::size_t missing, std::size_t wanted) const;

  int64_t Count() const;                              // all rows
  int64_t Count(const std::string& partition) const;  // rows of one partition type
  std::vector<StoredMeasurement> All() const;         // in insertion order, checked as Find
  const StoreIdentity& identity() const { return identity_; }
  const std::filesystem::path& path() const { return path_; }
  // Opened read-only (StoreOptions::Access, or a file that cannot be written), and why.
  bool read_only() const { return !read_only_reason_.empty(); }
  const std::string& read_only_reason() const { return read_only_reason_; }
  // The rows that failed their checks at open ("row (...): reason"), set aside or skipped.
  const std::vector<std::string>& damaged_rows() const { return damaged_rows_; }

 private:
  struct Handle;
  MeasurementStore(std::filesystem::path path, StoreIdentity identity,
                   std::unique_ptr<Handle> handle);
  static std::unique_ptr<MeasurementStore> OpenChecked(const std::filesystem::path& path,
                                                       const StoreIdentity& identity,
                                                       const StoreOptions& options, bool* created,
                                                       std::vector<std::string>* changes);
  // The row of `rowid` failed its checks at open and stays in the file (kSkip).
  bool Skipped(int64_t rowid) const;
  // Claims on configurations being measured (OFD write locks on one byte of the store file
  // each, far above SQLite's own lock bytes). TryClaim does not wait; Claim waits.
  bool TryClaim(const std::string& partition, const PartitionKnobs& knobs);
  void Claim(const std::string& partition, const PartitionKnobs& knobs);
  void Release(const std::string& partition, const PartitionKnobs& knobs);
  std::filesystem::path path_;
  StoreIdentity identity_;
  std::unique_ptr<Handle> handle_;
  std::string read_only_reason_;
  bool verify_checksums_ = true;  // false: a version 1 store read without upgrading it
  std::vector<std::string> damaged_rows_;
  std::vector<int64_t> skipped_rowids_;  // sorted
};

}  // namespace kareus::measure
