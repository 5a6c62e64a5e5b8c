#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job on a fresh machine: install what is missing, build in Release, and run Kareus on
# the first published configuration with the built-in GPU emulator.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKAREUS_BUILD_TESTS=OFF \
  -DKAREUS_BUILD_BENCHMARKS=OFF
cmake --build build -j "$(nproc)"

workload=${1:-examples/paper/01-llama3.2-3b-tp8-mbs8-seq4096.yaml}
out=${2:-out/$(basename "$workload" .yaml)}
./build/apps/kareus/kareus run "$workload" --out "$out"
echo "Open $out/report.html in a browser."
