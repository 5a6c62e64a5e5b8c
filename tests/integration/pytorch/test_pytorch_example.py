# SPDX-License-Identifier: Apache-2.0
"""examples/pytorch end to end: `kareus run` on the example's workload makes the plan, and the
2-stage pipeline-parallel PyTorch job trains under it on CPU, against the fake NVML.

Checks: the loss decreases; each stage's clock calls are exactly its plan's clocks in
instruction order, only on change, then one reset; the model is served each instruction's knobs;
each iteration's energy window integrates the fake's power; a straggler report switches every
stage to the same frontier plan at the same next step; a plan for another stage or microbatch
count is refused before the first step, naming both; SIGTERM to one stage mid-iteration leaves
both with clocks reset and no process behind.

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
pytest.importorskip("kareus._kareus", reason="the kareus Python module was not built")

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "pytorch"
KAREUS = os.environ.get("KAREUS_BIN")
FAKE = os.environ.get("KAREUS_NVML_LIBRARY")
if not KAREUS or not FAKE:
    pytest.skip("KAREUS_BIN (the kareus CLI) and KAREUS_NVML_LIBRARY (the fake NVML) must be "
                "set; CTest sets them", allow_module_level=True)

STAGES, MICROBATCHES = 2, 4  # the job's defaults, as in examples/pytorch/workload.yaml
FAKE_POWER_W = 250.0  # fake_nvml.c's default power draw
JOB_TIMEOUT_S = 240  # no hang: every job is killed (and the test fails) after this


def kareus_run(workload, out, *extra):
    """The README's command (with --quiet)."""
    subprocess.run([KAREUS, "run", str(workload), "--out", str(out), "--unit-time", "0.002",
                    "--quiet", *extra], check=True, stdout=subprocess.DEVNULL, timeout=300)
    return pathlib.Path(out)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return kareus_run(EXAMPLE / "workload.yaml", tmp_path_factory.mktemp("run") / "run")


class Job:
    """train.py in its own session (killed as a whole on timeout), output read line by line."""

    def __init__(self, tmp_path, *args, env=None):
        self.nvml_log = tmp_path / "nvml.log"
        self.report = tmp_path / "report"
        environment = dict(os.environ, FAKE_NVML_LOG=str(self.nvml_log), **(env or {}))
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


def test_the_workload_describes_the_job():
    import yaml  # a dependency of python3-torch
    sys.path.insert(0, str(EXAMPLE))
    import model
    import train

    workload = yaml.safe_load((EXAMPLE / "workload.yaml").read_text())
    config = model.ModelConfig()
    for field in ("hidden", "heads", "kv_groups", "head_dim", "ffn", "layers", "vocab"):
        assert workload["model"][field] == getattr(config, field), field
    assert not workload["model"]["qk_norm"] and not workload["model"]["tied_embeddings"]
    assert workload["sequence_length"] == config.sequence_length
    defaults = train.parse_args([])
    assert workload["parallelism"]["pp"] == defaults.stages == STAGES
    assert workload["microbatches"] == defaults.microbatches == MICROBATCHES
    assert workload["microbatch_size"] == defaults.microbatch_size
    assert workload["recompute"] == "none"  # the job keeps its activations
    stage = model.Stage(config, 0, 1)
    parameters = sum(p.numel() for p in stage.blocks.parameters())
    # Kareus's per-layer count (workload.cc LayerParameters) for the same shapes.
    q, kv = config.heads * config.head_dim, 2 * config.kv_groups * config.head_dim
    per_layer = config.hidden * (q + kv) + q * config.hidden + 3 * config.hidden * config.ffn \
        + 2 * config.hidden
    assert parameters == config.layers * per_layer


def test_training_under_a_plan_with_a_straggler_switch(run_dir, tmp_path):
    steps = 6
    target_s, chosen = straggler_target(run_dir)
    straggler_file = tmp_path / "straggler.json"
    job = Job(tmp_path, "--plan", str(run_dir / "plan.json"), "--steps", str(steps),
              "--exact-clocks", "--straggler-file", str(straggler_file),
              env={"FAKE_NVML_ENERGY_RETURN": "3"})  # no energy counter: power integration
    # The detector reports the straggler while the job runs (stage 0 reads it after a step).
    assert job.read_until("[stage 0] step 1 "), job.output
    staging = tmp_path / "straggler.tmp"
    staging.write_text(json.dumps({"target_time_s": target_s}))
    staging.rename(straggler_file)
    assert job.finish() == 0, job.output

    # Real training: the last stage's loss falls (from ln 256 = 5.5 for random weights).
    losses = [r["loss"] for r in job.records(STAGES - 1, "step")]
    assert len(losses) == steps
    assert losses[0] > 5.0
    assert max(losses[-2:]) < losses[0] - 1.0, losses

    # Every stage switched to the same frontier point at the same step, mid-run.
    swaps = [job.records(rank, "swap") for rank in range(STAGES)]
    assert all(len(s) == 1 for s in swaps), swaps
    switch_step = swaps[0][0]["effective_step"]
    assert 1 <= switch_step < steps
    new_plan = run_dir / plan_path_of(chosen)
    for rank in range(STAGES):
        swap = swaps[rank][0]
        assert swap["effective_step"] == switch_step
        assert pathlib.Path(swap["plan_path"]).resolve() == new_plan.resolve()
        assert swap["time_s"] == pytest.approx(chosen["time_s"])

    for rank in range(STAGES):
        records = job.records(rank, "step")
        assert [r["step"] for r in records] == list(range(steps))
        plans = [run_dir / "plan.json"] * switch_step + [new_plan] * (steps - switch_step)
        # The clock calls are the plan's clocks in instruction order, only on change, with the
        # new plan from the switch step on, then one reset. A switch one step early or late
        # would give other calls.
        calls = job.clock_calls(rank)
        assert calls == expected_calls(plans, rank), f"stage {rank}"
        for wrong in (switch_step - 1, switch_step + 1):
            shifted = [run_dir / "plan.json"] * wrong + [new_plan] * (steps - wrong)
            assert expected_calls(shifted, rank) != calls
        for record, plan in zip(records, plans):
            assert pathlib.Path(record["plan"]).resolve() == plan.resolve()
            # The executor served the plan's instructions in order, and the model's collective
            # points got each instruction's knobs (None where the plan has none).
            planned = stage_instructions(plan, rank)
            served = record["instructions"]
            assert [(i["kind"], i["microbatch"], i["freq_mhz"], i["mode"]) for i in served] == \
                [(i["kind"], i["microbatch"], i["freq_mhz"], i.get("mode", "sequential"))
                 for i in planned]
            for got, want in zip(served, planned):
                knobs = {k["type"]: [k["sms"], k["slot"]] for k in want.get("partitions", [])}
                assert set(knobs) <= set(got["knobs"]), (got, want)
                for partition_type, served_knobs in got["knobs"].items():
                    assert served_knobs == knobs.get(partition_type), (got, want)
            # The iteration's energy window: the fake's constant power over the window.
            assert record["power_integrated"]
            assert record["energy_time_s"] >= record["time_s"]
            assert record["energy_j"] == pytest.approx(FAKE_POWER_W * record["energy_time_s"],
                                                       rel=0.01)


def test_the_model_is_served_each_instructions_knobs(run_dir, tmp_path):
    """The example's model is far too small for overlap to pay (the emulator charges each kernel
    launch; `kareus run` plans it sequentially), so its own plans carry no knobs. This plan is
    plan.json with tuned comm knobs written into every instruction, so the serving path from the
    plan file to the model's collective points is checked with knobs that differ per
    instruction."""
    plan = json.loads((run_dir / "plan.json").read_text())
    types = {"forward": ["fwd_attn", "fwd_mlp"], "backward": ["bwd_attn", "bwd_mlp"]}
    for stage in plan["stages"]:
        for n, instruction in enumerate(stage["instructions"]):
            instruction["mode"] = "nanobatched"
            instruction["partitions"] = [
                {"type": t, "sms": 1 + (n + k) % 7, "slot": ("norm_0", "linear_0")[(n + k) % 2]}
                for k, t in enumerate(types[instruction["kind"]])]
    tuned = tmp_path / "tuned.json"
    tuned.write_text(json.dumps(plan))
    job = Job(tmp_path, "--plan", str(tuned), "--steps", "2")
    assert job.finish() == 0, job.output
    for rank in range(STAGES):
        records = job.records(rank, "step")
        assert len(records) == 2
        for record in records:
            served = record["instructions"]
            planned = stage_instructions(tuned, rank)
            assert len(served) == len(planned)
            for got, want in zip(served, planned):
                knobs = {k["type"]: [k["sms"], k["slot"]] for k in want["partitions"]}
                # The model asks for every collective point it has (the trailing one too,
                # which the plan leaves at its fixed knobs: None).
                assert {t: v for t, v in got["knobs"].items() if v is not None} == knobs, (got, want)
                assert set(knobs) < set(got["knobs"])


@pytest.mark.parametrize("change,job_has,plan_has", [
    (("pp: 2", "pp: 4"), "2 pipeline stages x 4 microbatches (1f1b)",
     "4 pipeline stages x 4 microbatches (1f1b)"),
    (("microbatches: 4", "microbatches: 8"), "2 pipeline stages x 4 microbatches (1f1b)",
     "2 pipeline stages x 8 microbatches (1f1b)"),
])
def test_a_plan_for_another_pipeline_is_refused_before_the_first_step(tmp_path, change, job_has,
                                                                        plan_has):
    text = (EXAMPLE / "workload.yaml").read_text()
    assert change[0] in text
    workload = tmp_path / "other.yaml"
    workload.write_text(text.replace(change[0], change[1]))
    plan = kareus_run(workload, tmp_path / "other", "--methods", "megatron") / "plan.json"
    job = Job(tmp_path, "--plan", str(plan), "--steps", "3")
    assert job.finish() == 2, job.output
    for rank in range(STAGES):
        message = (f"[stage {rank}] error: {plan}: the plan does not match this job: the plan "
                   f"is for {plan_has}, the job runs {job_has}")
        assert message in job.output, job.output
        assert job.records(rank, "step") == []
        assert job.clock_calls(rank) == []  # no clock was touched


def test_sigterm_to_one_stage_mid_iteration_resets_both(run_dir, tmp_path):
    job = Job(tmp_path, "--plan", str(run_dir / "plan.json"), "--steps", "1000")
    assert job.read_until("[stage 1] step 1 "), job.output
    step_s = job.records(1, "step")[-1]["time_s"]
    time.sleep(0.3 * step_s)  # well inside the next iteration
    pids = {r["rank"]: r["pid"] for rank in range(STAGES) for r in job.records(rank, "start")}
    os.kill(pids[1], signal.SIGTERM)
    code = job.finish()
    # The launcher reports the signal (or stage 0's lost connection, if it exited first).
    assert code in (128 + signal.SIGTERM, 1), job.output
    assert "error" not in [r["event"] for r in job.records(1)]
    assert not job.records(1, "end") and not job.records(0, "end")
    for rank in range(STAGES):
        calls = job.clock_calls(rank)
        assert calls and isinstance(calls[0], int)
        assert calls[-1] == "reset" and calls.count("reset") == 1, (rank, calls)
        with pytest.raises(ProcessLookupError):
            os.kill(pids[rank], 0)
