// SPDX-License-Identifier: Apache-2.0
#include "kareus/common/context.h"

namespace kareus {

uint64_t DeriveSeed(uint64_t root, uint64_t tag) {
  // SplitMix64 (Steele, Lea, Flood 2014): a bijective mixer with good avalanche.
  uint64_t z = root + 0x9e3779b97f4a7c15ULL * (tag + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t HashString(const char* text) {
  // FNV-1a, 64 bit: stable across runs and platforms, unlike std::hash.
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char* p = text; *p != '\0'; ++p) {
    h ^= static_cast<unsigned char>(*p);
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace kareus
