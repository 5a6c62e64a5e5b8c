# SPDX-License-Identifier: Apache-2.0
"""The torch backend's worker (`python -m kareus.torch.measure`, kareus.measure/1) spoken to as
`kareus --backend torch` speaks to it, on the CPU against the fake NVML: the handshake, every
kind of measurement, errors that name the request, and the consistency of a measured partition
with the same partition's time inside a training step of the executor."""
import json
import os
import pathlib
import statistics
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
kareus = pytest.importorskip("kareus._kareus", reason="the kareus Python module was not built")
FAKE = os.environ.get("KAREUS_NVML_LIBRARY")
if not FAKE:
    pytest.skip("KAREUS_NVML_LIBRARY (the fake NVML) is not set; CTest sets it", allow_module_level=True)

import kareus.torch as kt  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import distributed  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "examples" / "pytorch" / "workload.yaml"  # TP 2 x PP 2
ENV = dict(os.environ, FAKE_NVML_DEVICES="8", FAKE_NVML_ENERGY_RETURN="3")  # 250 W, integrated
FAKE_POWER_W = 250.0
# The measured time of a partition against its time inside a training step (median over
# repeated measurements and steps): what this 2-core machine's noise allows, measured over
# repeated runs of this test (0.9 to 1.5 seen).
CONSISTENCY = (0.6, 1.8)


class Worker:
    def __init__(self, record=None, options=None):
        self.process = subprocess.Popen([sys.executable, "-m", "kareus.torch.measure"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=ENV)
        if record is None:
            record = kareus.partitions(str(WORKLOAD), program=False)["workload"]
        self.send({"protocol": "kareus.measure/1", "workload": record, "virtual_stages": 1,
                   "options": dict({"window_s": 0.02, "default_mhz": 1980}, **(options or {}))})
        self.hello = self.receive()

    def send(self, message):
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def receive(self):
        line = self.process.stdout.readline()
        assert line, "the worker closed its output: " + self.process.stderr.read()
        return json.loads(line)

    def request(self, message):
        self.send(message)
        replies = []
        while True:
            reply = self.receive()
            assert reply["id"] == message["id"]
            if "error" in reply or reply.get("done"):
                return replies, reply
            assert reply["index"] == len(replies)
            replies.append(reply)

    def close(self):
        self.process.stdin.close()
        return self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    assert w.close() == 0


def test_the_handshake_says_what_measures(worker):
    assert worker.hello["ready"] and worker.hello["protocol"] == "kareus.measure/1"
    assert worker.hello["device"] == "cpu"
    description = worker.hello["description"]
    assert "host wall time of the CPU kernels (not a GPU result)" in description
    assert "libfake-nvml" in description


def test_every_kind_is_measured_per_configuration(worker):
    def check(readings, gpus, count):
        assert len(readings) == count
        for r in readings:
            assert r["time_s"] > 0 and r["gpus"] == gpus and r["runs"] >= 3
            # The fake's constant power over the timed work: energy = power x time, per GPU. The
            # fake has no energy counter, so the monitor integrates a 10 ms power poller over the
            # 0.2 s window; on a loaded 2-core machine (the suite runs two tests at once) that
            # thread misses periods: 0.84 x was seen, so 25 %, which still catches a reading
            # that is not this configuration's (another GPU count, a window not shared out).
            assert r["energy_j"] == pytest.approx(FAKE_POWER_W * r["time_s"], rel=0.25)
            assert r["seconds"] >= r["time_s"] * r["runs"]
    readings, done = worker.request({"id": 1, "kind": "partition", "type": "bwd_attn", "configurations": [
        {"freq_mhz": 1980, "sms": 3, "slot": "norm_0"}, {"freq_mhz": 1980, "sms": 9, "slot": "rope_0"}]})
    assert done["done"] and done["overhead_s"] > 0
    check(readings, 2, 2)
    readings, done = worker.request({"id": 2, "kind": "instruction", "configurations": [
        {"stage": 0, "chunk": 0, "direction": "forward", "freq_mhz": 1980, "mode": "sequential"},
        {"stage": 1, "chunk": 0, "direction": "backward", "freq_mhz": 1980, "mode": "nanobatched",
         "partitions": {"bwd_mlp": {"sms": 6, "slot": "linear_0"}}}]})
    check(readings, 2, 2)
    instruction = readings[1]["time_s"]
    readings, done = worker.request({"id": 3, "kind": "fixed_work", "configurations": [
        {"stage": 1, "chunk": 0, "direction": "backward", "freq_mhz": 1980}]})
    check(readings, 2, 1)
    assert readings[0]["time_s"] < instruction  # a part of the instruction


def test_gradient_reductions_run_over_the_data_parallel_replicas():
    record = kareus.partitions(str(WORKLOAD), program=False)["workload"]
    record["parallelism"].update(tp=1, dp=2)
    w = Worker(record=record)
    assert w.hello["ready"], w.hello
    readings, done = w.request({"id": 1, "kind": "reduction", "configurations": [
        {"stage": 0, "freq_mhz": 1980, "sms": 4, "bytes": [400000, 800000], "element_bytes": 4},
        {"stage": 0, "freq_mhz": 1980, "sms": 8, "bytes": [1200000], "element_bytes": 4}]})
    assert done["done"], done
    assert [r["gpus"] for r in readings] == [2, 2]  # DP x CP replicas
    assert all(r["time_s"] > 0 for r in readings)
    assert w.close() == 0


def test_errors_name_the_request_and_the_rule(worker):
    _, reply = worker.request({"id": 4, "kind": "partition", "type": "fwd_mlp",
                               "configurations": [{"freq_mhz": 1980, "sms": 3, "slot": "rope_3"}]})
    assert "slot 'rope_3' is not one of its slots" in reply["error"]
    _, reply = worker.request({"id": 5, "kind": "partition", "type": "fwd_qkv_ag",
                               "configurations": [{"freq_mhz": 1980, "sms": 3, "slot": "norm_0"}]})
    assert "not a partition type of the workload" in reply["error"]
    _, reply = worker.request({"id": 6, "kind": "weather", "configurations": []})
    assert "not a measurement kind" in reply["error"]
    # The worker goes on after an error.
    readings, done = worker.request({"id": 7, "kind": "partition", "type": "fwd_mlp",
                                     "configurations": [{"freq_mhz": 1980, "sms": 3, "slot": "norm_0"}]})
    assert done["done"] and len(readings) == 1


def test_a_hello_the_worker_cannot_take_is_refused():
    process = subprocess.run([sys.executable, "-m", "kareus.torch.measure"], env=ENV, text=True,
                             input=json.dumps({"protocol": "kareus.measure/9"}) + "\n",
                             capture_output=True, timeout=120)
    assert process.returncode == 2
    assert "this worker speaks kareus.measure/1" in json.loads(process.stdout)["error"]
    record = kareus.partitions(str(WORKLOAD), program=False)["workload"]
    record["parallelism"]["virtual_stages"] = 2
    bad = Worker(record=record)
    assert "interleaved" in bad.hello["error"]
    assert bad.close() == 2


def _in_training(rank, knobs):
    """The executor's time of each partition type's steady occurrences in training steps of
    the same layer (TP 2, one stage: the worker's ranks, the same CPU load), each step in an
    energy window as examples/pytorch measures its iterations (on a CPU the runtime's power
    poller takes its share of the cores, in training as in the worker)."""
    import yaml
    os.environ.update(ENV)
    monitor = kareus.EnergyMonitor(gpu_indices=[rank])
    workload = yaml.safe_load(WORKLOAD.read_text())
    workload["parallelism"]["pp"] = 1
    workload["model"]["layers"] = 2
    job = kt.Job.without_plan(workload, sm_counts_by_kind={"tp": sorted({k["sms"] for k in knobs.values()} | {20})})
    job.stage.timing = True
    program = job.program
    choices = {name: kt.CommChoice(knobs[name]["sms"], knobs[name]["slot"]) if name in knobs
               else kt.CommChoice(20, "norm_0") for name in program.types}
    config = kt.InstructionConfig("nanobatched", choices)
    job.runner.configs = lambda kind, m: config
    unit = program.unit(0)
    steady = {t: max(len(p.compute) for ins in (unit.forward, unit.backward) for p in ins.partitions
                     if p.type == t) for t in program.types}
    g = torch.Generator().manual_seed(0)
    times = {}
    for step in range(8):
        tokens = torch.randint(0, 256, (job.shape.microbatches, job.shape.microbatch_size,
                                        job.shape.sequence_length), generator=g)
        monitor.begin_window("step")
        _, applied = job.train_step(tokens, tokens, step)
        monitor.end_window("step")
        for p in job.weights.parameters():
            p.grad = None
        if step < 2:
            continue
        for a in applied:
            for (name, _, seconds), p in zip(a.partition_times, unit.instruction(a.kind).partitions):
                if p.collective is not None and len(p.compute) == steady[name]:
                    times.setdefault(name, []).append(seconds)
    return {name: statistics.median(v) for name, v in times.items()}


def test_a_measured_partition_takes_its_time_in_training(tmp_path):
    knobs = {"fwd_attn": {"sms": 3, "slot": "rope_0"}, "fwd_mlp": {"sms": 6, "slot": "linear_0"},
             "bwd_attn": {"sms": 9, "slot": "attn_0"}, "bwd_mlp": {"sms": 3, "slot": "activation_0"}}
    w = Worker(options={"window_s": 0.2})
    measured = {}
    for i, (name, k) in enumerate(knobs.items()):
        readings, _ = w.request({"id": i + 1, "kind": "partition", "type": name,
                                 "configurations": [dict(k, freq_mhz=1980)] * 3})
        measured[name] = statistics.median(r["time_s"] for r in readings)
    assert w.close() == 0
    trained = distributed.run(2, _in_training, knobs, folder=tmp_path)
    ratios = {name: measured[name] / max(r[name] for r in trained) for name in knobs}
    print("measured / in training:", {k: round(v, 3) for k, v in ratios.items()})
    assert all(CONSISTENCY[0] <= r <= CONSISTENCY[1] for r in ratios.values()), ratios
