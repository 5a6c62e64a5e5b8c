#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Makes perseus_4x16_unbalanced.csv, the Perseus-format profile (stage,instruction,frequency,
# time,energy; energy per GPU) of issue 17's unbalanced pipeline: 4 stages with 8, 7, 7, 6 of
# Llama 3.2 3B's 28 layers, one A100 per stage, 18 clocks 1410 -> 900 MHz in 30 MHz steps.
# Source: the emulator's sequential sweep of stage 1 (7 transformer layers, no embedding or
# output layer) of llama3.2-3b-pp4-unbalanced.yaml; every stage's row is that 7-layer
# instruction scaled by layers/7 (time and energy), so the stages differ only in their layer
# count (static power 85 W, unit time 1 ms are solver settings, not part of the file).
# Usage: make_perseus_4x16.sh KAREUS_BINARY > perseus_4x16_unbalanced.csv
set -euo pipefail
kareus=${1:?usage: $0 KAREUS_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for kind in forward backward; do
  "$kareus" simulate "$here/llama3.2-3b-pp4-unbalanced.yaml" --stage 1 --instruction "$kind" \
    --sweep --sequential --csv "$tmp/$kind.csv" > /dev/null
done
echo "stage,instruction,frequency,time,energy"
for stage_layers in 0:8 1:7 2:7 3:6; do
  stage=${stage_layers%%:*}
  layers=${stage_layers##*:}
  for kind in forward backward; do
    # columns of the sweep: freq_mhz,mode,time_s,energy_j,...
    awk -F, -v s="$stage" -v k="$kind" -v l="$layers" \
      'NR > 1 { printf "%d,%s,%d,%.9f,%.6f\n", s, k, $1, $3 * l / 7, $4 * l / 7 }' \
      "$tmp/$kind.csv"
  done
done
