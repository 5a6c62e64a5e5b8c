# SPDX-License-Identifier: Apache-2.0
"""kareus.optimize: the end-to-end entry point from Python."""
import json
import os

import pytest

kareus = pytest.importorskip("kareus")

SMALL = """name: small
model: {name: small, hidden: 2048, heads: 16, kv_groups: 8, head_dim: 128, ffn: 8192, layers: 4, vocab: 32000}
gpu: A100-SXM4-40GB
parallelism: {tp: 4, pp: 2}
microbatch_size: 4
sequence_length: 2048
microbatches: 4
recompute: full
"""


def test_optimize_returns_the_summary_and_writes_the_files(tmp_path):
    workload = tmp_path / "small.yaml"
    workload.write_text(SMALL)
    out = tmp_path / "out"
    summary = kareus.optimize(str(workload), out=str(out), methods=["megatron", "perseus", "kareus"])
    assert summary["format"] == "kareus.summary/2"
    assert [m["method"] for m in summary["methods"]] == ["megatron", "perseus", "kareus"]
    kareus_row = next(r for r in summary["max_throughput"] if r["method"] == "kareus")
    assert kareus_row["time_s"] > 0
    plan = json.loads((out / "plan.json").read_text())
    assert plan["format"] == "kareus.plan/2"
    assert os.path.exists(out / "report.html")


def test_optimize_rejects_bad_input(tmp_path):
    workload = tmp_path / "small.yaml"
    workload.write_text(SMALL)
    with pytest.raises(kareus.InputError, match="zeus"):
        kareus.optimize(str(workload), methods=["zeus"])
    with pytest.raises(kareus.InputError, match="budget_fraction"):
        kareus.optimize(str(workload), budget_fraction=-0.1)  # 0 is automatic
    with pytest.raises(kareus.InputError):
        kareus.optimize(str(tmp_path / "missing.yaml"))


def brute_force_pick(points, deadline_s=None, power_w=None, gpus=1):
    """The documented rules over frontier.json, written out independently: among the points with
    a plan, for a deadline the lowest energy within it (ties: faster), none: the fastest; for a
    power per GPU the fastest within it (ties: lower energy), none: the lowest-power one."""
    kept = [(i, p) for i, p in enumerate(points)
            if p.get("plan_path") or p.get("plan_index", -1) >= 0]
    if deadline_s is not None:
        within = [(i, p) for i, p in kept if p["time_s"] <= deadline_s]
        if within:
            return min(within, key=lambda ip: (ip[1]["energy_j"], ip[1]["time_s"], ip[0]))[0], True
        return min(kept, key=lambda ip: (ip[1]["time_s"], ip[0]))[0], False
    power = {i: p["energy_j"] / p["time_s"] / gpus for i, p in kept}
    within = [(i, p) for i, p in kept if power[i] <= power_w]
    if within:
        return min(within, key=lambda ip: (ip[1]["time_s"], ip[1]["energy_j"], ip[0]))[0], True
    return min(kept, key=lambda ip: (power[ip[0]], ip[0]))[0], False


def test_frontier_pick_and_kareus_pick_agree_with_brute_force(tmp_path):
    import subprocess
    workload = tmp_path / "small.yaml"
    workload.write_text(SMALL)
    out = tmp_path / "out"
    kareus.optimize(str(workload), out=str(out), methods=["kareus"])
    frontier = kareus.Frontier.load(out)
    points = json.loads((out / "frontier.json").read_text())["points"]
    assert len(frontier) == len(points) and len(points) > 3
    plan = json.loads((out / "plan.json").read_text())
    gpus = sum(stage["gpus"] for stage in plan["stages"])
    times = sorted(p["time_s"] for p in points)
    powers = sorted(p["energy_j"] / p["time_s"] / gpus for p in points)
    deadlines = [times[0] * 0.9] + times + [(a + b) / 2 for a, b in zip(times, times[1:])]
    budgets = [powers[0] * 0.9] + powers + [(a + b) / 2 for a, b in zip(powers, powers[1:])]
    binary = os.environ.get("KAREUS_BIN")
    for deadline in deadlines:
        want, meets = brute_force_pick(points, deadline_s=deadline)
        got = frontier.pick(deadline_s=deadline)
        assert (got["point_index"], got["meets"]) == (want, meets), deadline
        assert os.path.exists(got["plan_path"])
    for budget in budgets:
        want, meets = brute_force_pick(points, power_w=budget, gpus=gpus)
        got = frontier.pick(power_w=budget)
        assert (got["point_index"], got["meets"]) == (want, meets), budget
    if binary:  # the CLI's answer is the same rule's
        for flag, values in (("--deadline", deadlines[::7]), ("--power", budgets[::7])):
            for value in values:
                run = subprocess.run([binary, "pick", str(out), flag, repr(value), "--json"],
                                     capture_output=True, text=True, check=True)
                got = json.loads(run.stdout)
                kind = {"deadline_s": value} if flag == "--deadline" else {"power_w": value}
                want, meets = brute_force_pick(points, gpus=gpus, **kind)
                assert (got["point_index"], got["meets"]) == (want, meets), (flag, value)
    with pytest.raises(kareus.InputError, match="exactly one"):
        frontier.pick()
    with pytest.raises(kareus.InputError, match="frontier.json"):
        kareus.Frontier.load(tmp_path)


def small_workload_dict():
    """SMALL as the mapping a YAML loader makes of it (the module takes either)."""
    return {"name": "small-dict",
            "model": {"name": "small", "hidden": 2048, "heads": 16, "kv_groups": 8,
                      "head_dim": 128, "ffn": 8192, "layers": 4, "vocab": 32000},
            "gpu": "A100-SXM4-40GB", "parallelism": {"tp": 4, "pp": 2},
            "microbatch_size": 4, "sequence_length": 2048, "microbatches": 4,
            "recompute": "full"}


def test_optimize_takes_a_dict_as_the_file_would_be(tmp_path):
    workload = tmp_path / "small.yaml"
    workload.write_text(SMALL.replace("name: small\n", "name: small-dict\n", 1))
    from_file = kareus.optimize(workload, methods=["kareus"])  # a PathLike too
    from_dict = kareus.optimize(small_workload_dict(), methods=["kareus"])
    assert from_dict["workload"] == from_file["workload"]
    assert from_dict["max_throughput"] == from_file["max_throughput"]
    bad = small_workload_dict()
    bad["microbatch_sise"] = bad.pop("microbatch_size")
    with pytest.raises(kareus.InputError, match="microbatch_sise.*microbatch_size"):
        kareus.optimize(bad)
    with pytest.raises(kareus.InputError, match="parallelism.tp"):
        kareus.optimize(dict(small_workload_dict(), parallelism={"tp": 0, "pp": 2}))


PROFILE = """stage,instruction,frequency,time,energy
0,forward,1410,0.010,4.0
0,forward,1200,0.012,3.4
0,backward,1410,0.020,8.0
0,backward,1200,0.024,6.9
1,forward,1410,0.011,4.2
1,forward,1200,0.013,3.6
1,backward,1410,0.022,8.4
1,backward,1200,0.026,7.2
"""


def test_solve_and_export_write_what_the_cli_writes(tmp_path):
    import subprocess
    profile = tmp_path / "profile.csv"
    profile.write_text(PROFILE)
    out = tmp_path / "solved"
    solved = kareus.solve(profile, stages=2, microbatches=4, static_power_w=60.0, out=out)
    assert solved["status"] == "reached_minimum_time" and solved["points"] >= 2
    assert solved["fastest"]["time_s"] < solved["lowest_energy"]["time_s"]
    assert solved["fastest"]["energy_j"] > solved["lowest_energy"]["energy_j"]
    assert os.path.exists(solved["plan"]) and os.path.exists(solved["frontier"])
    assert len(solved["plans"]) == min(solved["points"], 10)  # the published sample
    binary = os.environ.get("KAREUS_BIN")
    if binary:
        run = subprocess.run([binary, "solve", str(profile), "--stages", "2", "--microbatches",
                              "4", "--static-power", "60", "--out", str(tmp_path / "cli"),
                              "--json"], capture_output=True, text=True, check=True)
        cli = json.loads(run.stdout)
        for key in ("status", "points", "steps", "fastest", "lowest_energy"):
            assert cli[key] == solved[key], key
    deadline = (solved["fastest"]["time_s"] + solved["lowest_energy"]["time_s"]) / 2
    one = kareus.solve(profile, stages=2, microbatches=4, static_power_w=60.0,
                       out=tmp_path / "one", deadline_s=deadline)
    assert one["fastest"]["time_s"] <= deadline and one["plans"] == []
    files = kareus.export(out / "plans", format="zeus", out=tmp_path / "zeus")
    assert len(files) == len(solved["plans"])
    assert all(os.path.basename(f).startswith("freqs_pipeline_") for f in files)
    assert "1200" in open(files[0]).read() or "1410" in open(files[0]).read()
    with pytest.raises(kareus.InputError, match="stages"):
        kareus.solve(profile, stages=0, microbatches=4, static_power_w=60.0, out=tmp_path / "x")
    with pytest.raises(kareus.InputError, match="schedule.*1f1b or gpipe"):
        kareus.solve(profile, stages=2, microbatches=4, static_power_w=60.0,
                     out=tmp_path / "x", schedule="zb")
    with pytest.raises(kareus.InputError, match="zeus"):
        kareus.export(out / "plan.json", format="onnx", out=tmp_path / "y")
    assert not os.path.exists(tmp_path / "x") and not os.path.exists(tmp_path / "y")
