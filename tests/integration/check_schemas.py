#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Validates a `kareus run` output folder against docs/schemas/*.schema.json.

usage: check_schemas.py SCHEMA_DIR RUN_DIR
       check_schemas.py SCHEMA_DIR --timetable SCHEDULE_DIR
Checks summary.json, plan.json, frontier.json, every plans/*.json and every
methods/<method>/{plan,frontier}.json, plus cross-file facts (plan indices in frontier.json
name existing plan files; the fastest frontier point is plan.json's iteration). With
--timetable: a `kareus schedule` folder's timetable.json, the plans it names (beside it, each a
plan), and its promises (the iterations done by the deadline, no cap exceeded, the totals the
sum of the intervals).
"""
import glob
import json
import os
import sys

import jsonschema


def load(path):
    with open(path) as f:
        return json.load(f)


def check_timetable(schema_dir, folder):
    timetable = load(os.path.join(folder, "timetable.json"))
    jsonschema.validate(timetable, load(os.path.join(schema_dir, "timetable.schema.json")))
    plan_schema = load(os.path.join(schema_dir, "plan.schema.json"))
    power = {}
    for plan in timetable["plans"]:
        jsonschema.validate(load(os.path.join(folder, plan["plan"])), plan_schema)
        power[plan["plan"]] = plan["power_w"]
    iterations = cost = 0.0
    for interval in timetable["intervals"]:
        busy = interval["pause_s"]
        for entry in interval["entries"]:
            busy += entry["seconds"]
            iterations += entry["iterations"]
            cap = interval["power_cap_w"]
            if cap is not None and power[entry["plan"]] / timetable["gpus"] > cap * (1 + 1e-9):
                raise SystemExit(f"{interval['start']}: {entry['plan']} exceeds the cap {cap} W")
        cost += interval["cost"]
    if abs(iterations - timetable["iterations"]) > 1e-6 * timetable["iterations"]:
        raise SystemExit(f"{iterations} iterations planned, {timetable['iterations']} asked")
    if abs(cost - timetable["total_cost"]) > 1e-9 * max(1.0, cost):
        raise SystemExit(f"the intervals cost {cost}, total_cost says {timetable['total_cost']}")
    if timetable["finish"] > timetable["deadline"]:
        raise SystemExit(f"finishes {timetable['finish']}, after the deadline {timetable['deadline']}")
    constant = timetable["best_constant_plan"]
    if constant is not None and timetable["total_cost"] > constant["cost"] * (1 + 1e-9):
        raise SystemExit("the timetable costs more than the best constant plan")
    print(f"timetable.json and {len(timetable['plans'])} plans match their schemas; "
          f"{len(timetable['intervals'])} intervals keep the deadline and the caps")


def main():
    if len(sys.argv) == 4 and sys.argv[2] == "--timetable":
        check_timetable(sys.argv[1], sys.argv[3])
        return
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
