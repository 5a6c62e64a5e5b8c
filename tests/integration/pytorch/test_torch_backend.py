# SPDX-License-Identifier: Apache-2.0
"""`kareus profile|run --backend torch` end to end on a CPU (the fake NVML as the energy source):
the profile is stored and a rerun resumes it; `kareus run` completes and names the backend; a
worker killed mid-profile ends kareus with an error naming the request and a rerun resumes from
what was stored; kareus killed mid-profile leaves no worker or rank behind and a rerun resumes;
under `mpirun -np 2` the store holds the same configurations as one process."""
import json
import os
import pathlib
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
pytest.importorskip("kareus._kareus", reason="the kareus Python module was not built")

KAREUS = os.environ.get("KAREUS_BIN")
if not KAREUS or not os.environ.get("KAREUS_NVML_LIBRARY"):
    pytest.skip("KAREUS_BIN and KAREUS_NVML_LIBRARY must be set; CTest sets them",
                allow_module_level=True)

WORKLOAD = pathlib.Path(__file__).resolve().parents[3] / "examples" / "pytorch" / "workload.yaml"
ENV = dict(os.environ, FAKE_NVML_DEVICES="8", FAKE_NVML_ENERGY_RETURN="3")
TIMEOUT_S = 600
FAST = ("--window", "0.05")  # short measurements: these tests check the path, not the values


def kareus(*args, cwd, check=True):
    run = subprocess.run([KAREUS, *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                         timeout=TIMEOUT_S)
    if check:
        assert run.returncode == 0, run.stderr
    return run


def rows(store):
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        return sorted(db.execute("SELECT partition, freq_mhz, sms, slot FROM measurements"))


def stored(store):
    """How many measurements `store` holds, 0 while it is being created."""
    try:
        return len(rows(store))
    except sqlite3.OperationalError:  # the file exists, its schema not yet
        return 0


def workers_of(pid):
    """The torch workers (and their ranks) started by process `pid`, from /proc."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == pid and "kareus.torch.measure" in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return "Z" not in pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False


def wait_for(condition, timeout_s=240, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_profile_is_stored_and_resumed_and_run_names_the_backend(tmp_path):
    first = json.loads(kareus("profile", str(WORKLOAD), "--backend", "torch", "--store", "s.sqlite",
                              "--quiet", "--json", *FAST, cwd=tmp_path).stdout)
    assert first["backend"].startswith("torch(PyTorch")
    assert "not a GPU result" in first["backend"]
    assert first["measurements_taken"] > 0 and first["measurements_reused"] == 0
    stored = rows(tmp_path / "s.sqlite")
    assert len(stored) == first["measurements_taken"]
    again = json.loads(kareus("profile", str(WORKLOAD), "--backend", "torch", "--store", "s.sqlite",
                              "--quiet", "--json", *FAST, cwd=tmp_path).stdout)
    assert again["measurements_taken"] == 0
    assert again["measurements_reused"] == first["measurements_taken"]
    # The whole job on the same backend (its partitions come from the store).
    kareus("run", str(WORKLOAD), "--backend", "torch", "--out", "out", "--store", "s.sqlite",
           "--quiet", *FAST, cwd=tmp_path)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["backend"].startswith("torch(") and "not a GPU result" in summary["backend"]
    assert summary["caveat"].startswith("CPU results:"), summary["caveat"]
    assert summary["evaluated"] and summary["evaluator"].startswith("measured runs on torch(")
    assert (tmp_path / "out" / "plan.json").exists()


def killed_mid_profile(tmp_path, victim):
    """Starts a full-grid profile of one type, kills `victim` ("worker" or "kareus") once some
    measurements are stored, and returns (process, rows stored before the kill)."""
    store = tmp_path / "s.sqlite"
    process = subprocess.Popen([KAREUS, "profile", str(WORKLOAD), "--backend", "torch", "--store",
                                str(store), "--partition", "fwd_mlp", "--budget-fraction", "1",
                                "--quiet", *FAST],
                               cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    wait_for(lambda: store.exists() and stored(store) >= 3 or process.poll() is not None,
             what="three stored measurements")
    assert process.poll() is None, process.communicate()
    workers = workers_of(process.pid)
    assert len(workers) == 1, workers
    os.kill(workers[0] if victim == "worker" else process.pid, signal.SIGKILL)
    return process, workers[0], stored(store)


def test_a_killed_worker_is_named_and_the_rerun_resumes(tmp_path):
    process, worker, stored = killed_mid_profile(tmp_path, "worker")
    _, err = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 2, err
    assert f"torch backend worker (pid {worker}), request" in err
    assert "(partition fwd_mlp," in err and "was killed by signal 9" in err
    assert len(rows(tmp_path / "s.sqlite")) >= stored  # nothing measured was lost
    resumed = json.loads(kareus("profile", str(WORKLOAD), "--backend", "torch", "--store",
                                "s.sqlite", "--partition", "fwd_mlp", "--budget-fraction", "1", "--quiet",
                                "--json", *FAST, cwd=tmp_path).stdout)
    assert resumed["measurements_reused"] >= stored
    assert resumed["measurements_reused"] + resumed["measurements_taken"] == 30  # 10 SMs x 3 slots


def test_a_killed_kareus_leaves_nothing_behind_and_the_rerun_resumes(tmp_path):
    process, worker, stored = killed_mid_profile(tmp_path, "kareus")
    process.communicate(timeout=60)
    # The worker sees its input close (or its output break) and ends with its ranks.
    wait_for(lambda: not alive(worker), timeout_s=60, what="the worker to end")
    assert not workers_of(worker)
    resumed = json.loads(kareus("profile", str(WORKLOAD), "--backend", "torch", "--store",
                                "s.sqlite", "--partition", "fwd_mlp", "--budget-fraction", "1", "--quiet",
                                "--json", *FAST, cwd=tmp_path).stdout)
    assert resumed["measurements_reused"] >= stored
    assert resumed["measurements_reused"] + resumed["measurements_taken"] == 30


def test_without_an_energy_source_the_backend_says_so(tmp_path):
    env = dict(ENV, KAREUS_NVML_LIBRARY=str(tmp_path / "no-such-nvml.so"))
    run = subprocess.run([KAREUS, "profile", str(WORKLOAD), "--backend", "torch", "--quiet"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert run.returncode == 2
    assert "the torch backend cannot measure workload kareus-tiny-lm" in run.stderr
    assert "NVML" in run.stderr


MPIRUN = shutil.which("mpirun")


@pytest.mark.skipif(MPIRUN is None, reason="no mpirun (Open MPI)")
def test_mpirun_gives_the_same_store_as_one_process(tmp_path):
    args = ["profile", str(WORKLOAD), "--backend", "torch", "--partition", "fwd_mlp",
            "--budget-fraction", "1", "--quiet", "--window", "0.05"]
    kareus(*args, "--store", "one.sqlite", cwd=tmp_path)
    exported = [part for name in ("KAREUS_NVML_LIBRARY", "FAKE_NVML_DEVICES",
                                  "FAKE_NVML_ENERGY_RETURN", "PYTHONPATH", "KAREUS_DATA_DIR")
                if name in ENV for part in ("-x", name)]
    run = subprocess.run([MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", "2", *exported,
                          KAREUS, *args, "--store", "two.sqlite"], cwd=tmp_path, env=ENV,
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    assert run.returncode == 0, run.stderr
    assert rows(tmp_path / "two.sqlite") == rows(tmp_path / "one.sqlite")
    assert len(rows(tmp_path / "one.sqlite")) == 30
