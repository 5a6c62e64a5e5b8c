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
