#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Golden outputs: what `kareus run` and `kareus solve` write for a few workloads, checked in.

usage: golden.py check  KAREUS_BIN [NAME...]   run each case, compare with tests/golden/NAME/
       golden.py update KAREUS_BIN [NAME...]   run each case, rewrite tests/golden/NAME/

Each case runs the command into a fresh folder and keeps plan.json, frontier.json and
summary.json, with the fields that depend on the machine or the moment masked (wall times per
phase, the process's peak memory, the store's path), and per file in plans/ its iteration cost
and a SHA-256 of its discrete choices (clocks, modes, knobs). Any other change is a failure that
names the file and the first JSON path that differs, with both values; numbers count as equal
within a relative 1e-9 (their last bits can differ between CPUs), and the check says when the
files are not byte-identical. Refactors keep these files byte-identical; a change that means to
move a figure updates them (`golden.py update`) and says in its commit message which figure
changed and why.
"""
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE.parents[1]

# name: (arguments after the binary, with OUT for the output folder)
CASES = {
    # A paper TP configuration (TP 8, PP 2, 16 A100s).
    "paper-01-tp8": ["run", "examples/paper/01-llama3.2-3b-tp8-mbs8-seq4096.yaml", "--out", "OUT"],
    # A paper CP configuration (CP 2 x TP 4).
    "paper-02-cp2-tp4": ["run", "examples/paper/02-llama3.2-3b-cp2-tp4-mbs8-seq4096.yaml", "--out",
                         "OUT"],
    # Interleaved 1F1B with a data-parallel gradient sync, small enough to take seconds.
    "interleaved-dp2": ["run", "tests/golden/interleaved-dp2.yaml", "--out", "OUT"],
    # A Perseus profile through kareus solve (4 stages x 16 microbatches).
    "solve-perseus-4x16": ["solve", "tests/pipeline/data/perseus_4x16_unbalanced.csv", "--stages",
                           "4", "--microbatches", "16", "--static-power", "90", "--out", "OUT"],
}
MASK = "<masked: machine-dependent>"


def masked(document, name):
    """The document with its machine-dependent fields replaced by MASK."""
    if name == "summary.json":
        document["peak_rss_mib"] = MASK
        document["settings"]["profile"]["store"] = MASK
        for method in document["methods"]:
            method["phase_wall_s"] = {phase: MASK for phase in method.get("phase_wall_s", {})}
    return document


def outputs(binary, args, work):
    """{file name: text} of one case's kept outputs."""
    out = pathlib.Path(work) / "out"
    command = [binary] + [str(out) if a == "OUT" else a for a in args] + ["--quiet"] * (args[0] == "run")
    env = dict(os.environ, KAREUS_DATA_DIR=str(SOURCE / "data"))
    result = subprocess.run(command, cwd=SOURCE, env=env, capture_output=True, text=True,
                            timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode}:\n{result.stderr[-3000:]}")
    files = {}
    for name in ("plan.json", "frontier.json", "summary.json"):
        path = out / name
        if path.exists():
            document = masked(json.loads(path.read_text()), name)
            files[name] = json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    plans = sorted((out / "plans").glob("*.json")) if (out / "plans").is_dir() else []
    digest = {}
    for path in plans:
        plan = json.loads(path.read_text())
        digest[f"plans/{path.name}"] = {"iteration": plan["iteration"],
                                        "choices_sha256": choices_sha256(plan)}
    files["plans.json"] = json.dumps(digest, indent=1, sort_keys=True) + "\n"
    return files


def choices_sha256(plan):
    """SHA-256 of a plan's discrete choices: per instruction its kind, chunk, microbatch, clock,
    mode, partition knobs and gradient-sync knobs (costs aside, they are compared as numbers)."""
    choices = []
    for stage in plan["stages"]:
        for ins in stage["instructions"]:
            choices.append([stage["stage"], ins["kind"], ins.get("chunk", 0), ins["microbatch"],
                            ins["freq_mhz"], ins["mode"],
                            [[p["type"], p["sms"], p["slot"]] for p in ins.get("partitions", [])],
                            ins.get("gradient_sync")])
        tail = stage.get("gradient_sync")
        choices.append([stage["stage"], "gradient_sync_tail",
                        None if tail is None else [tail.get("freq_mhz"), tail.get("sms")]])
    return hashlib.sha256(json.dumps(choices, sort_keys=True).encode()).hexdigest()


# Numbers may differ in their last bits between machines (glibc picks exp/log/pow
# implementations by CPU); within this relative tolerance a number counts as the same figure.
# Everything else (strings, integers' meaning, list lengths, plan choices) must be equal.
RELATIVE_TOLERANCE = 1e-9


def same_number(a, b):
    return a == b or abs(a - b) <= RELATIVE_TOLERANCE * max(abs(a), abs(b))


def first_difference(want, got, path="$"):
    """The first JSON path where two documents differ, with both values; None when equal."""
    if isinstance(want, (int, float)) and isinstance(got, (int, float)) \
            and not isinstance(want, bool) and not isinstance(got, bool):
        return None if same_number(float(want), float(got)) else (path, want, got)
    if type(want) is not type(got):
        return path, want, got
    if isinstance(want, dict):
        for key in sorted(set(want) | set(got)):
            if key not in want or key not in got:
                return f"{path}.{key}", want.get(key, "<absent>"), got.get(key, "<absent>")
            found = first_difference(want[key], got[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(want, list):
        for i, (a, b) in enumerate(zip(want, got)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        if len(want) != len(got):
            return f"{path} (length)", len(want), len(got)
        return None
    if isinstance(want, float) and same_number(want, got):
        return None
    return None if want == got else (path, want, got)


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("check", "update"):
        print(__doc__)
        return 2
    mode, binary, names = sys.argv[1], sys.argv[2], sys.argv[3:] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"unknown case(s) {unknown}; the cases: {', '.join(CASES)}")
        return 2
    failures = 0
    for name in names:
        with tempfile.TemporaryDirectory(prefix="kareus-golden-") as work:
            files = outputs(binary, CASES[name], work)
        folder = HERE / name
        if mode == "update":
            folder.mkdir(exist_ok=True)
            for old in folder.iterdir():
                if old.name not in files:
                    old.unlink()
            for file, text in files.items():
                (folder / file).write_text(text, encoding="utf-8")
            print(f"{name}: wrote {', '.join(sorted(files))}")
            continue
        before = failures
        for file, text in sorted(files.items()):
            golden = folder / file
            if not golden.exists():
                print(f"{name}/{file}: no golden file (golden.py update writes it)")
                failures += 1
                continue
            want = golden.read_text(encoding="utf-8")
            if want == text:
                continue
            where = first_difference(json.loads(want), json.loads(text))
            if where is None:
                print(f"{name}/{file}: not byte-identical, every number within "
                      f"{RELATIVE_TOLERANCE:g} relative (floating-point noise)")
                continue
            failures += 1
            print(f"{name}/{file}: differs at {where[0]}: golden {where[1]!r}, now {where[2]!r}")
        print(f"{name}: {'as golden' if failures == before else 'DIFFERS from golden'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
