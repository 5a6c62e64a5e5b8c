#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Scaling benchmark of distributed planning: profiles each of the ten published configurations
# (examples/paper/*.yaml) with `mpirun -np N kareus profile` for N in 1 2 4 (oversubscribed on a
# small machine, so wall time says nothing: it reports work units per rank and the load balance,
# max / mean busy time, where busy time is the backend's GPU-seconds per rank), and checks that
# every N prints the same bytes as one process without mpirun. Not part of CTest (a few minutes
# on two cores).
#
#   bench/profile_mpi.sh [KAREUS_BINARY] [extra `kareus profile` flags...]
#   e.g. bench/profile_mpi.sh build/apps/kareus/kareus --unit-size 4
#
# KAREUS_BENCH_RANKS="1 2 4" chooses the rank counts; KAREUS_BENCH_JSON=DIR keeps the profiles
# and rank reports.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:-$root/build/apps/kareus/kareus}"
shift || true
ranks="${KAREUS_BENCH_RANKS:-1 2 4}"
out="${KAREUS_BENCH_JSON:-$(mktemp -d)}"
mkdir -p "$out"
mpirun="$(command -v mpirun)"
for wl in "$root"/examples/paper/*.yaml; do
  name="$(basename "$wl" .yaml)"
  "$bin" profile "$wl" --json --quiet "$@" > "$out/$name.single.json"
  for n in $ranks; do
    "$mpirun" --oversubscribe --allow-run-as-root -np "$n" "$bin" profile "$wl" --json --quiet \
      --rank-report "$out/$name.np$n.ranks.json" "$@" > "$out/$name.np$n.json"
    if ! cmp -s "$out/$name.single.json" "$out/$name.np$n.json"; then
      echo "profile_mpi: $name with $n ranks differs from one process" >&2
      exit 1
    fi
  done
done
/usr/bin/env python3 - "$out" $ranks <<'PY'
import json, os, sys
folder, ranks = sys.argv[1], [int(n) for n in sys.argv[2:]]
names = sorted(f[:-12] for f in os.listdir(folder) if f.endswith('.single.json'))
print(f"{'workload':40s} {'batches':>7s} {'GPU-h':>6s} " +
      " ".join(f"{'np'+str(n)+' units/rank':>22s} {'balance':>7s}" for n in ranks))
worst = {n: 0.0 for n in ranks}
for name in names:
    profile = json.load(open(os.path.join(folder, name + '.single.json')))
    batches = sum(p["batches"] for p in profile["partitions"])
    cells = []
    for n in ranks:
        rep = json.load(open(os.path.join(folder, f"{name}.np{n}.ranks.json")))
        per = "/".join(str(r['units']) for r in rep['per_rank'])
        worst[n] = max(worst[n], rep['load_balance'])
        cells.append(f"{per:>22s} {rep['load_balance']:7.3f}")
    print(f"{name:40s} {batches:7d} {profile['gpu_seconds'] / 3600:6.2f} " + " ".join(cells))
print("worst load balance (max / mean busy GPU-seconds): " +
      ", ".join(f"np{n} {worst[n]:.3f}" for n in ranks) +
      "; every rank count printed the same bytes as one process")
PY
