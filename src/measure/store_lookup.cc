// SPDX-License-Identifier: Apache-2.0
// Reading what a measurement store holds: Find, Count, All, each row checked (part of
// MeasurementStore; see store_internal.h).
#include <algorithm>

#include <fmt/format.h>

#include "store_internal.h"

namespace kareus::measure {

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
