#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Markdown tables of a `kareus evaluate ... --out DIR` run (README, docs/ARCHITECTURE.md).

usage: bench/evaluation_tables.py DIR
Reads DIR/evaluation.json and DIR/<workload>/summary.json; prints the max-throughput table
(dT/dE % vs Megatron-LM), the frontier table vs Perseus (published definition), the equal-time
comparison and the acceptance checks, the profiling GPU-hours per method, and each method's
GPU-hours summed over the workloads by kind of measurement (summary.json profiling_by_kind).
"""
import json
import os
import sys


def pct(value):
    return "--" if value is None else f"{value:+.1f}"


def main():
    out = sys.argv[1]
    evaluation = json.load(open(os.path.join(out, "evaluation.json")))
    rows = evaluation["rows"]
    methods = [r["method"] for r in rows[0]["max_throughput"] if r["method"] != "megatron"]
    summaries = {r["workload"]: json.load(open(os.path.join(out, r["workload"], "summary.json")))
                 for r in rows}
    labels = {m["method"]: m["label"] for m in next(iter(summaries.values()))["methods"]}

    print("Max-throughput plans, ΔT % / ΔE % vs Megatron-LM (+ = faster / less energy):\n")
    print("| # | workload | " + " | ".join(labels[m] for m in methods) + " |")
    print("|---|---|" + "---|" * len(methods))
    for i, r in enumerate(rows, 1):
        cells = {x["method"]: f"{pct(x['delta_time_pct'])} / {pct(x['delta_energy_pct'])}"
                 for x in r["max_throughput"]}
        print(f"| {i} | {r['workload']} | " + " | ".join(cells[m] for m in methods) + " |")

    print("\nFrontier vs Perseus (published definition, sampled plans, no interpolation) and the "
          "equal-time comparison over the deadlines both frontiers meet:\n")
    print("| # | Kareus iso-time ΔE % | Kareus iso-energy ΔT % | N+P iso-time ΔE % | "
          "N+P iso-energy ΔT % | Kareus mean saving vs Perseus at equal time % | "
          "min vs Perseus % | min vs N+P % | gap to oracle (pp) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(rows, 1):
        table = {x["method"]: x for x in r["frontier_table"]}
        inter = {x["method"]: x for x in r["interpolated"]}
        k, n = table.get("kareus", {}), table.get("nanobatching+perseus", {})
        ki = inter.get("kareus", {})
        c = r["checks"]
        gap = c.get("kareus_gap_to_oracle_iso_time_pct")
        print(f"| {i} | {pct(k.get('iso_time_energy_reduction_pct'))} | "
              f"{pct(k.get('iso_energy_time_reduction_pct'))} | "
              f"{pct(n.get('iso_time_energy_reduction_pct'))} | "
              f"{pct(n.get('iso_energy_time_reduction_pct'))} | "
              f"{pct(ki.get('mean_saving_pct') if ki.get('overlap') else None)} | "
              f"{'--' if c.get('kareus_vs_perseus_min_saving_pct') is None else format(c['kareus_vs_perseus_min_saving_pct'], '+.2f')} | "
              f"{'--' if c.get('kareus_vs_nanobatching+perseus_min_saving_pct') is None else format(c['kareus_vs_nanobatching+perseus_min_saving_pct'], '+.2f')} | "
              f"{'--' if gap is None else format(gap, '+.2f')} |")

    print("\nProfiling GPU-hours per configuration (seconds of measurement x GPUs of the measured "
          "group, warm-ups included):\n")
    all_methods = [m["method"] for m in next(iter(summaries.values()))["methods"]]
    print("| # | " + " | ".join(labels[m] for m in all_methods) + " |")
    print("|---|" + "---|" * len(all_methods))
    for i, r in enumerate(rows, 1):
        s = {m["method"]: m for m in summaries[r["workload"]]["methods"]}
        print(f"| {i} | " + " | ".join(f"{s[m]['profiling_gpu_hours']:.2f}" for m in all_methods) + " |")

    kinds = ["partitions_profiled", "partitions_exhaustive", "fixed_work", "instructions",
             "gradient_sync"]
    print("\nProfiling GPU-hours over the configurations by kind of measurement "
          "(share of the method's total):\n")
    print("| method | " + " | ".join(kinds) + " | total |")
    print("|---|" + "---|" * (len(kinds) + 1))
    grand = 0.0
    for m in all_methods:
        sums = dict.fromkeys(kinds, 0.0)
        total = 0.0
        for r in rows:
            entry = next(x for x in summaries[r["workload"]]["methods"] if x["method"] == m)
            total += entry["profiling_gpu_hours"]
            for kind, cost in entry.get("profiling_by_kind", {}).items():
                sums[kind] += cost["gpu_hours"]
        grand += total
        cells = [f"{sums[k]:.2f} ({100 * sums[k] / total:.1f} %)" if total else "0.00" for k in kinds]
        print(f"| {labels[m]} | " + " | ".join(cells) + f" | {total:.2f} |")
    print(f"\nAll methods: {grand:.2f} GPU-hours.")


if __name__ == "__main__":
    main()
