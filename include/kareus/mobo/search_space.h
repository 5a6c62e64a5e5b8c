// SPDX-License-Identifier: Apache-2.0
// The per-partition search space (reference/kareus-official.md §2): clock grid x comm SMs x
// launch slots, its enumeration and the encoding surrogates see.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kareus/hw/gpu_spec.h"
#include "kareus/measure/backend.h"
#include "kareus/workload/ops.h"

namespace kareus::mobo {

class SearchSpace {
 public:
  SearchSpace(std::vector<int> clocks_mhz, std::vector<int> sms, std::vector<std::string> slots);

  // The space of a tunable partition type: the GPU's profiling sub-grid (published: 1410..900
  // by 30 on A100) or, with full_grid, every supported clock; the type's SM choices and launch
  // slots. A non-tunable type has one SM count and one slot (its fixed knobs).
  static SearchSpace For(const hw::GpuSpec& gpu, const workload::PartitionType& partition,
                         bool full_grid);

  int64_t Size() const {
    return static_cast<int64_t>(clocks_.size() * sms_.size() * slots_.size());
  }
  const std::vector<int>& clocks_mhz() const { return clocks_; }
  const std::vector<int>& sms() const { return sms_; }
  const std::vector<std::string>& slots() const { return slots_; }

  // Index order: clock-major, then SMs, then slot.
  measure::PartitionKnobs At(int64_t index) const;
  int64_t IndexOf(const measure::PartitionKnobs& knobs) const;  // -1 when not in the space
  int ClockIndex(int64_t index) const {
    return static_cast<int>(index / (sms_.size() * slots_.size()));
  }
  int SmIndex(int64_t index) const {
    return static_cast<int>((index / slots_.size()) % sms_.size());
  }
  int SlotIndex(int64_t index) const { return static_cast<int>(index % slots_.size()); }

  // Surrogate features: [clock scaled to [0, 1] over the grid, log(SMs) scaled to [0, 1],
  // one-hot slot]. The published encoding is [freq_MHz, sm_idx, one_hot(slot)] (§2.3); scaling is
  // an order-preserving relabel for trees and gives the GP comparable length scales.
  int Dimensions() const { return 2 + static_cast<int>(slots_.size()); }
  std::vector<double> Encode(int64_t index) const;

 private:
  std::vector<int> clocks_;
  std::vector<int> sms_;
  std::vector<std::string> slots_;
};

}  // namespace kareus::mobo
