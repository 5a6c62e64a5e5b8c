#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The fast test executables built with clang under AddressSanitizer + UndefinedBehaviorSanitizer
# (UB fatal, leaks reported), in the build folder the fuzzers use (scripts/fuzz.sh), so the
# libraries are compiled once for both. The slow suites (the solver's 200-DAG gap test, the
# end-to-end runs) stay in the Release run of scripts/test.sh.
#   scripts/sanitize.sh
# Env: KAREUS_FUZZ_BUILD_DIR (default build-fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."

build=${KAREUS_FUZZ_BUILD_DIR:-build-fuzz}
tests=(common_test hw_test workload_test plan_file_test plan_solver_test measure_test runtime_test
       runtime_clock_reset_test timetable_test runtime_budget_test)

source scripts/lib/sanitizer_build.sh
configure_sanitizer_build "$build"
cmake --build "$build" -j "$(nproc)" --target "${tests[@]}" kareus_fake_nvml kareus_clock_watcher
regex="^($(IFS='|'; echo "${tests[*]}"))\$"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
  ctest --test-dir "$build" -R "$regex" --output-on-failure -j "$(nproc)"
