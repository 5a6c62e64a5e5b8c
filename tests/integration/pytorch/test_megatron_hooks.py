# SPDX-License-Identifier: Apache-2.0
"""examples/megatron: the kareus_hooks.py module that kareus-megatron.patch adds to Megatron-LM,
taken from the patch itself and run against the fake NVML with Megatron's parallel_state and
microbatch calculator stubbed (Megatron needs PyTorch 2 and CUDA; Debian has PyTorch 1.13).

It checks what the patch's schedule and training hooks call: build_executor for each stage of
a 2-stage plan, executor_of (None in no-grad passes), instruction_begin (synchronizes, then the
executor's hook), that a plan for another pipeline is refused at build time, and that a plan
with nanobatched instructions (made for Kareus's execution, which stock Megatron-LM does not
have) is refused in the words of `kareus export --format zeus` unless KAREUS_CLOCKS_ONLY=1.
"""
import ctypes
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import types

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch, "
                            "which scripts/setup.sh installs)")
kareus = pytest.importorskip("kareus", reason="the kareus Python module was not built")
if not os.environ.get("KAREUS_NVML_LIBRARY"):
    pytest.skip("KAREUS_NVML_LIBRARY (the fake NVML) is not set", allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parents[3]
PATCH = ROOT / "examples" / "megatron" / "kareus-megatron.patch"
NANOBATCHED_PLAN = ROOT / "tests" / "runtime" / "data" / "plan_2x8.json"  # 2 stages x 8 microbatches
STAGES, MICROBATCHES = 2, 8


@pytest.fixture()
def sequential_plan(tmp_path):
    """plan_2x8.json with every instruction sequential: a plan stock Megatron-LM can run (the
    shape of a Perseus plan)."""
    plan = json.loads(NANOBATCHED_PLAN.read_text())
    for stage in plan["stages"]:
        for instruction in stage["instructions"]:
            instruction["mode"] = "sequential"
            instruction["partitions"] = []
    path = tmp_path / "sequential.json"
    path.write_text(json.dumps(plan))
    return path


def new_file_from_patch(path):
    """The added file `path` of the patch, as text."""
    lines, inside = [], False
    for line in PATCH.read_text().splitlines():
        if line.startswith("diff --git"):
            inside = line.endswith(f" b/{path}")
        elif inside and line.startswith("+") and not line.startswith("+++"):
            lines.append(line[1:])
    assert lines, f"{path} is not added by {PATCH.name}"
    return "\n".join(lines) + "\n"


def one_f_one_b(stage):
    """Megatron's non-interleaved 1F1B order, as kareus.torch's pipeline runs it."""
    from kareus.torch.pipeline import one_f_one_b as order
    return [kind for kind, _ in order(STAGES, stage, MICROBATCHES)]


@pytest.fixture()
def megatron(monkeypatch, tmp_path):
    """Stub megatron.core.{parallel_state, num_microbatches_calculator}; load kareus_hooks."""
    state = types.SimpleNamespace(rank=0, world=STAGES, vpp=None, microbatches=MICROBATCHES,
                                  synchronized=0)
    parallel_state = types.ModuleType("megatron.core.parallel_state")
    parallel_state.get_pipeline_model_parallel_rank = lambda: state.rank
    parallel_state.get_pipeline_model_parallel_world_size = lambda: state.world
    parallel_state.get_virtual_pipeline_model_parallel_world_size = lambda: state.vpp
    calculator = types.ModuleType("megatron.core.num_microbatches_calculator")
    calculator.get_num_microbatches = lambda: state.microbatches
    core = types.ModuleType("megatron.core")
    core.parallel_state = parallel_state
    package = types.ModuleType("megatron")
    package.core = core
    for name, module in [("megatron", package), ("megatron.core", core),
                         ("megatron.core.parallel_state", parallel_state),
                         ("megatron.core.num_microbatches_calculator", calculator)]:
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: state.rank)

    def synchronize():
        state.synchronized += 1

    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setenv("FAKE_NVML_LOG", str(tmp_path / "nvml.log"))
    hooks = types.ModuleType("megatron.core.kareus_hooks")
    exec(compile(new_file_from_patch("megatron/core/kareus_hooks.py"), "kareus_hooks.py",
                 "exec"), hooks.__dict__)
    state.hooks, state.log = hooks, tmp_path / "nvml.log"
    return state


def test_the_patched_hooks_drive_a_1f1b_step_per_stage(megatron, sequential_plan):
    hooks = megatron.hooks
    fake = ctypes.CDLL(os.environ["KAREUS_NVML_LIBRARY"])  # the copy the runtime loaded
    fake.fake_nvml_locked_mhz.restype = ctypes.c_uint
    for stage in range(STAGES):
        megatron.rank = stage
        config = types.SimpleNamespace(kareus_executor=hooks.build_executor(str(sequential_plan)))
        executor = hooks.executor_of(config)
        assert executor is config.kareus_executor and executor.stage == stage
        with torch.no_grad():  # evaluation: no hooks
            assert hooks.executor_of(config) is None
        planned = json.loads(sequential_plan.read_text())["stages"][stage]["instructions"]
        synchronized = megatron.synchronized
        executor.on_step_begin()
        for index, kind in enumerate(one_f_one_b(stage)):
            hooks.instruction_begin(hooks.executor_of(config), kind)
            assert executor.current["kind"] == kind == planned[index]["kind"]
            assert executor.current["freq_mhz"] == planned[index]["freq_mhz"]
            executor.on_instruction_end(kind)
        executor.on_step_end()
        assert megatron.synchronized - synchronized == 2 * MICROBATCHES
        assert executor.step == 1
        # The setter thread applies the newest clock (asynchronously); then the controller,
        # released with the executor, resets it.
        deadline = time.monotonic() + 30
        while fake.fake_nvml_locked_mhz(stage) != planned[-1]["freq_mhz"]:
            assert time.monotonic() < deadline, "the last planned clock was never applied"
            time.sleep(0.01)
        del executor, config
        assert fake.fake_nvml_locked_mhz(stage) == 0
        calls = [line.split()[0] for line in megatron.log.read_text().splitlines()
                 if line.split()[0] in ("set", "reset") and int(line.split()[1]) == stage]
        assert calls and calls[0] == "set" and calls[-1] == "reset"


@pytest.mark.parametrize("world,microbatches,job", [
    (4, MICROBATCHES, "the job runs 4 pipeline stages x 8 microbatches (1f1b)"),
    (STAGES, 16, "the job runs 2 pipeline stages x 16 microbatches (1f1b)")])
def test_build_executor_refuses_a_plan_for_another_pipeline(megatron, sequential_plan, world, microbatches, job):
    megatron.world, megatron.microbatches = world, microbatches
    with pytest.raises(kareus.InputError, match=re.escape(
            "the plan is for 2 pipeline stages x 8 microbatches (1f1b), " + job)):
        megatron.hooks.build_executor(str(sequential_plan))
    assert not megatron.log.exists() or "set" not in megatron.log.read_text()


def test_build_executor_refuses_virtual_stages(megatron, sequential_plan):
    megatron.vpp = 2
    with pytest.raises(ValueError, match="non-interleaved 1F1B"):
        megatron.hooks.build_executor(str(sequential_plan))


def test_build_executor_refuses_a_nanobatched_plan_unless_clocks_only(megatron, monkeypatch, tmp_path):
    with pytest.raises(kareus.InputError) as refused:
        megatron.hooks.build_executor(str(NANOBATCHED_PLAN))
    message = str(refused.value)
    assert "16 of the 32 instructions" in message and "run nanobatched" in message
    assert "kareus.torch" in message and "KAREUS_CLOCKS_ONLY=1" in message
    assert not megatron.log.exists() or "set" not in megatron.log.read_text()
    # The same words as `kareus export --format zeus`.
    cli = os.environ.get("KAREUS_BIN")
    if cli:
        export = subprocess.run([cli, "export", str(NANOBATCHED_PLAN), "--format", "zeus",
                                 "--out", str(tmp_path / "zeus")], capture_output=True, text=True)
        assert export.returncode == 2
        assert message in export.stderr
    monkeypatch.setenv("KAREUS_CLOCKS_ONLY", "1")
    executor = megatron.hooks.build_executor(str(NANOBATCHED_PLAN))
    assert executor.num_microbatches == MICROBATCHES
