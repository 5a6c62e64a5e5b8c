// SPDX-License-Identifier: Apache-2.0
// The measurement store: every measurement of a profiling run, in a SQLite file, committed as
// it arrives (WAL journal), keyed by (GPU, workload signature, partition type, knobs). A killed
// run resumes from it without re-measuring. A file that is not such a store (corrupted, another
// schema, another schema version) or that belongs to another GPU, workload or backend is
// reported and never modified.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

class MeasurementStore {
 public:
  static constexpr const char* kFormat = "kareus-measurement-store";
  static constexpr int kSchemaVersion = 1;

  // Opens `path`, creating a new store when the file does not exist (or is empty). Throws
  // EnvironmentError naming the path and the reason when the file cannot be used; the file is
  // then left exactly as it was.
  static std::unique_ptr<MeasurementStore> Open(const std::filesystem::path& path,
                                                const StoreIdentity& identity);
  ~MeasurementStore();
  MeasurementStore(const MeasurementStore&) = delete;
  MeasurementStore& operator=(const MeasurementStore&) = delete;

  std::optional<Sample> Find(const std::string& partition, const PartitionKnobs& knobs) const;
  // Inserts and commits one measurement (durable when this returns). A configuration already
  // present is a caller bug (it should have been found): EnvironmentError.
  void Insert(const std::string& partition, const PartitionKnobs& knobs, const Sample& sample);

  int64_t Count() const;                              // all rows
  int64_t Count(const std::string& partition) const;  // rows of one partition type
  std::vector<StoredMeasurement> All() const;         // in insertion order
  const StoreIdentity& identity() const { return identity_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  struct Handle;
  MeasurementStore(std::filesystem::path path, StoreIdentity identity,
                   std::unique_ptr<Handle> handle);
  std::filesystem::path path_;
  StoreIdentity identity_;
  std::unique_ptr<Handle> handle_;
};

}  // namespace kareus::measure
