#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole test suite on a fresh machine: install what is missing, check the formatting
# (scripts/format.sh --check), build everything (tests and benchmarks included, warnings as
# errors) and run CTest; then the fast tests under ASan + UBSan and every fuzzer for a bounded
# time (clang builds in build-fuzz/, shared by both).
#   KAREUS_FUZZ_SECONDS=60 (per fuzzer; 0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
bash scripts/format.sh --check  # every C/C++/CUDA source as clang-format writes it
cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=Release -DKAREUS_BUILD_TESTS=ON \
  -DKAREUS_BUILD_BENCHMARKS=ON -DKAREUS_WARNINGS_AS_ERRORS=ON
cmake --build build-test -j "$(nproc)"
ctest --test-dir build-test --output-on-failure -j "$(nproc)"

bash scripts/sanitize.sh
fuzz_seconds=${KAREUS_FUZZ_SECONDS:-60}
if [ "$fuzz_seconds" -gt 0 ]; then
  bash scripts/fuzz.sh "$fuzz_seconds"
fi
