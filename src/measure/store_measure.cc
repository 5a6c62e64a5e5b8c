// SPDX-License-Identifier: Apache-2.0
// Storing measurements: Insert, the claims on configurations being measured, FindOrMeasure,
// RefuseToMeasure (part of MeasurementStore; see store_internal.h).
#include <algorithm>

#include <fmt/format.h>

#include "kareus/common/error.h"
#include "store_internal.h"

namespace kareus::measure {

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

}  // namespace kareus::measure
