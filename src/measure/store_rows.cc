// SPDX-License-Identifier: Apache-2.0
// A row as stored: the columns read, a row's checks and checksum (ReadRow), the meta table's
// checksum, a row's name, the timestamps (part of MeasurementStore; see store_internal.h).
#include <chrono>
#include <climits>
#include <cmath>
#include <ctime>

#include <fmt/format.h>

#include "kareus/common/error.h"
#include "store_internal.h"

namespace kareus::measure::internal {
namespace {

const char* const kValueNames[] = {"time_s",           "energy_j",          "static_energy_j",
                                   "dynamic_energy_j", "realized_freq_mhz", "gpu_seconds"};

}  // namespace

// What is read: a version 1 store (read without upgrading it) has no checksum column.
const char* ReadColumns(bool has_checksum) {
  return has_checksum ? kColumns
                      : "gpu, workload, partition, freq_mhz, sms, slot, time_s, energy_j, "
                        "static_energy_j, dynamic_energy_j, realized_freq_mhz, gpu_seconds, "
                        "noise_free, measured_at, NULL AS checksum";
}

std::string UtcNow() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

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

}  // namespace kareus::measure::internal
