#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole test suite on a fresh machine: install what is missing, build everything (tests and
# benchmarks included, warnings as errors) and run CTest.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=Release -DKAREUS_BUILD_TESTS=ON \
  -DKAREUS_BUILD_BENCHMARKS=ON -DKAREUS_WARNINGS_AS_ERRORS=ON
cmake --build build-test -j "$(nproc)"
ctest --test-dir build-test --output-on-failure -j "$(nproc)"
