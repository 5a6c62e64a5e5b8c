#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Profiler benchmark over every partition type of the ten published configurations
# (examples/paper/*.yaml) against the exhaustive noise-free oracle and random search at equal
# budget. Not part of CTest (about a minute per setting on two cores).
#
#   bench/profile_paper.sh [KAREUS_BINARY] [extra `kareus profile` flags...]
#   e.g. bench/profile_paper.sh build/apps/kareus/kareus --budget-fraction 0.12 --surrogate xgb
#
# Prints one row per tunable partition type (workload, type, space, evaluations, share, hv_ratio,
# random_hv_ratio, clock_hv_ratio, GPU-hours, and the ratios with the published-convention
# reference) and a summary (median/min hv_ratio, share of types where the optimizer beats
# random search, total GPU-hours). KAREUS_BENCH_JSON=DIR keeps the
# per-workload JSON documents.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:-$root/build/apps/kareus/kareus}"
shift || true
out="${KAREUS_BENCH_JSON:-$(mktemp -d)}"
mkdir -p "$out"
for wl in "$root"/examples/paper/*.yaml; do
  name="$(basename "$wl" .yaml)"
  "$bin" profile "$wl" --oracle --json --quiet "$@" > "$out/$name.json"
done
/usr/bin/env python3 - "$out" <<'PY'
import json, os, statistics, sys
rows = []
for f in sorted(os.listdir(sys.argv[1])):
    if not f.endswith('.json'):
        continue
    doc = json.load(open(os.path.join(sys.argv[1], f)))
    for t in doc['partitions']:
        if not t['tunable']:
            continue
        rows.append((f[:-5], t['type'], t['space_size'], t['evaluations'], t['budget_fraction'],
                     t['hv_ratio'], t['random_hv_ratio'], t['clock_hv_ratio'],
                     t['random_clock_hv_ratio'], t['gpu_seconds'] / 3600,
                     t['space_ref_hv_ratio'], t['random_space_ref_hv_ratio']))
print(f"{'workload':40s} {'type':11s} {'space':>5s} {'evals':>5s} {'share':>6s} {'hv_ratio':>8s} "
      f"{'random':>7s} {'clock_hv':>8s} {'rnd_clk':>7s} {'GPU-h':>6s} {'hv_spref':>8s} {'rnd_spr':>7s}")
for r in rows:
    print(f"{r[0]:40s} {r[1]:11s} {r[2]:5d} {r[3]:5d} {100*r[4]:5.1f}% {r[5]:8.4f} {r[6]:7.4f} "
          f"{r[7]:8.4f} {r[8]:7.4f} {r[9]:6.2f} {r[10]:8.4f} {r[11]:7.4f}")
hv = [r[5] for r in rows]
wins = sum(1 for r in rows if r[5] > r[6])
sp = [r[10] for r in rows]
sp_wins = sum(1 for r in rows if r[10] > r[11])
print(f"space reference: median hv_ratio {statistics.median(sp):.4f}  min {min(sp):.4f}  "
      f"beats random {sp_wins}/{len(rows)} ({100*sp_wins/len(rows):.0f}%)  "
      f"(random median {statistics.median(r[11] for r in rows):.4f})")
print(f"types {len(rows)}  median hv_ratio {statistics.median(hv):.4f}  min {min(hv):.4f}  "
      f"mean clock_hv {statistics.mean(r[7] for r in rows):.4f} (random {statistics.mean(r[8] for r in rows):.4f})  "
      f"max share {100*max(r[4] for r in rows):.1f}%  beats random {wins}/{len(rows)} "
      f"({100*wins/len(rows):.0f}%)  GPU-hours {sum(r[9] for r in rows):.1f}  "
      f"(random median {statistics.median(r[6] for r in rows):.4f})")
PY
