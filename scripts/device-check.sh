#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The one prepared run for a machine with an NVIDIA GPU: build with CUDA (or use a prepared
# bundle), run the GPU tests, and write `kareus device-check --json` to $OUT/device-check.json.
# Read-only for the GPU: it never changes clocks or power limits (no --allow-clock-control).
#
#   bash scripts/device-check.sh            on the GPU machine (about 2-6 minutes on one H200)
#   bash scripts/device-check.sh --bundle [BUILD_DIR]
#                                           on a build machine (no GPU needed): builds with CUDA
#                                           (in BUILD_DIR, default build-bundle; an existing CUDA
#                                           build such as `build` is reused) and packs
#                                           .device-bundle/ (git-ignored; carry it to a GPU
#                                           machine that lacks the build dependencies)
#   KAREUS_DEVICE_CHECK_BUILD=0             skip the build and use the bundle, or
#   KAREUS_DEVICE_CHECK_BUILD_DIR=DIR       the binaries of an existing build (e.g. one carried
#                                           to the GPU machine; the test suite runs the script
#                                           this way on its own build)
#
# On the GPU machine each phase has its own time limit and reports its own failure; the next
# phase still runs, and device-check.json is written whatever happens (kareus's report, or a
# report of the phases when kareus could not run). Outputs in $OUT (default ./device-check-out):
#   device-check.json  the report (+ "script": how this script got there)
#   device-check.txt   the same as text tables
#   gpu-tests.log      the GPU tests (cuda_device_test) and the orchestration tests
#   build.log          setup and build output
#   nvidia-smi.txt     nvidia-smi -q, read-only
#   script.log         everything this script printed
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUNDLE=$ROOT/.device-bundle

log() { echo "[device-check $(date +%H:%M:%S)] $*"; }

# --- Build machine: pack a bundle -------------------------------------------------------------
if [ "${1:-}" = "--bundle" ]; then
  set -e
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$ROOT} CCACHE_DIR=${CCACHE_DIR:-$HOME/.ccache}
  launcher=()
  if command -v ccache >/dev/null 2>&1; then
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  # An existing Release build configured with CUDA (e.g. `build`) is reused when named.
  dir=${2:-build-bundle}
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKAREUS_WITH_CUDA=ON \
      -DKAREUS_BUILD_BENCHMARKS=OFF "${launcher[@]}"
  fi
  cmake --build "$dir" -j "$(nproc)" --target kareus cuda_device_test kareus_clock_watcher
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/bin" "$BUNDLE/lib" "$BUNDLE/lib-fallback"
  # kareus-clock-watcher beside kareus: the runtime finds it there and locks no clock without it.
  cp "$dir/apps/kareus/kareus" "$dir/tests/measure/cuda/cuda_device_test" \
    "$dir/src/device/kareus-clock-watcher" "$BUNDLE/bin/"
  strip "$BUNDLE/bin/"* || true
  # Every shared library the binaries load except the C library's, the driver's and the GPU
  # machine's own; libstdc++ and libgcc_s only as a fallback (a newer one there is preferred).
  for bin in "$BUNDLE/bin/"*; do
    ldd "$bin" | awk '/=> \//{print $3}'
  done | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*|libnvidia-ml.so*) ;;
      libstdc++.so*|libgcc_s.so*) cp -L "$lib" "$BUNDLE/lib-fallback/" ;;
      *) cp -L "$lib" "$BUNDLE/lib/" ;;
    esac
  done
  {
    echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(ldd --version | head -1)"
    du -sh "$BUNDLE" | cut -f1
  } >"$BUNDLE/MANIFEST"
  log "bundle ready: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1)); carry .device-bundle to the GPU machine"
  exit 0
fi

# --- GPU machine ----------------------------------------------------------------------------
OUT=${OUT:-$ROOT/device-check-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/script.log") 2>&1
START=$(date +%s)
declare -A PHASE
note() { PHASE[$1]=$2; log "$1: $2"; }

log "start in $ROOT, output in $OUT; read-only: no clock or power-limit changes"
if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 60 nvidia-smi -q >"$OUT/nvidia-smi.txt" 2>&1 && note nvidia_smi ok || note nvidia_smi "failed ($?)"
  nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.sm --format=csv 2>&1 | sed 's/^/  /'
else
  note nvidia_smi "not installed"
fi

# cuBLASLt and NCCL for the dlopen loader: the toolkit's folder, the loader's cache, and the
# pip packages of a Python install (nvidia-cublas, nvidia-nccl-*).
lib_dirs=()
for lib in libcublasLt.so.13 libnccl.so.2; do
  found=""
  for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do
    [ -e "$dir/$lib" ] && { found=$dir; break; }
  done
  if [ -z "$found" ]; then
    path=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF; exit}')
    [ -n "$path" ] && found=$(dirname "$path")
  fi
  if [ -z "$found" ] && command -v python3 >/dev/null 2>&1; then
    for site in $(python3 -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
      path=$(ls "$site"/nvidia/*/lib/"$lib" 2>/dev/null | head -1)
      [ -n "$path" ] && { found=$(dirname "$path"); break; }
    done
  fi
  if [ -z "$found" ]; then
    path=$(timeout 30 find /usr /opt /root /home -name "$lib" -print -quit 2>/dev/null)
    [ -n "$path" ] && found=$(dirname "$path")
  fi
  if [ -n "$found" ]; then
    lib_dirs+=("$found")
    note "lib_$lib" "$found"
  else
    note "lib_$lib" "not found"
  fi
done
KAREUS_CUDA_LIBRARY_PATH=$(IFS=:; echo "${lib_dirs[*]:-}")
export KAREUS_CUDA_LIBRARY_PATH
export KAREUS_DATA_DIR=$ROOT/data

# Build here when the dependencies are present (configure finds them, or setup.sh can install
# them where a package registry is reachable); otherwise use the bundle if one was carried.
BIN=""
configure() {
  timeout 180 cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DKAREUS_WITH_CUDA=ON \
    -DKAREUS_BUILD_BENCHMARKS=OFF
}
if [ "${KAREUS_DEVICE_CHECK_BUILD:-1}" = 0 ]; then
  note configure "skipped (KAREUS_DEVICE_CHECK_BUILD=0)"
else {
  log "configure"
  configured=0
  if configure; then
    note configure ok
    configured=1
  else
    note configure "failed: dependencies missing; trying scripts/setup.sh"
    if timeout 120 bash scripts/setup.sh; then note setup ok; else note setup "failed ($?): no package registry here?"; fi
    if configure; then note configure "ok after setup"; configured=1; else note configure "failed ($?)"; fi
  fi
  if [ "$configured" = 1 ]; then
    log "build"
    if timeout 300 cmake --build build-device -j "$(nproc)" --target kareus cuda_device_test cuda_orchestration_test; then
      note build ok
      BIN=$ROOT/build-device
    else
      note build "failed ($?)"
    fi
  fi
} >"$OUT/build.log" 2>&1
fi
[ -f "$OUT/build.log" ] && tail -n 3 "$OUT/build.log" | sed 's/^/  /'

if [ -z "$BIN" ] && [ -n "${KAREUS_DEVICE_CHECK_BUILD_DIR:-}" ]; then
  if [ -x "$KAREUS_DEVICE_CHECK_BUILD_DIR/apps/kareus/kareus" ]; then
    BIN=$(cd "$KAREUS_DEVICE_CHECK_BUILD_DIR" && pwd)
  else
    note build_dir "no apps/kareus/kareus in $KAREUS_DEVICE_CHECK_BUILD_DIR"
  fi
fi

KAREUS=""
GPU_TEST=""
if [ -n "$BIN" ]; then
  KAREUS=$BIN/apps/kareus/kareus
  GPU_TEST=$BIN/tests/measure/cuda/cuda_device_test
  note binaries "build $BIN"
elif [ -x "$BUNDLE/bin/kareus" ]; then
  export LD_LIBRARY_PATH=$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if ldd "$BUNDLE/bin/kareus" 2>&1 | grep -q -e "not found"; then
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$BUNDLE/lib-fallback
  fi
  KAREUS=$BUNDLE/bin/kareus
  GPU_TEST=$BUNDLE/bin/cuda_device_test
  note binaries "bundle ($(head -1 "$BUNDLE/MANIFEST" 2>/dev/null))"
  ldd "$KAREUS" 2>&1 | grep -e "not found" -e "version" | sed 's/^/  missing: /'
else
  note binaries "none: no build (failed or skipped) and no .device-bundle was carried"
fi

# GPU tests (and, when built here, the orchestration tests on the fake device).
if [ -n "$GPU_TEST" ] && [ -x "$GPU_TEST" ]; then
  {
    log "cuda_device_test"
    timeout 300 "$GPU_TEST" --gtest_color=no
    echo "exit $?"
    if [ -n "$BIN" ]; then
      log "cuda_orchestration_test"
      KAREUS_SOURCE_DIR=$ROOT timeout 120 "$BIN/tests/measure/cuda/cuda_orchestration_test" --gtest_color=no
      echo "exit $?"
    fi
  } >"$OUT/gpu-tests.log" 2>&1
  # The count lines and the names listed under them (failed or skipped tests), and exit codes.
  summary=$(grep -E '^\[  (PASSED  |FAILED  |SKIPPED )\] ([0-9]+ tests?|[A-Za-z0-9_/]+\.[A-Za-z0-9_/]+$)|^exit ' \
    "$OUT/gpu-tests.log" | tr '\n' ' ')
  note gpu_tests "$summary"
else
  note gpu_tests "not run (no cuda_device_test: no binaries, or built without CUDA)"
fi

# The device check itself: the JSON report to a file, the text tables to device-check.txt.
if [ -n "$KAREUS" ] && [ -x "$KAREUS" ]; then
  log "kareus device-check"
  timeout 300 "$KAREUS" device-check --output "$OUT/device-check.json" \
    "$ROOT/examples/device/llama3.2-3b-tp8-h200.yaml" >"$OUT/device-check.txt" 2>&1
  code=$?
  note device_check "exit $code (0: every section ok; 2: some failed, see the report)"
  sed 's/^/  /' "$OUT/device-check.txt"
else
  note device_check "not run (no binaries)"
fi

# device-check.json always exists: kareus's report with this script's phases, or the phases
# alone.
ELAPSED=$(( $(date +%s) - START ))
phases_json="{"
for key in "${!PHASE[@]}"; do
  value=${PHASE[$key]//\\/\\\\}
  value=${value//\"/\\\"}
  phases_json+="\"$key\": \"$value\", "
done
phases_json+="\"elapsed_s\": $ELAPSED}"
if [ -s "$OUT/device-check.json" ] && command -v python3 >/dev/null 2>&1; then
  python3 - "$OUT/device-check.json" "$phases_json" <<'EOF' || true
import json, sys
path, phases = sys.argv[1], json.loads(sys.argv[2])
report = json.load(open(path))
report["script"] = phases
json.dump(report, open(path + ".tmp", "w"), indent=2)
import os
os.replace(path + ".tmp", path)
EOF
elif [ ! -s "$OUT/device-check.json" ]; then
  printf '{"format": "kareus-device-check", "version": 1, "status": "error", "error": "kareus device-check did not run; see script.log and build.log", "script": %s}\n' \
    "$phases_json" >"$OUT/device-check.json"
fi
for key in "${!PHASE[@]}"; do log "  $key: ${PHASE[$key]}"; done
log "done in ${ELAPSED}s: $OUT/device-check.json"
exit 0
