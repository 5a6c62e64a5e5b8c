// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>
#include <random>

namespace kareus {

// State that travels through a run explicitly (never in globals): the seed every random choice
// derives from, and whether progress may be drawn on the terminal.
struct Context {
  uint64_t seed = 1;   // root seed; components derive their own streams with DeriveSeed
  bool quiet = false;  // suppress progress output even on a terminal
};

// A reproducible 64-bit seed for a named sub-stream (SplitMix64 over the root seed and a tag),
// so adding a consumer does not shift the random numbers another consumer sees.
uint64_t DeriveSeed(uint64_t root, uint64_t tag);
uint64_t HashString(const char* text);

using Rng = std::mt19937_64;

}  // namespace kareus
