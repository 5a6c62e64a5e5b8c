// SPDX-License-Identifier: Apache-2.0
#include "kareus/mobo/search_space.h"

#include <algorithm>
#include <cmath>

#include "kareus/common/error.h"

namespace kareus::mobo {

SearchSpace::SearchSpace(std::vector<int> clocks_mhz, std::vector<int> sms,
                         std::vector<std::string> slots)
    : clocks_(std::move(clocks_mhz)), sms_(std::move(sms)), slots_(std::move(slots)) {
  KAREUS_CHECK(!clocks_.empty() && !sms_.empty() && !slots_.empty()) << "empty search space";
}

SearchSpace SearchSpace::For(const hw::GpuSpec& gpu, const workload::PartitionType& partition,
                             bool full_grid) {
  std::vector<int> clocks = full_grid ? gpu.clock.Supported() : gpu.clock.ProfileGrid();
  if (clocks.empty()) {
    ThrowInput("gpu.clock", gpu.name, "the clock grid is empty");
  }
  if (!partition.tunable) {
    return SearchSpace(std::move(clocks), {partition.fixed_sms}, {partition.fixed_slot});
  }
  if (partition.sm_choices.empty() || partition.launch_slots.empty()) {
    ThrowInput("partition " + partition.name, "sm_choices/launch_slots",
               "a tunable partition needs at least one SM choice and one launch slot");
  }
  return SearchSpace(std::move(clocks), partition.sm_choices, partition.launch_slots);
}

measure::PartitionKnobs SearchSpace::At(int64_t index) const {
  KAREUS_CHECK(index >= 0 && index < Size()) << "index " << index << " outside the space";
  return measure::PartitionKnobs{.freq_mhz = clocks_[ClockIndex(index)],
                                 .sms = sms_[SmIndex(index)],
                                 .slot = slots_[SlotIndex(index)]};
}

int64_t SearchSpace::IndexOf(const measure::PartitionKnobs& knobs) const {
  const auto c = std::find(clocks_.begin(), clocks_.end(), knobs.freq_mhz);
  const auto s = std::find(sms_.begin(), sms_.end(), knobs.sms);
  const auto l = std::find(slots_.begin(), slots_.end(), knobs.slot);
  if (c == clocks_.end() || s == sms_.end() || l == slots_.end()) return -1;
  const int64_t ci = c - clocks_.begin(), si = s - sms_.begin(), li = l - slots_.begin();
  return (ci * static_cast<int64_t>(sms_.size()) + si) * static_cast<int64_t>(slots_.size()) + li;
}

std::vector<double> SearchSpace::Encode(int64_t index) const {
  const auto [min_clock, max_clock] = std::minmax_element(clocks_.begin(), clocks_.end());
  const auto [min_sm, max_sm] = std::minmax_element(sms_.begin(), sms_.end());
  const measure::PartitionKnobs knobs = At(index);
  std::vector<double> x(Dimensions(), 0.0);
  x[0] = *max_clock > *min_clock
             ? static_cast<double>(knobs.freq_mhz - *min_clock) / (*max_clock - *min_clock)
             : 0.0;
  // SMs on a log scale: a collective's time goes as 1/SMs until the bus saturates, so equal
  // steps in log(SMs) are closer to equal steps in time than equal SM counts are.
  x[1] = *max_sm > *min_sm ? std::log(static_cast<double>(knobs.sms) / *min_sm) /
                                 std::log(static_cast<double>(*max_sm) / *min_sm)
                           : 0.0;
  x[2 + SlotIndex(index)] = 1.0;
  return x;
}

}  // namespace kareus::mobo
