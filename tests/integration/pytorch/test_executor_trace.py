# SPDX-License-Identifier: Apache-2.0
"""The order the executor runs things in: `examples/pytorch/train.py --trace FILE` under a plan,
against the order derived here, independently of kareus.torch, from plan.json (mode, SMs and slot
per instruction) and the planner's program (`kareus.partitions`: kernels and partition
occurrences).

A partition's collective is launched when its compute reaches the plan's launch slot: right after
the kernel before the slot's kernel ends (before any compute for the first kernel), on the plan's
SM count, and waited for when the partition's compute is done; sequential instructions have no
nanobatch events. Checked on every rank, forward and backward, for a plan that nanobatches every
instruction with knobs that differ per instruction, and for `kareus run`'s own plan.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
kareus = pytest.importorskip("kareus._kareus", reason="the kareus Python module was not built")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from test_pytorch_example import (EXAMPLE, RANKS, TP, expected_partitions, kareus_run,  # noqa: E402
                                  planned_partitions, stage_of, tuned_plan)

if not os.environ.get("KAREUS_BIN") or not os.environ.get("KAREUS_NVML_LIBRARY"):
    pytest.skip("KAREUS_BIN and KAREUS_NVML_LIBRARY must be set; CTest sets them",
                allow_module_level=True)

FIELDS = ("instruction", "microbatch", "nanobatch", "partition", "event", "op", "sms")


@pytest.fixture(scope="module")
def program():
    return kareus.partitions(str(EXAMPLE / "workload.yaml"), program=True)


@pytest.fixture(scope="module")
def partitions(program):
    return planned_partitions(program)


def sequential_events(kernels, head):
    out = []
    for k in kernels:
        pair = ("comm_launch", "comm_wait") if k["kind"] == "collective" else ("op_begin", "op_end")
        out += [head + (None, None, event, k["name"], None) for event in pair]
    return out


def expected_events(program, plan, stage, partitions):
    """Every event of one step of a stage, in order, from the plan and the planner's program."""
    unit = next(u for u in program["program"] if u["stage"] == stage)
    out = []
    for instruction in plan["stages"][stage]["instructions"]:
        kind, m = instruction["kind"], instruction["microbatch"]
        ins, head = unit[kind], (kind, m)
        out += sequential_events(ins["before_block"], head)
        if instruction.get("mode") != "nanobatched":
            out += sequential_events(ins["sequential"], head)
        else:
            knobs = expected_partitions(instruction, stage, partitions)
            for p in ins["partitions"]:
                nb, name = p["nanobatch"], p["type"]
                launch = p["slots"][knobs[name]["slot"]] if p["collective"] else None
                sms = knobs[name]["sms"] if p["collective"] else None
                for i, k in enumerate(p["compute"]):
                    if i == launch:
                        out.append(head + (nb, name, "comm_launch", p["collective"]["name"], sms))
                    out.append(head + (nb, name, "op_begin", k["name"], None))
                    out.append(head + (nb, name, "op_end", k["name"], None))
                if p["collective"]:
                    out.append(head + (nb, name, "comm_wait", p["collective"]["name"], sms))
        out += sequential_events(ins["after_block"], head)
    return out


def traced(tmp_path, plan, steps=1):
    env = dict(os.environ, FAKE_NVML_LOG=str(tmp_path / "nvml.log"), FAKE_NVML_DEVICES=str(RANKS))
    trace = tmp_path / "trace.jsonl"
    run = subprocess.run([sys.executable, str(EXAMPLE / "train.py"), "--plan", str(plan),
                          "--steps", str(steps), "--trace", str(trace)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return [[json.loads(line) for line in (tmp_path / f"trace.rank{r}.jsonl").read_text().splitlines()]
            for r in range(RANKS)]


def first_difference(got, want):
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"event {i}: traced {g}, expected {w}"
    return f"{len(got)} events traced, {len(want)} expected"


def check_trace(events_per_rank, plan_path, program, partitions, steps):
    plan = json.loads(pathlib.Path(plan_path).read_text())
    for rank, events in enumerate(events_per_rank):
        stage = stage_of(rank)
        assert {(e["stage"], e["tp_rank"]) for e in events} == {(stage, rank % TP)}
        assert sorted({e["step"] for e in events}) == list(range(steps))
        want = expected_events(program, plan, stage, partitions)
        for step in range(steps):
            got = [tuple(e[f] for f in FIELDS) for e in events if e["step"] == step]
            assert got == want, f"rank {rank} step {step}: {first_difference(got, want)}"
        # The rules, stated directly: a launch sits between the end of the kernel before its
        # slot and the beginning of the slot's kernel, on the plan's SMs; sequential
        # instructions have no nanobatch events.
        modes = {(i["kind"], i["microbatch"]): i.get("mode", "sequential")
                 for i in plan["stages"][stage]["instructions"]}
        for i, e in enumerate(events):
            if modes[(e["instruction"], e["microbatch"])] == "sequential":
                assert e["nanobatch"] is None and e["partition"] is None, e
            if e["event"] == "comm_launch" and e["partition"] is not None:
                nxt, prev = events[i + 1], events[i - 1]
                assert nxt["event"] == "op_begin" and nxt["partition"] == e["partition"]
                assert prev["event"] in ("op_end", "comm_wait")
                instruction = next(x for x in plan["stages"][stage]["instructions"]
                                   if (x["kind"], x["microbatch"]) == (e["instruction"], e["microbatch"]))
                knobs = expected_partitions(instruction, stage, partitions)[e["partition"]]
                assert e["sms"] == knobs["sms"]


def test_a_plan_nanobatching_every_instruction(tmp_path, program, partitions):
    run_dir = kareus_run(EXAMPLE / "workload.yaml", tmp_path / "run", "--methods", "megatron")
    plan = tuned_plan(run_dir, tmp_path)
    check_trace(traced(tmp_path, plan), plan, program, partitions, steps=1)


def test_a_mixed_plan_over_two_steps(tmp_path, program, partitions):
    """Sequential and nanobatched instructions side by side, with defaults: half the
    instructions nanobatched, every other one without knobs (library default, first slot)."""
    run_dir = kareus_run(EXAMPLE / "workload.yaml", tmp_path / "run", "--methods", "megatron")
    plan = json.loads(tuned_plan(run_dir, tmp_path).read_text())
    for stage in plan["stages"]:
        for n, instruction in enumerate(stage["instructions"]):
            if n % 2:
                instruction.update(mode="sequential", partitions=[])
            elif n % 4 == 2:
                instruction["partitions"] = []
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(plan))
    check_trace(traced(tmp_path, path, steps=2), path, program, partitions, steps=2)
