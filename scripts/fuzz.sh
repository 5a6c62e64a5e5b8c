#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer harnesses of fuzz/ with clang (-fsanitize=fuzzer,address,undefined, UB
# fatal), replays every saved regression input, then fuzzes each harness for SECONDS (default 60)
# from its seed corpus (examples/, tests/ and fuzz/corpus/). Fails on any crash, sanitizer
# report, timeout (10 s per input) or memory blow-up (2 GiB); the input that did it is saved
# under $build/fuzz-work/artifacts/ and belongs in fuzz/regressions/<fuzzer>/ once fixed.
#   scripts/fuzz.sh [SECONDS] [workload|profile_csv|plan|store|signal|csv ...]
# Env: KAREUS_FUZZ_BUILD_DIR (default build-fuzz), KAREUS_FUZZ_JOBS (harnesses side by side;
# default: the number of cores).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
fuzzers=("$@")
[ ${#fuzzers[@]} -eq 0 ] && fuzzers=(workload profile_csv plan store signal csv)
build=${KAREUS_FUZZ_BUILD_DIR:-build-fuzz}

source scripts/lib/sanitizer_build.sh
configure_sanitizer_build "$build"
cmake --build "$build" -j "$(nproc)" --target fuzzers

work="$build/fuzz-work"
mkdir -p "$work/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

seed() {  # seed NAME DIR: copy the seed corpus of NAME into DIR
  local name=$1 dir=$2
  case "$name" in
    workload) cp examples/*.yaml examples/paper/*.yaml "$dir"/ ;;
    plan) cp tests/runtime/data/*.json "$dir"/ ;;
    signal) cp examples/signals/*.csv "$dir"/ ;;
    csv) cp examples/signals/*.csv tests/pipeline/data/*.csv data/validation/*.csv "$dir"/ ;;
    store)
      sqlite3 "$dir/store.sqlite" <fuzz/corpus/store/store.sql >/dev/null
      sqlite3 "$dir/store-wal.sqlite" <fuzz/corpus/store/store.sql >/dev/null
      sqlite3 "$dir/store-wal.sqlite" "PRAGMA journal_mode=WAL;" >/dev/null
      : >"$dir/empty.sqlite"
      ;;
  esac
  if compgen -G "fuzz/corpus/$name/*" >/dev/null; then
    find "fuzz/corpus/$name" -type f ! -name '*.sql' -exec cp {} "$dir"/ \;
  fi
}

# One harness: replay its regression inputs, then fuzz it. Prints its lines when done (the
# harnesses run side by side, one per core).
run_one() {
  local name=$1
  local binary="$build/fuzz/fuzz_$name"
  local corpus="$work/corpus/$name"
  local report="$work/$name.report"
  rm -rf "$corpus"
  mkdir -p "$corpus"
  seed "$name" "$corpus"
  : >"$report"
  if compgen -G "fuzz/regressions/$name/*" >/dev/null; then
    echo "fuzz: $name: replaying $(ls "fuzz/regressions/$name" | wc -l) regression inputs" >>"$report"
    if ! "$binary" -runs=0 fuzz/regressions/"$name"/* 2>"$work/$name.replay.log"; then
      tail -40 "$work/$name.replay.log" >>"$report"
      echo "fuzz: $name: a regression input fails again" >>"$report"
      return 1
    fi
  fi
  echo "fuzz: $name: $seconds s from $(ls "$corpus" | wc -l) seeds" >>"$report"
  if "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$work/artifacts/$name-" "$corpus" >"$work/$name.log" 2>&1; then
    local runs
    runs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$work/$name.log" | grep -o '[0-9]*$' || true)
    echo "fuzz: $name: clean, ${runs:-?} inputs in $seconds s ($(( ${runs:-0} / seconds )) exec/s)" \
      >>"$report"
  else
    tail -60 "$work/$name.log" >>"$report"
    echo "fuzz: $name: FAILED; the input is in $work/artifacts/ (add it to fuzz/regressions/$name/" \
         "once fixed)" >>"$report"
    return 1
  fi
}

# At most one harness per core at a time (CI: 2 cores, so 4 x 60 s take 2 minutes).
jobs=${KAREUS_FUZZ_JOBS:-$(nproc)}
status=0
pids=()
for name in "${fuzzers[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run_one "$name" &
  pids+=("$!")
done
for i in "${!fuzzers[@]}"; do
  wait "${pids[$i]}" || status=1
  cat "$work/${fuzzers[$i]}.report"
done
exit $status
