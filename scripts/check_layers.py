#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Checks the components' link dependencies against the layering of docs/ARCHITECTURE.md §2:
# configures the source tree once more with `cmake --graphviz` (a scratch build folder, tests and
# benchmarks off) and fails when a component links a kareus component it is not allowed to.
#   check_layers.py --cmake CMAKE SOURCE_DIR SCRATCH_DIR   (CTest's layers_check)
#   check_layers.py GRAPH.dot                              (a graph made already)
# Exit 0: every edge allowed; 1: an edge that is not (each one printed), or no component found.
import os
import re
import shutil
import subprocess
import sys

# Component (its library target without the kareus_ prefix) -> the kareus components it may
# link directly. Keep in step with the table in docs/ARCHITECTURE.md §2.
ALLOWED = {
    "common": set(),
    "schedule": {"common"},
    "knobs": {"schedule"},
    "hw": {"common"},
    "workload": {"common", "hw", "schedule"},
    "emulator": {"common", "hw", "knobs", "workload"},
    "pareto": {"common"},
    "device": {"common"},
    "measure": {"common", "emulator", "hw", "knobs", "workload"},
    "measure_cuda": {"common", "device", "emulator", "hw", "knobs", "measure", "workload"},
    "mobo": {"common", "measure", "pareto", "workload"},
    "pipeline": {"common", "pareto", "schedule"},
    "plan_file": {"common", "schedule"},
    "timetable": {"common"},
    "plan_check": {"common", "plan_file", "schedule", "workload"},
    "plan": {"common", "pareto", "pipeline", "plan_check", "plan_file", "schedule", "workload"},
    "report": {"common", "timetable"},
    "methods": {"common", "measure", "mobo", "pareto", "pipeline", "plan", "plan_file", "report",
                "schedule", "timetable", "workload"},
    "distributed": {"common", "measure", "methods", "mobo", "report", "workload"},
    "runtime": {"common", "device", "plan_check", "plan_file", "timetable"},
    "c_api": {"common", "device", "plan_check", "plan_file", "runtime", "timetable"},
}


def make_graph(cmake, source, scratch):
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    graph = os.path.join(scratch, "kareus.dot")
    subprocess.run([cmake, "-S", source, "-B", os.path.join(scratch, "build"),
                    "-DKAREUS_BUILD_TESTS=OFF", "-DKAREUS_BUILD_BENCHMARKS=OFF",
                    f"--graphviz={graph}"], check=True, stdout=subprocess.DEVNULL)
    return graph


def main(argv):
    if len(argv) == 5 and argv[1] == "--cmake":
        graph = make_graph(argv[2], argv[3], argv[4])
    elif len(argv) == 2:
        graph = argv[1]
    else:
        print("usage: check_layers.py GRAPH.dot | --cmake CMAKE SOURCE_DIR SCRATCH_DIR",
              file=sys.stderr)
        return 2
    with open(graph, encoding="utf-8") as f:
        text = f.read()
    # A component's label is its target, then its alias: "kareus_common\n(kareus::common)".
    # Targets without a kareus:: alias (executables, the Python module, wrappers of outside
    # libraries such as kareus_xgboost_c) are not layered here.
    nodes = {}
    for node, label in re.findall(r'"(node\d+)"\s*\[\s*label\s*=\s*"([^"]+)"', text):
        alias = re.search(r"\(kareus::(\w+)\)", label)
        nodes[node] = (label.split("\\n")[0], alias.group(1) if alias else None)
    edges = re.findall(r'"(node\d+)"\s*->\s*"(node\d+)"', text)
    known = set()
    bad = []
    for a, b in edges:
        (src, src_c), (dst, dst_c) = nodes.get(a, ("", None)), nodes.get(b, ("", None))
        if src_c is None or dst_c is None:
            continue
        known.add(src_c)
        if src_c not in ALLOWED:
            bad.append(f"{src}: a component missing from check_layers.py's ALLOWED")
        elif dst_c not in ALLOWED[src_c]:
            bad.append(f"{src} -> {dst}: {src_c} may link only {sorted(ALLOWED[src_c])}")
    for line in bad:
        print(line)
    if not known:
        print("no kareus component found in the graph")
        return 1
    print(f"{len(known)} components checked, {len(bad)} edges not allowed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
