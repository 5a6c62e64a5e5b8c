// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: the Perseus profile CSV reader (kareus solve's input). The first byte picks
// the stage count (1..4); the rest is the file. Any input must give stage options or an
// InputError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kareus/common/error.h"
#include "kareus/plan/perseus.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int stages = 1 + data[0] % 4;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const auto options = kareus::plan::PerseusProfileFromText(text, "fuzz.csv", stages);
    if (static_cast<int>(options.size()) != stages) __builtin_trap();
  } catch (const kareus::InputError&) {
  }
  return 0;
}
