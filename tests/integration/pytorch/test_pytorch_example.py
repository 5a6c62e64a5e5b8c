# SPDX-License-Identifier: Apache-2.0
"""examples/pytorch end to end: `kareus run` on the example's workload makes the plan, and the
TP 2 x PP 2 PyTorch job (4 processes, gloo) trains under it on CPU with kareus.torch executing
every instruction as planned, against the fake NVML.

Checks: the loss decreases over 20 steps; each rank's clock calls are exactly its stage's plan
clocks in instruction order, only on change, then one reset; each instruction ran in the plan's
mode and each partition's collective on the plan's SMs at the plan's slot (a plan rewritten to
nanobatch every instruction with knobs that differ per instruction, too); each iteration's
energy window integrates the fake's power; a straggler report switches every rank to the same
frontier plan at the same next step, and so does a power budget; a timetable moves every rank
to its next interval's plan at one step (rank 0's clock, broadcast); a plan for another pipeline, microbatch count or partition
layout is refused before the first step, naming both sides; SIGTERM to one rank mid-iteration
leaves every rank with its clocks reset and no process behind.

Run by CTest (pytorch_example_test) with /usr/bin/python3, PYTHONPATH=<build>/python,
KAREUS_BIN=<kareus>, KAREUS_NVML_LIBRARY=<fake>; skips itself (CTest: skipped, not passed)
without PyTorch or the kareus module.
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch, which "
                    "scripts/setup.sh installs)")
kareus = pytest.importorskip("kareus._kareus", reason="the kareus Python module was not built")

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "pytorch"
KAREUS = os.environ.get("KAREUS_BIN")
FAKE = os.environ.get("KAREUS_NVML_LIBRARY")
if not KAREUS or not FAKE:
    pytest.skip("KAREUS_BIN (the kareus CLI) and KAREUS_NVML_LIBRARY (the fake NVML) must be "
                "set; CTest sets them", allow_module_level=True)

STAGES, TP, MICROBATCHES = 2, 2, 4  # examples/pytorch/workload.yaml
RANKS = STAGES * TP
FAKE_POWER_W = 250.0  # fake_nvml.c's default power draw
JOB_TIMEOUT_S = 300  # no hang: every job is killed (and the test fails) after this


def stage_of(rank):
    return rank // TP  # Megatron's layout: tensor parallel fastest


def kareus_run(workload, out, *extra):
    """The README's command (with --quiet)."""
    subprocess.run([KAREUS, "run", str(workload), "--out", str(out), "--unit-time", "0.002",
                    "--quiet", *extra], check=True, stdout=subprocess.DEVNULL, timeout=300)
    return pathlib.Path(out)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    # The first readings alone: the switches below need a frontier plan that moves every stage's
    # clocks; with the default fresh readings (--confirm-readings) the tiny example's frontier
    # is three plans that all keep stage 1's.
    return kareus_run(EXAMPLE / "workload.yaml", tmp_path_factory.mktemp("run") / "run",
                      "--confirm-readings", "0")


def planned_partitions(document):
    """The planner's partition types of a `kareus.partitions` document, read independently of
    kareus.torch: name -> (tunable, launch slots, fixed SMs), and per stage and instruction
    kind the types whose collectives run."""
    types = {}
    for stage in document["stages"]:
        for instruction in stage["instructions"]:
            for p in instruction["partitions"]:
                types[p["type"]] = (p["tunable"], p["slots"], p["sm_choices"][0])
    launching = {(u["stage"], kind): {p["type"] for p in u[kind]["partitions"] if p["collective"]}
                 for u in document["program"] for kind in ("forward", "backward")}
    return types, launching


@pytest.fixture(scope="module")
def partitions():
    return planned_partitions(kareus.partitions(str(EXAMPLE / "workload.yaml"), program=True))


def expected_partitions(instruction, stage, partitions):
    """What each partition's collective should have run on, from the plan's instruction: its
    SMs and slot; the fixed knobs of a trailing type; a tuned type the plan leaves out on the
    library default (None) at its first launch slot; nothing for a sequential instruction."""
    types, launching = partitions
    if instruction.get("mode", "sequential") != "nanobatched":
        return {}
    given = {p["type"]: p for p in instruction.get("partitions", [])}
    out = {}
    for name in launching[(stage, instruction["kind"])]:
        tunable, slots, fixed_sms = types[name]
        if not tunable:
            out[name] = {"sms": fixed_sms, "slot": slots[0]}
        elif name in given:
            out[name] = {"sms": given[name]["sms"], "slot": given[name]["slot"]}
        else:
            out[name] = {"sms": None, "slot": slots[0]}
    return out


class Job:
    """train.py in its own session (killed as a whole on timeout), output read line by line."""

    def __init__(self, tmp_path, *args, env=None):
        self.nvml_log = tmp_path / "nvml.log"
        self.report = tmp_path / "report"
        environment = dict(os.environ, FAKE_NVML_LOG=str(self.nvml_log),
                           FAKE_NVML_DEVICES=str(RANKS), **(env or {}))
        self.process = subprocess.Popen(
            [sys.executable, str(EXAMPLE / "train.py"), "--report", str(self.report), *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment,
            start_new_session=True)
        self.lines = []
        self.timed_out = False
        self.timer = threading.Timer(JOB_TIMEOUT_S, self._kill)
        self.timer.start()

    def _kill(self):
        self.timed_out = True
        os.killpg(self.process.pid, signal.SIGKILL)

    def read_until(self, needle):
        for line in self.process.stdout:
            self.lines.append(line)
            if needle in line:
                return line
        return None

    def finish(self):
        self.lines += self.process.stdout.readlines()
        code = self.process.wait()
        self.timer.cancel()
        assert not self.timed_out, f"the job hung (killed after {JOB_TIMEOUT_S} s):\n{self.output}"
        return code

    @property
    def output(self):
        return "".join(self.lines)

    def records(self, rank, event=None):
        path = self.report / f"rank{rank}.jsonl"
        if not path.exists():
            return []
        records = [json.loads(line) for line in path.read_text().splitlines()]
        return [r for r in records if event is None or r["event"] == event]

    def clock_calls(self, gpu):
        """The fake NVML's set/reset calls on one GPU, in order: 1980 or "reset"."""
        calls = []
        if self.nvml_log.exists():
            for line in self.nvml_log.read_text().splitlines():
                parts = line.split()
                if parts[0] in ("set", "reset") and int(parts[1]) == gpu:
                    assert parts[-1] == "0", line
                    calls.append(int(parts[3]) if parts[0] == "set" else "reset")
        return calls


def stage_instructions(plan_path, stage):
    plan = json.loads(pathlib.Path(plan_path).read_text())
    return plan["stages"][stage]["instructions"]


def stage_clocks(plan_path, stage):
    return [i["freq_mhz"] for i in stage_instructions(plan_path, stage)]


def expected_calls(plans_per_step, stage):
    """One set per clock change, starting from nothing requested, then the reset at exit."""
    calls, last = [], None
    for plan in plans_per_step:
        for freq in stage_clocks(plan, stage):
            if freq != last:
                calls.append(freq)
            last = freq
    return calls + ["reset"]


def plan_path_of(point):
    """plan::FrontierPlanPath: the point's plan file, or kareus run's plans/plan_%05d.json."""
    return point.get("plan_path") or f"plans/plan_{point['plan_index']:05d}.json"


def choose(points, target_time_s):
    """The documented straggler rule (plan_executor.h): among the points with a plan, the
    lowest energy no slower than the target (ties: the faster); no such point: the fastest."""
    points = [p for p in points if p.get("plan_path") or p.get("plan_index", -1) >= 0]
    fitting = [p for p in points if p["time_s"] <= target_time_s]
    if not fitting:
        return min(points, key=lambda p: p["time_s"])
    return min(fitting, key=lambda p: (p["energy_j"], p["time_s"]))


def straggler_target(run_dir):
    """A target time whose frontier plan differs from plan.json on every stage, so that the
    switch is visible in every stage's clock calls."""
    points = json.loads((run_dir / "frontier.json").read_text())["points"]
    for point in sorted(points, key=lambda p: p["time_s"]):
        chosen = choose(points, point["time_s"])
        plan = run_dir / plan_path_of(chosen)
        if all(stage_clocks(plan, s) != stage_clocks(run_dir / "plan.json", s)
               for s in range(STAGES)):
            return point["time_s"], chosen
    pytest.fail("no frontier point of the example's plan differs from plan.json on every stage; "
                "the straggler switch cannot be observed")


def check_ran_as_planned(record, plan, stage, partitions):
    """Each instruction of a step record ran in the plan's order and mode, each partition's
    collective on the plan's SMs at the plan's slot."""
    planned = stage_instructions(plan, stage)
    served = record["instructions"]
    assert [(i["kind"], i["microbatch"], i["freq_mhz"], i["mode"]) for i in served] == \
        [(i["kind"], i["microbatch"], i["freq_mhz"], i.get("mode", "sequential")) for i in planned]
    for got, want in zip(served, planned):
        assert got["partitions"] == expected_partitions(want, stage, partitions), (got, want)


def test_the_workload_describes_the_job():
    import yaml  # a dependency of python3-torch
    import kareus.torch as kt
    sys.path.insert(0, str(EXAMPLE))
    import train

    workload = yaml.safe_load((EXAMPLE / "workload.yaml").read_text())
    assert pathlib.Path(train.parse_args([]).workload) == EXAMPLE / "workload.yaml"
    parallelism = workload["parallelism"]
    assert (parallelism["tp"], parallelism["pp"]) == (TP, STAGES)
    assert workload["microbatches"] == MICROBATCHES and workload["recompute"] == "none"
    # The job's parameters per layer, over its TP shards, are Kareus's per-layer count
    # (workload.cc LayerParameters) for the same shapes.
    shape = kt.ModelShape.from_workload(kt.Program.of_workload(workload).workload)
    per_rank = [kt.stage_weights(shape, 0, r).named_weights() for r in range(TP)]
    layer = "decoder.layers.0."
    sharded = sum(p.numel() for w in per_rank for n, p in w.items()
                  if n.startswith(layer) and "layernorm" not in n)
    replicated = sum(p.numel() for n, p in per_rank[0].items()
                     if n.startswith(layer) and "layernorm" in n)
    m = workload["model"]
    q, kv = m["heads"] * m["head_dim"], 2 * m["kv_groups"] * m["head_dim"]
    assert sharded + replicated == m["hidden"] * (q + kv) + q * m["hidden"] \
        + 3 * m["hidden"] * m["ffn"] + 2 * m["hidden"]


def test_training_under_a_plan_with_a_straggler_switch(run_dir, tmp_path, partitions):
    steps = 20
    target_s, chosen = straggler_target(run_dir)
    straggler_file = tmp_path / "straggler.json"
    job = Job(tmp_path, "--plan", str(run_dir / "plan.json"), "--steps", str(steps),
              "--exact-clocks", "--straggler-file", str(straggler_file),
              env={"FAKE_NVML_ENERGY_RETURN": "3"})  # no energy counter: power integration
    # The detector reports the straggler while the job runs (rank 0 reads it after a step).
    assert job.read_until("[stage 0 tp 0] step 9 "), job.output
    staging = tmp_path / "straggler.tmp"
    staging.write_text(json.dumps({"target_time_s": target_s}))
    staging.rename(straggler_file)
    assert job.finish() == 0, job.output

    # Real training: the last stage's loss falls (from ln 256 = 5.5 for random weights), the
    # same on both of its TP ranks.
    losses = [r["loss"] for r in job.records(RANKS - 1, "step")]
    assert len(losses) == steps
    assert losses[0] > 5.0
    assert max(losses[-3:]) < losses[0] - 2.0, losses
    assert [r["loss"] for r in job.records(RANKS - 2, "step")] == pytest.approx(losses)

    # Every rank switched to the same frontier point at the same step, mid-run.
    swaps = [job.records(rank, "swap") for rank in range(RANKS)]
    assert all(len(s) == 1 for s in swaps), swaps
    switch_step = swaps[0][0]["effective_step"]
    assert 10 <= switch_step < steps
    new_plan = run_dir / plan_path_of(chosen)
    for rank in range(RANKS):
        swap = swaps[rank][0]
        assert swap["effective_step"] == switch_step
        assert pathlib.Path(swap["plan_path"]).resolve() == new_plan.resolve()
        assert swap["time_s"] == pytest.approx(chosen["time_s"])

    for rank in range(RANKS):
        stage = stage_of(rank)
        records = job.records(rank, "step")
        assert [r["step"] for r in records] == list(range(steps))
        plans = [run_dir / "plan.json"] * switch_step + [new_plan] * (steps - switch_step)
        # The clock calls are the stage's plan clocks in instruction order, only on change,
        # with the new plan from the switch step on, then one reset. A switch one step early or
        # late would give other calls.
        calls = job.clock_calls(rank)
        assert calls == expected_calls(plans, stage), f"rank {rank}"
        for wrong in (switch_step - 1, switch_step + 1):
            shifted = [run_dir / "plan.json"] * wrong + [new_plan] * (steps - wrong)
            assert expected_calls(shifted, stage) != calls
        for record, plan in zip(records, plans):
            assert pathlib.Path(record["plan"]).resolve() == plan.resolve()
            check_ran_as_planned(record, plan, stage, partitions)
            # The iteration's energy window: the fake's constant power over the window.
            assert record["power_integrated"]
            assert record["energy_time_s"] >= record["time_s"]
            assert record["energy_j"] == pytest.approx(FAKE_POWER_W * record["energy_time_s"],
                                                       rel=0.01)
    # The job said, on its first step, how each instruction ran.
    assert "nanobatched; fwd_attn" in job.output or all(
        i.get("mode") != "nanobatched" for s in range(STAGES)
        for i in stage_instructions(run_dir / "plan.json", s))


def choose_for_power(points, budget_w, gpus):
    """The documented power rule (timetable_follower.h): among the points with a plan, the
    fastest whose energy / time / GPUs fits the budget; none fits: the lowest-power one."""
    points = [p for p in points if p.get("plan_path") or p.get("plan_index", -1) >= 0]
    power = {id(p): p["energy_j"] / p["time_s"] / gpus for p in points}
    fitting = [p for p in points if power[id(p)] <= budget_w]
    if not fitting:
        return min(points, key=lambda p: power[id(p)]), False
    return min(fitting, key=lambda p: (p["time_s"], p["energy_j"])), True


def test_a_power_budget_switches_every_rank_at_one_step(run_dir, tmp_path):
    steps = 12
    gpus = sum(stage["gpus"] for stage in json.loads((run_dir / "plan.json").read_text())["stages"])
    points = json.loads((run_dir / "frontier.json").read_text())["points"]
    budget = chosen = None
    for point in sorted(points, key=lambda p: -p["time_s"]):  # from the lowest budgets up
        candidate, fits = choose_for_power(points, point["energy_j"] / point["time_s"] / gpus, gpus)
        plan = run_dir / plan_path_of(candidate)
        if fits and all(stage_clocks(plan, s) != stage_clocks(run_dir / "plan.json", s)
                        for s in range(STAGES)):
            budget, chosen = point["energy_j"] / point["time_s"] / gpus, candidate
            break
    if budget is None:
        pytest.fail("no power budget picks a plan that differs from plan.json on every stage")
    budget_file = tmp_path / "budget.json"
    job = Job(tmp_path, "--plan", str(run_dir / "plan.json"), "--steps", str(steps),
              "--exact-clocks", "--power-budget-file", str(budget_file))
    assert job.read_until("[stage 0 tp 0] step 4 "), job.output
    staging = tmp_path / "budget.tmp"
    staging.write_text(json.dumps({"power_budget_w": budget * (1 + 1e-9)}))
    staging.rename(budget_file)
    assert job.finish() == 0, job.output
    swaps = [job.records(rank, "swap") for rank in range(RANKS)]
    assert all(len(s) == 1 for s in swaps), swaps
    switch_step = swaps[0][0]["effective_step"]
    assert 5 <= switch_step < steps
    new_plan = run_dir / plan_path_of(chosen)
    for rank in range(RANKS):
        swap = swaps[rank][0]
        assert swap["effective_step"] == switch_step and swap["fits"]
        assert pathlib.Path(swap["plan_path"]).resolve() == new_plan.resolve()
        assert swap["power_w_per_gpu"] <= budget * (1 + 1e-9)
        plans = [run_dir / "plan.json"] * switch_step + [new_plan] * (steps - switch_step)
        assert job.clock_calls(rank) == expected_calls(plans, stage_of(rank)), f"rank {rank}"


def utc(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def test_a_timetable_moves_every_rank_together(run_dir, tmp_path):
    """train.py --timetable: rank 0's clock, broadcast at every decision, so all ranks run each
    step on the same plan: plan.json for the first interval (until 20 s from now; a step before
    its start runs it too), then another plan (different on every stage) for the second. On the
    2-core machines this runs on, the job starts in 6-10 s and a step takes about 0.5 s, so the
    60 steps cross the boundary."""
    steps = 60
    _, other = straggler_target(run_dir)
    folder = tmp_path / "sched"
    (folder / "plans").mkdir(parents=True)
    first, second = folder / "plans" / "first.json", folder / "plans" / "second.json"
    first.write_text((run_dir / "plan.json").read_text())
    second.write_text((run_dir / plan_path_of(other)).read_text())
    start = int(time.time())
    # Iterations of 1000 s: the job is always ahead of the timetable, so it follows the
    # intervals by the clock alone.
    plans = [{"plan": "plans/first.json", "time_s": 1000.0, "energy_j": 1.0, "power_w": 1e-3},
             {"plan": "plans/second.json", "time_s": 1000.0, "energy_j": 1.0, "power_w": 1e-3}]

    def interval(begin, end, plan):
        return {"start": utc(begin), "end": utc(end), "signal": 1.0, "power_cap_w": None,
                "pause_s": 0.0, "entries": [{"plan": plan, "seconds": end - begin,
                                             "iterations": (end - begin) / 1000.0,
                                             "energy_j": 0.0, "cost": 0.0}],
                "energy_j": 0.0, "cost": 0.0}
    timetable = {"format": "kareus-timetable", "version": 1, "iterations": steps, "gpus": RANKS,
                 "idle_power_w": 0.0, "allow_pause": True, "plans": plans,
                 "intervals": [interval(start + 10, start + 20, "plans/first.json"),
                               interval(start + 20, start + 3600, "plans/second.json")],
                 "total_cost": 0.0, "total_energy_j": 0.0, "total_iterations": steps,
                 "finish": utc(start + 3600)}
    (folder / "timetable.json").write_text(json.dumps(timetable))
    job = Job(tmp_path, "--plan", str(run_dir / "plan.json"), "--steps", "1000", "--exact-clocks",
              "--timetable", str(folder / "timetable.json"))
    assert job.finish() == 0, job.output
    events = [[(r["step"], pathlib.Path(r["plan"]).name) for r in job.records(rank, "timetable")]
              for rank in range(RANKS)]
    assert all(e == events[0] for e in events), events  # the same plan at the same step
    assert events[0] and events[0][0] == (0, "first.json"), events[0]
    plans_per_step = {0: first}
    for step, name in events[0]:
        plans_per_step[step] = folder / "plans" / name
    for rank in range(RANKS):
        records = job.records(rank, "step")
        assert len(records) == steps  # the timetable's iterations, not --steps
        plans, current = [], first
        for step in range(steps):
            current = plans_per_step.get(step, current)
            plans.append(current)
        for record, plan in zip(records, plans):
            assert pathlib.Path(record["plan"]).resolve() == plan.resolve()
        assert job.clock_calls(rank) == expected_calls(plans, stage_of(rank)), f"rank {rank}"
    # On this machine the job starts within the first interval and reaches the second.
    assert [name for _, name in events[0]] == ["first.json", "second.json"], (events[0], job.output)


def tuned_plan(run_dir, tmp_path):
    """plan.json with every instruction nanobatched and tuned knobs that differ per
    instruction (the example's model is too small for the planner's emulated H100 to nanobatch
    much of it), so the executor is checked on every partition type, many slots and SM counts."""
    plan = json.loads((run_dir / "plan.json").read_text())
    types = {"forward": {"fwd_attn": ["norm_0", "linear_0", "rope_0", "attn_0"],
                         "fwd_mlp": ["norm_0", "linear_0", "activation_0"]},
             "backward": {"bwd_attn": ["norm_0", "linear_0", "attn_0", "rope_0"],
                          "bwd_mlp": ["norm_0", "linear_0", "activation_0"]}}
    for stage in plan["stages"]:
        for n, instruction in enumerate(stage["instructions"]):
            instruction["mode"] = "nanobatched"
            instruction["partitions"] = [
                {"type": t, "sms": 3 * (1 + (n + k) % 4), "slot": slots[(n + k) % len(slots)]}
                for k, (t, slots) in enumerate(types[instruction["kind"]].items())]
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(plan))
    return path


def test_every_instruction_runs_with_the_plans_modes_slots_and_sms(run_dir, tmp_path, partitions):
    tuned = tuned_plan(run_dir, tmp_path)
    job = Job(tmp_path, "--plan", str(tuned), "--steps", "2")
    assert job.finish() == 0, job.output
    for rank in range(RANKS):
        records = job.records(rank, "step")
        assert len(records) == 2
        for record in records:
            check_ran_as_planned(record, tuned, stage_of(rank), partitions)
            assert all(i["mode"] == "nanobatched" for i in record["instructions"])
            assert all(i["partitions"] for i in record["instructions"])
    assert "fwd_attn 6 SMs @ linear_0" in job.output, job.output  # printed as run


@pytest.mark.parametrize("change,differences", [
    (("pp: 2", "pp: 4"), ["parallelism.pp: plan 4, job 2",
                          "parallelism.layers_per_stage: plan [1, 1, 1, 1], job [2, 2]"]),
    (("microbatches: 4", "microbatches: 8"), ["microbatches: plan 8, job 4"]),
])
def test_a_plan_for_another_job_is_refused_before_the_first_step(tmp_path, change, differences):
    text = (EXAMPLE / "workload.yaml").read_text()
    assert change[0] in text
    workload = tmp_path / "other.yaml"
    workload.write_text(text.replace(change[0], change[1]))
    plan = kareus_run(workload, tmp_path / "other", "--methods", "megatron") / "plan.json"
    job = Job(tmp_path, "--plan", str(plan), "--steps", "3")
    assert job.finish() == 2, job.output
    for rank in range(RANKS):
        message = f"[stage {stage_of(rank)} tp {rank % TP}] error: {plan}: the plan was made for another job: "
        assert message in job.output, job.output
        for difference in differences:
            assert difference in job.output
        assert job.records(rank, "step") == []
        assert job.clock_calls(rank) == []  # no clock was touched


def test_a_plan_with_partitions_the_model_lacks_is_refused(run_dir, tmp_path):
    plan = json.loads((run_dir / "plan.json").read_text())
    instruction = plan["stages"][1]["instructions"][0]
    instruction.update(mode="nanobatched",
                       partitions=[{"type": "fwd_qkv_ag", "sms": 4, "slot": "rope_0"}])
    path = tmp_path / "cp.json"
    path.write_text(json.dumps(plan))
    job = Job(tmp_path, "--plan", str(path), "--steps", "1")
    assert job.finish() == 2, job.output
    # The plan check every reader applies (plan/check.h, through kareus.load_plan) names both
    # sides before the job builds anything.
    assert "stages[1].instructions[0].partitions[0].type = fwd_qkv_ag: not a forward partition " \
           "type of this workload (valid: fwd_attn, fwd_mlp, fwd_trail)" in job.output
    instruction.update(partitions=[{"type": "fwd_mlp", "sms": 4, "slot": "attn_0"}])
    path.write_text(json.dumps(plan))
    job = Job(tmp_path, "--plan", str(path), "--steps", "1")
    assert job.finish() == 2, job.output
    assert "partitions[0].slot = attn_0: not a slot of fwd_mlp" in job.output
    assert all(job.clock_calls(rank) == [] for rank in range(RANKS))


def test_sigterm_to_one_rank_mid_iteration_resets_every_rank(run_dir, tmp_path):
    job = Job(tmp_path, "--plan", str(run_dir / "plan.json"), "--steps", "1000")
    assert job.read_until("[stage 1 tp 0] step 1 "), job.output
    step_s = job.records(RANKS - 1, "step")[-1]["time_s"]
    time.sleep(0.3 * step_s)  # well inside the next iteration
    pids = {r["rank"]: r["pid"] for rank in range(RANKS) for r in job.records(rank, "start")}
    os.kill(pids[RANKS - 2], signal.SIGTERM)
    code = job.finish()
    # The launcher reports the signal (or another rank's lost connection, if it exited first).
    assert code in (128 + signal.SIGTERM, 1), job.output
    assert "error" not in [r["event"] for r in job.records(RANKS - 2)]
    assert not any(job.records(rank, "end") for rank in range(RANKS))
    for rank in range(RANKS):
        calls = job.clock_calls(rank)
        assert calls and isinstance(calls[0], int)
        # The clock ends reset and is never set again after its first reset. The launcher stops
        # the other ranks with SIGTERM while they leave on the lost connection: a rank can die
        # between its own reset and telling its clock watcher, which then resets once more.
        assert calls[-1] == "reset", (rank, calls)
        first_reset = calls.index("reset")
        assert all(c == "reset" for c in calls[first_reset:]) and calls.count("reset") <= 2, (rank, calls)
        with pytest.raises(ProcessLookupError):
            os.kill(pids[rank], 0)
