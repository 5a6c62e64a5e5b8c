# SPDX-License-Identifier: Apache-2.0
# Sourced by scripts/fuzz.sh and scripts/sanitize.sh: configures the one clang build folder both
# use (ASan + UBSan with UB fatal, libFuzzer instrumentation, tests on), so the libraries are
# compiled once for both and the two scripts cannot drift apart.
#   configure_sanitizer_build BUILD_DIR
configure_sanitizer_build() {
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DKAREUS_BUILD_FUZZERS=ON -DKAREUS_BUILD_TESTS=ON -DKAREUS_BUILD_BENCHMARKS=OFF \
    -DKAREUS_SANITIZERS="address;undefined" \
    -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined" >/dev/null
}
