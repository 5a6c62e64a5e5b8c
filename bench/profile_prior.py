#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The profiler with a model-informed prior and transfer (issue 18), over every tunable
partition type of the ten paper configurations (examples/paper/*.yaml), against the exhaustive
noise-free oracle: HV ratio (strict reference) per type at several budget shares, with no
prior, with the exact prior (the emulator's own model: the truth up to noise, so results hold
largely by construction), with deliberately mismatched priors (a perturbed GPU model: the
measure of the method), with a harmful prior, and with transfer from a related workload's store.
Also the GPU-hours each setting needs per type to reach HV ratio 0.99.

Not part of CTest: one share over the ten configurations x 3 seeds x 5-6 settings takes 10-40
minutes on the loaded two-core machine (more at larger shares). Re-runnable after any change of
the emulator's physics; everything it reports is measured in the run.

  bench/profile_prior.py [--kareus build/apps/kareus/kareus] [--fractions 0.03,0.05,0.10,0.15]
                         [--seeds 1,2,3] [--settings none,exact,P1,P2,P3,P4,harmful,invert,transfer]
                         [--workloads 02,08] [--extra '--strategy believer']
                         [--out DIR] [--jobs N] [--markdown]
  bench/profile_prior.py --merge DIR1/results.json DIR2/results.json ... [--markdown]
                         (the tables over saved runs, nothing measured)

Settings:
  none      --prior none
  exact     --prior model (the emulator's noise-free model of the same preset)
  P1..P4    --prior model --prior-perturb <a perturbed GPU model> (PERTURBATIONS below)
  harmful   --prior model --prior-perturb shuffle=1: a badly wrong prior (each configuration
            predicted as another one)
  invert    --prior model --prior-perturb invert_clock_trend=1: every clock trend inverted
  transfer  P1 plus --related <the store of the family's first workload, profiled with P1 at
            the same share and seed>; the first workload of each family has no related store
            and is reported without transfer
"""
import argparse
import concurrent.futures
import json
import math
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The mismatches of issue 18: dynamic power +-25 %, the voltage curve/floor moved by 100 MHz,
# collective bandwidth -30 %, compute efficiency +-15 %, in four combinations.
PERTURBATIONS = {
    "P1": "dynamic_power=1.25,voltage_shift_mhz=100,collective_bandwidth=0.7,compute_efficiency=0.85",
    "P2": "dynamic_power=0.75,voltage_shift_mhz=-100,collective_bandwidth=0.7,compute_efficiency=1.15",
    "P3": "dynamic_power=1.25,voltage_shift_mhz=-100,compute_efficiency=1.15",
    "P4": "dynamic_power=0.75,voltage_shift_mhz=100,collective_bandwidth=0.7,compute_efficiency=0.85",
    "harmful": "shuffle=1",
    "invert": "invert_clock_trend=1",
}
# Families of related workloads (same model and GPU): the first profiles without transfer, the
# others read its store.
FAMILIES = [["01"], ["02", "03", "04"], ["05", "06", "07"], ["08", "09", "10"]]


SELECTED = None  # --workloads: the two-digit prefixes to run; None: all ten


def workloads(all_of_them=False):
    paper = os.path.join(ROOT, "examples", "paper")
    found = sorted(os.path.join(paper, f) for f in os.listdir(paper) if f.endswith(".yaml"))
    if SELECTED is None or all_of_them:
        return found
    return [w for w in found if os.path.basename(w)[:2] in SELECTED]


def profile(args, workload, fraction, seed, setting, store=None, related=None):
    cmd = [args.kareus, "profile", workload, "--oracle", "--json", "--quiet",
           "--budget-fraction", str(fraction), "--seed", str(seed)]
    if setting == "none":
        cmd += ["--prior", "none"]
    elif setting == "exact":
        cmd += ["--prior", "model"]
    else:
        perturbation = PERTURBATIONS["P1" if setting == "transfer" else setting]
        cmd += ["--prior", "model", "--prior-perturb", perturbation]
    cmd += args.extra
    if store:
        cmd += ["--store", store]
    if related:
        cmd += ["--related", related]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def related_store(args, first, fraction, seed):
    """The store of a family's first workload, profiled like the others (P1, same share and
    seed); made once (main makes every one before the parallel jobs read them)."""
    stores = os.path.join(args.out, "stores")
    os.makedirs(stores, exist_ok=True)
    store = os.path.join(stores, f"{first}-{fraction}-{seed}.sqlite")
    if not os.path.exists(store + ".done"):
        if os.path.exists(store):
            os.remove(store)
        base = next(w for w in workloads(True) if os.path.basename(w)[:2] == first)
        profile(args, base, fraction, seed, "transfer", store=store)
        open(store + ".done", "w").close()
    return store


def run_one(args, workload, fraction, seed, setting):
    """Rows (workload, type, space, evaluations, hv_ratio, gpu_hours, prior weights)."""
    name = os.path.basename(workload)[:-5]
    related = None
    store = None
    if setting == "transfer":
        family = next(f for f in FAMILIES if name[:2] in f)
        if name[:2] != family[0]:
            related = related_store(args, family[0], fraction, seed)
    doc = profile(args, workload, fraction, seed, setting, store=store, related=related)
    rows = []
    for t in doc["partitions"]:
        if not t["tunable"]:
            continue
        prior = t.get("prior", {})
        rows.append({"workload": name, "type": t["type"], "space": t["space_size"],
                     "evaluations": t["evaluations"], "hv_ratio": t["hv_ratio"],
                     "random_hv_ratio": t["random_hv_ratio"],
                     "gpu_hours": t["cost_gpu_seconds"] / 3600.0,
                     "time_weight": prior.get("time_weight"),
                     "energy_weight": prior.get("energy_weight"),
                     "prior_design": t.get("prior_design"),
                     "prior_design_log_rms": t.get("prior_design_log_rms"),
                     "prior_recheck_log_rms": t.get("prior_recheck_log_rms"),
                     "related": bool(related)})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kareus", default=os.path.join(ROOT, "build", "apps", "kareus", "kareus"))
    parser.add_argument("--fractions", default="0.03,0.05,0.10,0.15")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--settings", default="none,exact,P1,P2,P3,P4,harmful,transfer")
    parser.add_argument("--out", default=None, help="folder for results.json and stores")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--markdown", action="store_true", help="tables as Markdown")
    parser.add_argument("--workloads", default=None,
                        help="comma-separated prefixes of examples/paper (e.g. 02,08); default all")
    parser.add_argument("--extra", default="",
                        help="further kareus profile flags, space-separated (e.g. '--strategy believer')")
    parser.add_argument("--merge", nargs="+", default=None, metavar="RESULTS_JSON",
                        help="measure nothing: print the tables over the runs of these results.json "
                             "files (a later file's run of the same setting, share and seed wins); "
                             "--settings, --fractions and --seeds select among them")
    args = parser.parse_args()
    args.extra = args.extra.split()
    global SELECTED
    SELECTED = set(args.workloads.split(",")) if args.workloads else None
    args.out = args.out or os.path.join(ROOT, "build", "bench-profile-prior")
    os.makedirs(args.out, exist_ok=True)
    fractions = [float(f) for f in args.fractions.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = args.settings.split(",")
    for s in settings:
        if s not in ("none", "exact", "transfer") and s not in PERTURBATIONS:
            sys.exit(f"--settings: unknown setting {s}")

    if args.merge:
        results = {}
        for path in args.merge:
            with open(path) as f:
                for run in json.load(f):
                    results[(run["setting"], run["fraction"], run["seed"])] = run["rows"]
        results = {k: v for k, v in results.items()
                   if k[0] in settings and k[1] in fractions and k[2] in seeds}
        print_tables(args, results, settings, fractions, seeds)
        return

    jobs = [(w, f, s, st) for st in settings for f in fractions for s in seeds for w in workloads()]
    if "transfer" in settings:  # the families' first workloads first, before the pool reads them
        for fam in FAMILIES:
            for f in fractions:
                for s in seeds:
                    if len(fam) > 1:
                        related_store(args, fam[0], f, s)
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_one, args, *job): job for job in jobs}
        for future in concurrent.futures.as_completed(futures):
            w, f, s, st = futures[future]
            results.setdefault((st, f, s), []).extend(future.result())
    with open(os.path.join(args.out, "results.json"), "w") as out:
        json.dump([{"setting": st, "fraction": f, "seed": s, "rows": rows}
                   for (st, f, s), rows in sorted(results.items())], out, indent=1)
    print_tables(args, results, settings, fractions, seeds)


def print_tables(args, results, settings, fractions, seeds):
    """The summary per setting and share, the per-type minima and the GPU-hours to 0.99."""
    bar = "|" if args.markdown else " "
    def line(cells):
        return (bar + bar.join(cells) + bar) if args.markdown else "  ".join(cells)

    # Summary: per setting and share, over types x seeds.
    print(line([f"{'setting':9s}", f"{'share':>5s}", f"{'median':>7s}", f"{'min':>7s}",
                f"{'p10':>7s}", f"{'<0.97':>6s}", f"{'<0.99':>6s}", f"{'min/seed':>22s}",
                f"{'GPU-h/seed':>10s}", f"{'measured':>8s}"]))
    if args.markdown:
        print(line(["---"] + ["---:"] * 9))
    for st in settings:
        for f in fractions:
            per_seed = [results.get((st, f, s), []) for s in seeds]
            rows = [r for rs in per_seed for r in rs]
            if not rows:
                continue
            hv = sorted(r["hv_ratio"] for r in rows)
            p10 = hv[max(0, int(0.1 * len(hv)) - 1)]
            mins = "/".join(f"{min(r['hv_ratio'] for r in rs):.3f}" for rs in per_seed if rs)
            gpu_h = statistics.mean(sum(r["gpu_hours"] for r in rs) for rs in per_seed if rs)
            # The share actually measured (a --min-budget floor lifts small spaces above f).
            measured = sum(r["evaluations"] for r in rows) / sum(r["space"] for r in rows)
            print(line([f"{st:9s}", f"{100 * f:4.0f}%", f"{statistics.median(hv):7.4f}",
                        f"{hv[0]:7.4f}", f"{p10:7.4f}", f"{sum(h < 0.97 for h in hv):6d}",
                        f"{sum(h < 0.99 for h in hv):6d}", f"{mins:>22s}", f"{gpu_h:10.1f}",
                        f"{100 * measured:7.2f}%"]))

    # Per type: median over seeds of the HV ratio at each share, per setting.
    print()
    types = sorted({(r["workload"][:2], r["type"], r["space"]) for rs in results.values() for r in rs})
    header = [f"{'wl':2s}", f"{'type':11s}", f"{'space':>5s}"]
    for st in settings:
        for f in fractions:
            header.append(f"{st[:5]}@{100 * f:.0f}%".rjust(10))
    print(line(header))
    if args.markdown:
        print(line(["---", "---", "---:"] + ["---:"] * (len(settings) * len(fractions))))
    for wl, ty, space in types:
        cells = [wl, f"{ty:11s}", f"{space:5d}"]
        for st in settings:
            for f in fractions:
                vals = [r["hv_ratio"] for s in seeds for r in results.get((st, f, s), [])
                        if r["workload"][:2] == wl and r["type"] == ty]
                cells.append(f"{min(vals):10.4f}" if vals else f"{'-':>10s}")
        print(line(cells))
    print("(per type: the minimum over seeds)")

    # GPU-hours to reach HV ratio 0.99: per type the smallest share whose minimum over seeds is
    # >= 0.99, its GPU-hours (mean over seeds); types that never reach it count at the largest
    # share and are listed.
    print()
    print(line([f"{'setting':9s}", f"{'GPU-h to 0.99':>13s}", f"{'types short':>11s}"]))
    if args.markdown:
        print(line(["---", "---:", "---:"]))
    for st in settings:
        total, short = 0.0, 0
        for wl, ty, space in types:
            reached = None
            for f in sorted(fractions):
                rows = [r for s in seeds for r in results.get((st, f, s), [])
                        if r["workload"][:2] == wl and r["type"] == ty]
                if rows and min(r["hv_ratio"] for r in rows) >= 0.99:
                    reached = statistics.mean(r["gpu_hours"] for r in rows)
                    break
            if reached is None:
                short += 1
                rows = [r for s in seeds for r in results.get((st, max(fractions), s), [])
                        if r["workload"][:2] == wl and r["type"] == ty]
                reached = statistics.mean(r["gpu_hours"] for r in rows) if rows else 0.0
            total += reached
        print(line([f"{st:9s}", f"{total:13.1f}", f"{short:11d}"]))


if __name__ == "__main__":
    main()
