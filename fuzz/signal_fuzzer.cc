// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: kareus schedule's signal CSV reader and time parsers. A signal either reads
// as one (times strictly increasing, finite values >= 0, an end after the last time) or is an
// InputError; a time or a duration parses or is refused, never anything else.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kareus/common/error.h"
#include "kareus/plan/timetable.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const kareus::plan::Signal s = kareus::plan::ParseSignalCsv(text, "fuzz.csv", "--signal");
    if (s.time.size() < 2 || s.time.size() != s.value.size()) __builtin_trap();
    for (std::size_t i = 0; i < s.time.size(); ++i) {
      if (!std::isfinite(s.time[i]) || !std::isfinite(s.value[i]) || s.value[i] < 0)
        __builtin_trap();
      if (i > 0 && !(s.time[i] > s.time[i - 1])) __builtin_trap();
    }
    if (!(s.end > s.time.back())) __builtin_trap();
  } catch (const kareus::InputError&) {
  }
  const std::string line(text.substr(0, text.find('\n')));
  if (const auto t = kareus::plan::ParseUtcTime(line)) {
    if (!std::isfinite(*t)) __builtin_trap();
    (void)kareus::plan::FormatUtcTime(*t);
  }
  if (const auto d = kareus::plan::ParseDuration(line)) {
    if (!(*d > 0)) __builtin_trap();
  }
  return 0;
}
