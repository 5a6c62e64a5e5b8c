#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# A model (not a measurement) of distributed profiling on a cluster: from the batch structure
# the profiler really produced (`kareus profile W --json --evaluations` of every workload, one
# file each in FOLDER), it schedules every type's chain of batches on R ranks (one 8-GPU node
# each; a unit takes the backend's 10 s warm-up + 12 s per measurement; a unit starts on the
# rank that frees first, as the planner's least-loaded rule does when ranks run in real time)
# and prints the makespan, the busy rank-hours and the utilization, with whole batches as
# units and with --unit-size 4.
#
#   for f in examples/paper/*.yaml; do kareus profile $f --quiet --json --evaluations > DIR/$(basename $f .yaml).json; done
#   bench/cluster_model.py DIR
import json, os, heapq, math, sys
folder = sys.argv[1]
types = []  # list of (name, [batch sizes])
for f in sorted(os.listdir(folder)):
    if not f.endswith('.json'): continue
    d = json.load(open(os.path.join(folder, f)))
    for t in d['partitions']:
        sizes = {}
        for e in t['evaluated']:
            sizes[e['batch']] = sizes.get(e['batch'], 0) + 1
        types.append((f[:2] + '/' + t['type'], [sizes[b] for b in sorted(sizes)]))
WARM, MEAS = 10.0, 12.0
def units(n, u):
    if u == 0: return [n]
    return [min(u, n - i) for i in range(0, n, u)]
def simulate(R, u):
    free = [(0.0, r) for r in range(R)]; heapq.heapify(free)
    # event-driven: ready queue ordered by ready time; assign to earliest-free rank
    ready = [(0.0, i, 0) for i in range(len(types))]  # (ready time, type, batch)
    heapq.heapify(ready)
    busy = 0.0; end = 0.0
    while ready:
        t, i, b = heapq.heappop(ready)
        finish = t
        for k in units(types[i][1][b], u):
            f0, r = heapq.heappop(free)
            start = max(f0, t); dur = WARM + k * MEAS
            heapq.heappush(free, (start + dur, r)); busy += dur
            finish = max(finish, start + dur)
        end = max(end, finish)
        if b + 1 < len(types[i][1]): heapq.heappush(ready, (finish, i, b + 1))
    return end, busy
crit = {u: max(sum(WARM + max(units(n,u))*MEAS for n in bs) for _, bs in types) for u in (0, 4)}
print(f"types {len(types)}, batches {sum(len(b) for _, b in types)}, measurements {sum(sum(b) for _, b in types)}")
for u in (0, 4):
    print(f"unit_size {u}: critical path (longest type) {crit[u]/60:.1f} min")
    for R in (1, 8, 64, 128):
        end, busy = simulate(R, u)
        print(f"  {R:4d} ranks: makespan {end/3600:6.2f} h  rank-busy {busy/3600:6.1f} h  utilization {busy/(R*end):.2f}")
