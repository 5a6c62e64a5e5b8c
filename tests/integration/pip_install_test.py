#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`pip install --no-build-isolation .` into a fresh virtualenv, then use it as a user would.

usage: pip_install_test.py SOURCE_DIR BUILD_DIR FAKE_NVML

A fresh venv (pip and setuptools only, no wheel package, no network: --no-index) installs the
checkout through its own build backend. The backend reuses BUILD_DIR (the suite's build, for
this interpreter) so CI compiles once; without KAREUS_WHEEL_BUILD_DIR it configures
build-wheel/ itself. Then, from outside the checkout with no PYTHONPATH or KAREUS_DATA_DIR:
kareus imports from the venv; optimize() plans a dict workload; Frontier.load().pick() picks a
plan within a deadline; the plan runs one 1F1B step through PlanExecutor against the fake NVML
(the packaged clock watcher found beside the module); the `kareus` command on the venv's PATH
runs; and both read the presets packaged in kareus/data (a preset added there is listed).
Exit 0 on success, 1 with a reason.
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

CHECK = r'''
import json, os, pathlib, sys
import kareus
site = pathlib.Path(kareus.__file__).parent
assert str(site).startswith(sys.prefix), f"kareus imported from {site}, not the venv {sys.prefix}"
workload = {"name": "pip-small",
            "model": {"name": "small", "hidden": 2048, "heads": 16, "kv_groups": 8,
                      "head_dim": 128, "ffn": 8192, "layers": 4, "vocab": 32000},
            "gpu": "A100-SXM4-40GB", "parallelism": {"tp": 4, "pp": 2},
            "microbatch_size": 4, "sequence_length": 2048, "microbatches": 4,
            "recompute": "full"}
out = pathlib.Path(sys.argv[1])
summary = kareus.optimize(workload, out=out, methods=["perseus", "kareus"])
assert summary["workload"]["name"] == "pip-small"
frontier = kareus.Frontier.load(out)
times = sorted(p["time_s"] for p in frontier)
deadline = (times[0] + times[-1]) / 2
picked = frontier.pick(deadline_s=deadline)
assert picked["meets"] and picked["time_s"] <= deadline, picked
within = [p for p in frontier if p["time_s"] <= deadline]
assert picked["energy_j"] == min(p["energy_j"] for p in within), picked
plan = kareus.load_plan(picked["plan_path"])
stages = len(plan["stages"])
for stage in range(stages):
    controller = kareus.FrequencyController(gpu=stage)
    executor = kareus.PlanExecutor(picked["plan_path"], stage=stage, controller=controller)
    executor.on_step_begin()
    for instruction in plan["stages"][stage]["instructions"]:
        executor.on_instruction_begin(instruction["kind"])
        executor.on_instruction_end(instruction["kind"])
    executor.on_step_end()
    controller.wait_idle()
    assert controller.stats["set_calls"] >= 1, controller.stats
    controller.reset_clocks()
print(json.dumps({"site": str(site), "picked": picked["plan_path"], "stages": stages}))
'''


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    source, build, fake = (pathlib.Path(a).resolve() for a in sys.argv[1:])
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="kareus-pip-") as work:
        work = pathlib.Path(work)
        venv = work / "venv"
        made = subprocess.run([python, "-m", "venv", str(venv)], capture_output=True, text=True)
        if made.returncode != 0:  # scripts/setup.sh installs python3-venv
            print("python3 -m venv failed (python3-venv missing? run scripts/setup.sh):",
                  made.stderr[-500:])
            return 1
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "KAREUS_DATA_DIR", "KAREUS_CLOCK_WATCHER",
                            "PIP_FIND_LINKS", "PIP_INDEX_URL")}
        env["KAREUS_WHEEL_BUILD_DIR"] = str(build)
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                              "--no-build-isolation", "--no-index", str(source)],
                             env=env, capture_output=True, text=True, timeout=1800)
        if pip.returncode != 0:
            print("pip install failed:", pip.stdout[-3000:], pip.stderr[-3000:], sep="\n")
            return 1
        del env["KAREUS_WHEEL_BUILD_DIR"]
        env["KAREUS_NVML_LIBRARY"] = str(fake)
        env["FAKE_NVML_LOG"] = str(work / "nvml.log")
        check = subprocess.run([str(venv / "bin" / "python"), "-c", CHECK, str(work / "out")],
                               env=env, cwd=work, capture_output=True, text=True, timeout=600)
        if check.returncode != 0:
            print("using the installed package failed:", check.stdout[-3000:],
                  check.stderr[-3000:], sep="\n")
            return 1
        result = json.loads(check.stdout.strip().splitlines()[-1])
        print("installed and used:", result)
        log = (work / "nvml.log").read_text() if (work / "nvml.log").exists() else ""
        if "set" not in log or "reset" not in log:
            print("the fake NVML saw no clock set and reset:", log[-1000:])
            return 1
        # The `kareus` command, and the presets it and the module read: the package's own.
        site = pathlib.Path(result["site"])
        command = venv / "bin" / "kareus"
        version = subprocess.run([str(command), "--version"], env=env, capture_output=True,
                                 text=True)
        if version.returncode != 0 or "kareus" not in version.stdout:
            print("kareus --version from the venv failed:", version.stdout, version.stderr)
            return 1
        preset = (site / "data" / "gpus" / "A100-SXM4-40GB.yaml").read_text()
        (site / "data" / "gpus" / "packaged-check.yaml").write_text(
            preset.replace("name: A100-SXM4-40GB", "name: packaged-check", 1))
        gpus = subprocess.run([str(command), "gpus"], env=env, capture_output=True, text=True)
        if gpus.returncode != 0 or "packaged-check" not in gpus.stdout:
            print("kareus gpus does not read the packaged presets:", gpus.stdout[-1500:],
                  gpus.stderr[-1500:])
            return 1
        listed = subprocess.run([str(venv / "bin" / "python"), "-c",
                                 "import kareus; print(kareus.partitions({'name': 'p', 'model': "
                                 "'llama3.2-3b', 'gpu': 'packaged-check', 'parallelism': "
                                 "{'tp': 2}, 'microbatch_size': 2, 'sequence_length': 1024, "
                                 "'microbatches': 1})['workload'])"],
                                env=env, cwd=work, capture_output=True, text=True)
        if listed.returncode != 0:
            print("the module does not read the packaged presets:", listed.stderr[-1500:])
            return 1
        print(f"{version.stdout.strip()}; the presets in {site / 'data'} are the ones read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
