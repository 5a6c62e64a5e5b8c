#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Validates a `kareus run` output folder against docs/schemas/*.schema.json.

usage: check_schemas.py SCHEMA_DIR RUN_DIR
Checks summary.json, plan.json, frontier.json, every plans/*.json and every
methods/<method>/{plan,frontier}.json, plus cross-file facts (plan indices in frontier.json
name existing plan files; the fastest frontier point is plan.json's iteration).
"""
import glob
import json
import os
import sys

import jsonschema


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    schema_dir, run_dir = sys.argv[1], sys.argv[2]
    schemas = {name: load(os.path.join(schema_dir, f"{name}.schema.json"))
               for name in ("summary", "plan", "frontier")}
    checked = 0

    def check(kind, path):
        nonlocal checked
        jsonschema.validate(load(path), schemas[kind])
        checked += 1

    check("summary", os.path.join(run_dir, "summary.json"))
    folders = [run_dir] + sorted(glob.glob(os.path.join(run_dir, "methods", "*")))
    for folder in folders:
        check("plan", os.path.join(folder, "plan.json"))
        check("frontier", os.path.join(folder, "frontier.json"))
        plans = sorted(glob.glob(os.path.join(folder, "plans", "*.json")))
        if not plans:
            raise SystemExit(f"{folder}: no plans/")
        for p in plans:
            check("plan", p)
        frontier = load(os.path.join(folder, "frontier.json"))
        for point in frontier["points"]:
            if point["plan_index"] >= 0:
                name = os.path.join(folder, "plans", f"plan_{point['plan_index']:05d}.json")
                if not os.path.exists(name):
                    raise SystemExit(f"{name} is named by frontier.json but missing")
        # plan.json is the fastest plan as evaluated (plan::PlanResult::fastest): the point with
        # the lowest time (the solver's last point unless re-evaluation reordered close points).
        fastest = min(frontier["points"], key=lambda p: p["time_s"])
        plan = load(os.path.join(folder, "plan.json"))
        if abs(plan["iteration"]["time_s"] - fastest["time_s"]) > 1e-9:
            raise SystemExit(f"{folder}: plan.json is not the fastest plan of frontier.json")
        times = [p["time_s"] for p in frontier["points"]]
        if times != sorted(times):
            raise SystemExit(f"{folder}: frontier.json points are not sorted by time")
    print(f"{checked} files match their schemas")


if __name__ == "__main__":
    main()
