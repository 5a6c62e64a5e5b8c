# SPDX-License-Identifier: Apache-2.0
"""kareus.torch numerics (fp32, CPU, gloo): sequential execution of the sharded model equals the
unsharded single-process reference, and nanobatched execution under many configurations equals
sequential execution, in the loss and every parameter's gradient.

Configurations: every launch slot of every partition type (the slot of each type rotates with
the microbatch, so the four microbatches cover every slot), communicators with several SM counts
and the library default, both modes mixed per instruction (a microbatch's forward and backward
in different modes: the backward then joins or slices the forward's saved pieces), with and
without full recomputation, hidden dropout (the same mask either way), for TP 2 and CP 2 x TP 2.
"""
import pathlib
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
kareus = pytest.importorskip("kareus._kareus", reason="the kareus Python module was not built")

import kareus.torch as kt  # noqa: E402
from kareus.torch import reference  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import distributed  # noqa: E402

TOLERANCE = 1e-5  # relative, on the loss and on each gradient tensor (norm of the difference)
SMS = {"tp": [3, 6], "cp": [1, 4]}


def workload(tp, cp, recompute, qk_norm=False, tied=False, pp=1, dp=1):
    return {"name": "numerics",
            "model": {"name": "tiny", "hidden": 64, "heads": 4, "kv_groups": 2, "head_dim": 16,
                      "ffn": 96, "layers": 2, "vocab": 200, "qk_norm": qk_norm,
                      "tied_embeddings": tied},
            "gpu": "H100-SXM", "parallelism": {"tp": tp, "cp": cp, "pp": pp, "dp": dp},
            "microbatch_size": 4, "sequence_length": 16, "microbatches": 4,
            "recompute": recompute}


def relative(a, b):
    return float((a - b).norm() / max(float(b.norm()), 1e-30))


def configurations(program):
    """name -> (kind, microbatch) -> InstructionConfig."""
    types = program.types

    def nanobatched(sms_of, rotation=0):
        def config(kind, microbatch):
            choices = {}
            for k, (name, info) in enumerate(sorted(types.items())):
                slots = info.launch_slots
                kind_of_group = "tp" if info.collective == "all_reduce" else "cp"
                choices[name] = kt.CommChoice(sms=sms_of(kind_of_group, microbatch + k),
                                              slot=slots[(microbatch + rotation) % len(slots)])
            return kt.InstructionConfig("nanobatched", choices)
        return config

    def mixed(kind, microbatch):
        # forward and backward of a microbatch in different modes, alternating.
        if (microbatch + (kind == "backward")) % 2:
            return kt.SEQUENTIAL
        return nanobatched(lambda g, i: SMS[g][i % 2])(kind, microbatch)

    return {
        "every slot, 2 SM counts": nanobatched(lambda g, i: SMS[g][i % 2]),
        "every slot, shifted": nanobatched(lambda g, i: SMS[g][(i + 1) % 2], rotation=1),
        "library default": nanobatched(lambda g, i: None),
        "mixed per instruction": mixed,
    }


def compare(rank, cases):
    """Runs each case's sequential and nanobatched steps on this rank; returns the worst
    relative differences per case and configuration."""
    out = {}
    for label, (wl, overrides) in cases.items():
        program = kt.Program.of_workload(wl)
        shape = kt.ModelShape.from_workload(program.workload, **overrides)
        groups = kt.Groups(kt.ParallelLayout(tp=shape.tp, cp=shape.cp, dp=shape.dp, pp=shape.pp), SMS)
        full = kt.init_weights(shape, seed=3)
        g = torch.Generator().manual_seed(11)
        # Every data-parallel replica its own microbatches; the reference sees them all.
        size = (shape.microbatches * shape.dp, shape.microbatch_size, shape.sequence_length)
        tokens = torch.randint(0, shape.vocab, size, generator=g)
        targets = torch.randint(0, shape.vocab, size, generator=g)
        mine = slice(groups.dp_rank * shape.microbatches, (groups.dp_rank + 1) * shape.microbatches)

        def step(config):
            weights = kt.stage_weights(shape, groups.stage, groups.tp_rank, full=full)
            stage = kt.StageExecutor(program, shape, weights, groups)
            runner = kt.PipelineRunner(stage, configs=config)
            loss, applied = runner.train_step(tokens[mine], targets[mine], step=5)
            modes = sorted({a.mode for a in applied})
            return loss, {n: p.grad.clone() for n, p in weights.named_weights().items()}, modes

        seq_loss, seq, seq_modes = step(None)
        assert seq_modes == ["sequential"]
        result = {}
        if shape.hidden_dropout == 0:
            ref_loss, ref = reference.gradients(shape, full, tokens, targets)
            # (With DP each replica's loss is its own microbatches'; the gradients are averaged.)
            result["sequential vs reference"] = max(
                [relative(seq[n], kt.shard(n, ref[n], shape, groups.tp_rank)) for n in seq] +
                ([abs(seq_loss - float(ref_loss)) / float(ref_loss)] if shape.dp == 1 else []))
        for name, config in configurations(program).items():
            loss, grads, modes = step(config)
            assert "nanobatched" in modes, name
            result[name] = max([relative(grads[n], seq[n]) for n in seq] +
                               [abs(loss - seq_loss) / seq_loss])
        out[label] = result
    return out


def check(results):
    worst = {}
    for by_case in results:
        for label, values in by_case.items():
            for name, value in values.items():
                worst[(label, name)] = max(worst.get((label, name), 0.0), value)
    failures = {k: v for k, v in worst.items() if not v <= TOLERANCE}
    assert not failures, failures
    return worst


def test_tensor_parallel(tmp_path):
    cases = {
        "TP 2": (workload(2, 1, "none"), {}),
        "TP 2, full recompute": (workload(2, 1, "full"), {}),
        "TP 2, qk norm, tied embeddings": (workload(2, 1, "none", qk_norm=True, tied=True), {}),
        "TP 2, dropout 0.1, full recompute": (workload(2, 1, "full"), {"hidden_dropout": 0.1}),
    }
    worst = check(distributed.run(2, compare, cases, folder=tmp_path))
    assert len(worst) == 4 * 4 + 3  # every case and configuration was compared


def test_context_and_tensor_parallel(tmp_path):
    cases = {
        "CP 2 x TP 2": (workload(2, 2, "none"), {}),
        "CP 2 x TP 2, full recompute": (workload(2, 2, "full"), {}),
    }
    worst = check(distributed.run(4, compare, cases, folder=tmp_path))
    assert len(worst) == 2 * 5


def test_context_and_data_parallel_with_generic_partition_names(tmp_path):
    """CP 2 x DP 2 without TP: partition types without a published name, whose steady segment
    spans two layers (the block's first occurrences lack its leading kernels), and the DP x CP
    gradient reduction."""
    program = kareus.partitions(workload(1, 2, "none", dp=2), program=True)
    assert any("_p" in t["type"] for s in program["stages"] for i in s["instructions"]
               for t in i["partitions"])
    cases = {"CP 2 x DP 2": (workload(1, 2, "none", dp=2), {})}
    worst = check(distributed.run(4, compare, cases, folder=tmp_path))
    assert len(worst) == 5


def test_a_wrong_collective_input_is_caught(tmp_path, monkeypatch):
    """The comparison can fail: with the forward all-reduce after linear_fc2 applied to the
    wrong tensor in nanobatched execution only, the gradients differ."""
    def broken(rank):
        from kareus.torch import comm
        original = comm.COLLECTIVES[("tp_all_reduce", "linear_fc2")]

        def reduce_twice(c, pc, group, layer):
            if pc.index is not None:  # nanobatched only
                torch.distributed.all_reduce(pc.t["m"], group=group)
            return original(c, pc, group, layer)
        comm.COLLECTIVES[("tp_all_reduce", "linear_fc2")] = reduce_twice
        return compare(rank, {"TP 2": (workload(2, 1, "none"), {})})
    results = distributed.run(2, broken, folder=tmp_path)
    assert results[0]["TP 2"]["sequential vs reference"] <= TOLERANCE
    assert results[0]["TP 2"]["every slot, 2 SM counts"] > 1e-2


def pipelined(rank):
    """TP 2 x PP 2: the 1F1B and GPipe pipelines over send/recv, sequential, against the
    reference; 1F1B nanobatched against sequential; per-partition timing."""
    wl = workload(2, 1, "none", pp=2)
    wl["model"]["layers"] = 3  # stages of 2 and 1 layers
    program = kt.Program.of_workload(wl)
    shape = kt.ModelShape.from_workload(program.workload)
    groups = kt.Groups(kt.ParallelLayout(tp=2, pp=2), SMS)
    full = kt.init_weights(shape, seed=4)
    g = torch.Generator().manual_seed(12)
    size = (shape.microbatches, shape.microbatch_size, shape.sequence_length)
    tokens, targets = (torch.randint(0, shape.vocab, size, generator=g) for _ in range(2))
    ref_loss, ref = reference.gradients(shape, full, tokens, targets)

    def step(schedule, config, timing=False):
        weights = kt.stage_weights(shape, groups.stage, groups.tp_rank, full=full)
        stage = kt.StageExecutor(program, shape, weights, groups, timing=timing)
        runner = kt.PipelineRunner(stage, configs=config, schedule=schedule)
        loss, applied = runner.train_step(tokens, targets)
        return loss, {n: p.grad.clone() for n, p in weights.named_weights().items()}, applied

    out = {}
    for schedule in ("1f1b", "gpipe"):
        loss, grads, applied = step(schedule, None)
        assert [(a.kind, a.microbatch) for a in applied] == (
            kt.one_f_one_b(2, groups.stage, 4) if schedule == "1f1b" else kt.gpipe(4))
        out[schedule] = max([relative(grads[n], kt.shard(n, ref[n], shape, groups.tp_rank))
                             for n in grads] +
                            ([abs(loss - float(ref_loss)) / float(ref_loss)] if loss else []))
    sequential = step("1f1b", None)[1]
    config = configurations(program)["every slot, 2 SM counts"]
    _, grads, applied = step("1f1b", config, timing=True)
    out["1f1b nanobatched"] = max(relative(grads[n], sequential[n]) for n in grads)
    partitions = {kind: len(program.unit(groups.stage).instruction(kind).partitions)
                  for kind in ("forward", "backward")}
    out["timed"] = all(len(a.partition_times) == partitions[a.kind] and a.block_s > 0 and
                       all(t > 0 for _, _, t in a.partition_times) and
                       sum(t for _, _, t in a.partition_times) <= a.block_s * 1.01
                       for a in applied)
    return out


def test_pipeline_schedules_and_timing(tmp_path):
    for result in distributed.run(4, pipelined, folder=tmp_path):
        assert result.pop("timed")
        assert all(value <= TOLERANCE for value in result.values()), result
