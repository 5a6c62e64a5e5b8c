# SPDX-License-Identifier: Apache-2.0
"""The Python module against the fake NVML: the 2-stage x 8-microbatch 1F1B loop, order
mismatches, bad plans, the permission refusal, energy windows, SIGTERM.

Run by CTest (runtime_python_test) with PYTHONPATH=<build>/python and KAREUS_NVML_LIBRARY set to
the fake; skips itself when the module was not built.
"""
import ctypes
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

kareus = pytest.importorskip("kareus._kareus", reason="kareus Python module not built")
import kareus  # noqa: E402  (the package, now known to import)

DATA = pathlib.Path(os.environ.get("KAREUS_RUNTIME_TEST_DATA",
                                   pathlib.Path(__file__).resolve().parent.parent / "data"))
FAKE = os.environ.get("KAREUS_NVML_LIBRARY")
if not FAKE:
    pytest.skip("KAREUS_NVML_LIBRARY (the fake NVML) is not set", allow_module_level=True)

STAGES, MICROBATCHES = 2, 8


def one_f_one_b(stage):
    """Megatron's non-interleaved 1F1B order of one stage."""
    warmup = min(STAGES - stage - 1, MICROBATCHES)
    order = ["forward"] * warmup
    for _ in range(MICROBATCHES - warmup):
        order += ["forward", "backward"]
    return order + ["backward"] * warmup


def clock_calls(log, gpu):
    calls = []
    if not log.exists():
        return calls
    for line in log.read_text().splitlines():
        parts = line.split()
        if parts[0] == "set" and int(parts[1]) == gpu:
            calls.append(f"set {parts[3]}" + ("" if parts[-1] == "0" else f" -> {parts[-1]}"))
        elif parts[0] == "reset" and int(parts[1]) == gpu:
            calls.append("reset" if parts[-1] == "0" else f"reset -> {parts[-1]}")
    return calls


@pytest.fixture()
def log(tmp_path, monkeypatch):
    path = tmp_path / "nvml.log"
    monkeypatch.setenv("FAKE_NVML_LOG", str(path))
    return path


@pytest.fixture()
def fake():
    lib = ctypes.CDLL(FAKE)
    lib.fake_nvml_set_energy_mj.argtypes = [ctypes.c_uint, ctypes.c_ulonglong]
    lib.fake_nvml_set_return.argtypes = [ctypes.c_char_p, ctypes.c_int]
    yield lib
    lib.fake_nvml_set_return(b"set", 0)
    lib.fake_nvml_set_return(b"energy", 0)


def run_step(executor, stage):
    executor.on_step_begin()
    for kind in one_f_one_b(stage):
        executor.on_instruction_begin(kind)
        executor.on_instruction_end(kind)
    executor.on_step_end()


def test_loop_sets_clocks_in_plan_order_only_on_change(log):
    for stage in range(STAGES):
        controller = kareus.FrequencyController(gpu=stage, install_signal_handlers=False,
                                                coalesce=False)
        executor = kareus.PlanExecutor(DATA / "plan_2x8.json", stage=stage,
                                       controller=controller)
        assert executor.num_instructions == 2 * MICROBATCHES
        planned = []
        executor.on_step_begin()
        for kind in one_f_one_b(stage):
            executor.on_instruction_begin(kind)
            current = executor.current
            assert current["kind"] == kind
            planned.append(current["freq_mhz"])
            if kind == "forward":
                assert executor.knobs("fwd_attn") == (8 + stage, "rope_0")
            else:
                assert executor.knobs("fwd_attn") is None
            executor.on_instruction_end(kind)
        executor.on_step_end()
        run_step(executor, stage)
        controller.wait_idle()
        assert controller.stats["requests"] == 4 * MICROBATCHES
        del executor, controller  # the controller resets the clocks

        expected, last = [], 0
        for freq in planned * 2:
            if freq != last:
                expected.append(f"set {freq}")
            last = freq
        assert clock_calls(log, stage) == expected + ["reset"]


def test_mismatch_names_step_instruction_and_expectation(log):
    executor = kareus.PlanExecutor(DATA / "plan_2x8.json", stage=0)
    executor.on_instruction_begin("forward")
    executor.on_instruction_end("forward")
    with pytest.raises(kareus.InputError) as error:
        executor.on_instruction_begin("backward")
    message = str(error.value)
    assert "step 0, instruction 1" in message
    assert "began backward" in message
    assert "expects forward (microbatch 1)" in message
    assert isinstance(error.value, ValueError)


@pytest.mark.parametrize("name,needle", [("bad_version.json", "unsupported version 9"),
                                         ("truncated.json", "not valid JSON"),
                                         ("absent.json", "absent.json")])
def test_bad_plan_files_are_rejected_and_clocks_untouched(log, name, needle):
    controller = kareus.FrequencyController(gpu=0, install_signal_handlers=False)
    with pytest.raises(kareus.InputError, match=needle):
        kareus.PlanExecutor(DATA / name, stage=0, controller=controller)
    del controller
    assert clock_calls(log, 0) == []


def test_plan_for_another_pipeline_is_refused_naming_both(log):
    executor = kareus.PlanExecutor(DATA / "plan_2x8.json", stage=1, num_stages=STAGES,
                                   num_microbatches=MICROBATCHES)
    assert (executor.num_stages, executor.num_microbatches) == (STAGES, MICROBATCHES)
    assert executor.schedule == "1f1b"
    kareus.PlanExecutor(DATA / "plan_2x8.json", stage=0, schedule="1f1b")
    controller = kareus.FrequencyController(gpu=0, install_signal_handlers=False)
    for stages, microbatches, schedule, job in [
            (4, None, None, "the job runs 4 pipeline stages ("),
            (None, 4, None, "the job runs 4 microbatches ("),
            (None, None, "gpipe", "the job runs the gpipe schedule ("),
            (4, 16, "1f1b", "the job runs 4 pipeline stages x 16 microbatches (1f1b) (")]:
        with pytest.raises(kareus.InputError) as error:
            # Stage 3 is not in the plan: the mismatch is named before the stage range.
            kareus.PlanExecutor(DATA / "plan_2x8.json", stage=3 if stages else 0,
                                controller=controller, num_stages=stages,
                                num_microbatches=microbatches, schedule=schedule)
        message = str(error.value)
        assert "plan_2x8.json: the plan does not match this job" in message
        assert "the plan is for 2 pipeline stages x 8 microbatches (1f1b), " in message
        assert job in message
    with pytest.raises(kareus.InputError, match="interleaved"):
        kareus.PlanExecutor(DATA / "plan_2x8.json", stage=0, schedule="interleaved")
    del controller
    assert clock_calls(log, 0) == []


def test_permission_refusal_warns_once_and_measures_only(log, fake, capfd):
    controller = kareus.FrequencyController(gpu=1, install_signal_handlers=False,
                                            coalesce=False)
    # After the controller opened NVML: the fake reads its environment at nvmlInit.
    fake.fake_nvml_set_return(b"set", 4)  # NVML_ERROR_NO_PERMISSION
    executor = kareus.PlanExecutor(DATA / "plan_2x8.json", stage=1, controller=controller)
    for _ in range(2):
        run_step(executor, 1)
        controller.wait_idle()
    assert controller.measure_only
    assert controller.stats["set_calls"] == 1
    del executor, controller
    err = capfd.readouterr().err
    assert err.count("measure-only") == 1
    calls = clock_calls(log, 1)
    assert len(calls) == 1 and calls[0].endswith("-> 4")


def test_energy_windows_return_the_counter_difference(log, fake):
    monitor = kareus.EnergyMonitor(gpu_indices=[0, 1])
    fake.fake_nvml_set_energy_mj(0, 10_000)
    fake.fake_nvml_set_energy_mj(1, 20_000)
    monitor.begin_window("step")
    fake.fake_nvml_set_energy_mj(0, 12_500)
    fake.fake_nvml_set_energy_mj(1, 20_750)
    measurement = monitor.end_window("step")
    assert measurement.gpu_energy == {0: 2.5, 1: 0.75}
    assert measurement.total_energy == pytest.approx(3.25)
    assert measurement.time >= 0.0
    assert not measurement.power_integrated
    with pytest.raises(kareus.InputError):
        monitor.end_window("step")


def test_sigterm_resets_clocks_then_terminates(log):
    child = textwrap.dedent(f"""
        import sys, time
        import kareus
        controller = kareus.FrequencyController(gpu=0)
        executor = kareus.PlanExecutor({str(DATA / "plan_2x8.json")!r}, stage=0,
                                       controller=controller)
        order = {one_f_one_b(0)!r}
        first = True
        while True:
            executor.on_step_begin()
            for kind in order:
                executor.on_instruction_begin(kind)
                time.sleep(0.0002)
                executor.on_instruction_end(kind)
            executor.on_step_end()
            if first:
                controller.wait_idle()
                print("ready", flush=True)
                first = False
    """)
    process = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE,
                               env=dict(os.environ))
    assert process.stdout.readline().strip() == b"ready"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == -signal.SIGTERM
    calls = clock_calls(log, 0)
    assert calls[-1] == "reset"
    assert calls.count("reset") == 1


def wait_for_calls(log, gpu, expected, timeout_s=30.0):
    """The watcher resets after the process is gone, in its own time: wait (bounded) for it."""
    deadline = time.monotonic() + timeout_s
    while clock_calls(log, gpu) != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return clock_calls(log, gpu)


def test_sigkill_is_reset_by_the_clock_watcher(log):
    child = textwrap.dedent("""
        import os, signal
        import kareus
        controller = kareus.FrequencyController(gpu=1)
        controller.request_clock(1410)
        controller.wait_idle()
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    process = subprocess.run([sys.executable, "-c", child], env=dict(os.environ), timeout=60)
    assert process.returncode == -signal.SIGKILL
    assert wait_for_calls(log, 1, ["set 1410", "reset"]) == ["set 1410", "reset"]


def test_forked_child_disarms(log):
    controller = kareus.FrequencyController(gpu=0, install_signal_handlers=False)
    controller.request_clock(1410)
    controller.wait_idle()
    pid = os.fork()
    if pid == 0:  # a DataLoader worker, say: it must not touch the parent's GPU
        try:
            controller.request_clock(1200)
            controller.wait_idle()
            del controller
        finally:
            os.kill(os.getpid(), signal.SIGTERM)
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
    assert clock_calls(log, 0) == ["set 1410"]
    controller.request_clock(1200)
    controller.wait_idle()
    assert controller.stats["applied_mhz"] == 1200
    del controller
    assert clock_calls(log, 0) == ["set 1410", "set 1200", "reset"]


def test_deeply_nested_plan_is_an_input_error(log, tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000)
    controller = kareus.FrequencyController(gpu=0, install_signal_handlers=False)
    with pytest.raises(kareus.InputError, match="nested deeper"):
        kareus.PlanExecutor(deep, stage=0, controller=controller)
    executor = kareus.PlanExecutor(DATA / "plan_2x8.json", stage=0, controller=controller)
    executor.on_instruction_begin("forward")
    controller.wait_idle()
    with pytest.raises(kareus.InputError, match="nested deeper"):
        executor.swap_plan(deep)
    assert controller.stats["applied_mhz"] > 0
    del executor, controller
    assert clock_calls(log, 0)[-1] == "reset"


def test_nvml_index_for_cuda_device(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert kareus.nvml_index_for_cuda_device(1) == 1
    assert kareus.nvml_index_for_cuda_device(0) == 3
    with pytest.raises(kareus.EnvironmentError):
        kareus.nvml_index_for_cuda_device(2)


def test_interleaved_hooks_with_chunks_and_the_gradient_sync(log):
    """Interleaved 1F1B (2 stages x 4 microbatches x 2 chunks) with a data-parallel gradient
    sync: the hooks take Megatron's model_chunk_id, a launching backward serves its sync knobs,
    on_gradient_sync_begin locks the stage's tail clock, and a wrong chunk is refused."""
    import json
    path = DATA / "plan_interleaved_2x4x2.json"
    planned = json.loads(path.read_text())
    stage = planned["stages"][0]
    controller = kareus.FrequencyController(gpu=0, install_signal_handlers=False, coalesce=False)
    executor = kareus.PlanExecutor(path, stage=0, controller=controller,
                                   schedule="interleaved-1f1b")
    assert executor.schedule == "interleaved-1f1b"
    assert executor.stage_gradient_sync["freq_mhz"] == stage["gradient_sync"]["freq_mhz"]
    assert executor.stage_gradient_sync["sms"] == stage["gradient_sync"]["sms"]
    for instruction in stage["instructions"]:
        executor.on_instruction_begin(instruction["kind"], instruction["chunk"])
        assert executor.current["chunk"] == instruction["chunk"]
        if "gradient_sync" in instruction:
            assert executor.gradient_sync == instruction["gradient_sync"]
        else:
            assert executor.gradient_sync is None
        executor.on_instruction_end(instruction["kind"], instruction["chunk"])
    executor.on_gradient_sync_begin()
    executor.on_gradient_sync_end()
    executor.on_step_end()
    controller.wait_idle()
    del executor, controller
    expected, last = [], 0
    for freq in [i["freq_mhz"] for i in stage["instructions"]] + [stage["gradient_sync"]["freq_mhz"]]:
        if freq != last:
            expected.append(f"set {freq}")
        last = freq
    assert clock_calls(log, 0) == expected + ["reset"]

    executor = kareus.PlanExecutor(path, stage=0)
    with pytest.raises(kareus.InputError, match="chunk"):
        executor.on_instruction_begin("forward", 1)  # the plan's first forward is chunk 0


def test_power_budget_and_timetable_from_python(log, tmp_path):
    """swap_to_power_budget picks by power per GPU; follow_timetable takes the job's clock and
    sleeps through a pause by the callable it is given."""
    import json
    import shutil
    (tmp_path / "plans").mkdir()
    for name in ("fast", "slow"):
        shutil.copy(DATA / "plan_2x8.json", tmp_path / "plans" / f"{name}.json")
    frontier = {"format": "kareus.frontier/1", "method": "kareus", "workload": {}, "points": [
        {"time_s": 1.0, "energy_j": 600.0, "static_energy_j": 0, "plan_index": 0,
         "plan_path": "plans/fast.json"},
        {"time_s": 2.0, "energy_j": 700.0, "static_energy_j": 0, "plan_index": 1,
         "plan_path": "plans/slow.json"}]}
    (tmp_path / "frontier.json").write_text(json.dumps(frontier))
    executor = kareus.PlanExecutor(DATA / "plan_2x8.json", stage=0)
    choice = executor.swap_to_power_budget(tmp_path, 200.0)  # 2 GPUs: 300 and 175 W each
    assert choice["plan_path"].endswith("slow.json") and choice["fits"]
    assert choice["power_w_per_gpu"] == 175.0
    assert not executor.swap_to_power_budget(tmp_path, 100.0)["fits"]
    with pytest.raises(kareus.InputError, match="power_budget_w"):
        executor.swap_to_power_budget(tmp_path, 0.0)

    plans = [{"plan": "plans/fast.json", "time_s": 1.0, "energy_j": 600.0, "power_w": 600.0},
             {"plan": "plans/slow.json", "time_s": 2.0, "energy_j": 700.0, "power_w": 350.0}]

    def interval(k, plan, seconds, pause):
        return {"start": f"2027-01-15T08:0{k}:00Z", "end": f"2027-01-15T08:0{k + 1}:00Z",
                "signal": 1.0, "power_cap_w": None, "pause_s": pause,
                "entries": [{"plan": plan["plan"], "seconds": seconds,
                             "iterations": seconds / plan["time_s"], "energy_j": 0.0,
                             "cost": 0.0}], "energy_j": 0.0, "cost": 0.0}
    timetable = {"format": "kareus-timetable", "version": 1, "iterations": 90, "gpus": 2,
                 "idle_power_w": 100.0, "allow_pause": True, "plans": plans,
                 "intervals": [interval(0, plans[0], 60.0, 0.0), interval(1, plans[1], 20.0, 40.0),
                               interval(2, plans[0], 60.0, 0.0)],
                 "total_cost": 0.0, "total_energy_j": 0.0, "total_iterations": 130,
                 "finish": "2027-01-15T08:03:00Z"}
    (tmp_path / "timetable.json").write_text(json.dumps(timetable))
    t0 = 1800000000.0  # 2027-01-15T08:00:00Z
    now = [t0]
    slept = []

    def sleep_until(until):
        slept.append(until - t0)
        now[0] = until

    executor.follow_timetable(tmp_path / "timetable.json", now=lambda: now[0],
                              sleep_until=sleep_until)
    ran = []
    for _ in range(70):
        run_step(executor, 0)
        step = executor.timetable_step
        assert not step["behind"], step
        ran.append(pathlib.Path(step["plan"]).name)
        now[0] += 1.0 if ran[-1] == "fast.json" else 2.0
    assert ran[:60] == ["fast.json"] * 60
    assert ran[60:70] == ["slow.json"] * 10
    run_step(executor, 0)  # at 08:01:20: paused to 08:02, then the fast plan again
    assert slept == [120.0]
    assert pathlib.Path(executor.timetable_step["plan"]).name == "fast.json"
    assert executor.timetable_swaps == 3
