#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The calibration data run for a lent GPU machine (read-only: no clock or power-limit change):
# scripts/device-power-probe.py (steady loads: power, clocks, rates; needs PyTorch + pynvml),
# then `kareus device-check` on every workload in examples/device/. Uses the bundle that
# `scripts/device-check.sh --bundle` packs (carry .device-bundle). About 3.5 minutes on one H200.
# Outputs in $OUT: power-probe.json/.log, dc-<workload>.json, dc.txt (the text reports).
# The 2026-11-29 H200 run is in data/validation/h200-device/.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-check-out}
mkdir -p "$OUT"
B=$PWD/.device-bundle
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} KAREUS_DATA_DIR=$PWD/data
export KAREUS_CUDA_LIBRARY_PATH=${KAREUS_CUDA_LIBRARY_PATH:-/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu}
ldd "$B/bin/kareus" | grep -q "not found" && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$B/lib-fallback
nvidia-smi --query-gpu=name,power.limit,clocks.sm,temperature.gpu,power.draw --format=csv
PYTHONUNBUFFERED=1 timeout 170 python3 scripts/device-power-probe.py 2>&1 | tee "$OUT/power-probe.log"
for w in examples/device/*.yaml; do
  n=$(basename "$w" .yaml)
  echo "=== $n $(date +%T)" | tee -a "$OUT/dc.txt"
  timeout 150 "$B/bin/kareus" device-check --output "$OUT/dc-$n.json" "$w" >>"$OUT/dc.txt" 2>&1
  echo "exit $?" | tee -a "$OUT/dc.txt"
done
grep -A12 "partitions: measured" "$OUT/dc.txt"
nvidia-smi --query-gpu=name,power.limit,clocks.sm,temperature.gpu,power.draw --format=csv
