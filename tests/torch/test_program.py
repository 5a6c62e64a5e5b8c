# SPDX-License-Identifier: Apache-2.0
"""kareus.torch in one process: the program read from the C++ partition builder, the
configuration of a plan's instruction (defaults, fixed trailing knobs, refusals naming both
sides), SM-count discovery, the saved-piece store, the rank layout, weight sharding and the
kernels' own identities."""
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
kareus = pytest.importorskip("kareus._kareus", reason="the kareus Python module was not built")

import kareus  # noqa: E402
import kareus.torch as kt  # noqa: E402
from kareus.torch import comm, errors, kernels  # noqa: E402
from kareus.torch.job import workload_differences  # noqa: E402
from kareus.torch.model import load_balanced_positions  # noqa: E402
from kareus.torch.program import Kernel  # noqa: E402


def workload(**changes):
    w = {"name": "unit", "model": {"name": "tiny", "hidden": 64, "heads": 4, "kv_groups": 2,
                                   "head_dim": 16, "ffn": 96, "layers": 4, "vocab": 200},
         "gpu": "H100-SXM", "parallelism": {"tp": 2, "cp": 1, "pp": 2},
         "microbatch_size": 4, "sequence_length": 16, "microbatches": 4, "recompute": "none"}
    w.update(changes)
    return w


@pytest.fixture(scope="module")
def program():
    return kt.Program.of_workload(workload())


def test_the_program_is_the_planners(program):
    document = kareus.partitions(workload(), program=True)
    assert program.num_stages == 2 and len(program.units) == 2
    assert set(program.types) == {t["type"] for s in document["stages"] for i in s["instructions"]
                                  for t in i["partitions"]}
    unit = program.unit(1)
    assert unit.first_layer == 2 and unit.layers == 2
    forward = unit.forward
    assert [k.name for k in forward.after_block] == ["final_layernorm", "output_layer", "loss",
                                                     "loss_all_reduce"]
    # Two nanobatches take turns; each collective follows the other nanobatch's last kernel.
    for i, p in enumerate(forward.partitions):
        assert p.nanobatch == i % 2
        if p.collective:
            before = forward.partitions[i - 1]
            assert p.collective.after == before.compute[-1].name
    assert program.unit(0).forward.before_block[0].name == "embedding"


def test_a_plan_instruction_resolves_every_type(program):
    assert program.config(None) is kt.SEQUENTIAL
    assert program.config({"kind": "forward", "microbatch": 0, "mode": "sequential"}).mode == "sequential"
    config = program.config({"kind": "forward", "microbatch": 1, "mode": "nanobatched",
                             "partitions": [{"type": "fwd_attn", "sms": 9, "slot": "rope_0"},
                                            {"type": "fwd_trail", "sms": 5, "slot": "norm_0"}]})
    assert config.choices["fwd_attn"] == kt.CommChoice(9, "rope_0")
    # A tuned type the plan leaves out: the library default at its first launch slot.
    assert config.choices["fwd_mlp"] == kt.CommChoice(None, program.types["fwd_mlp"].launch_slots[0])
    # A trailing type runs on its fixed knobs whatever the plan says (as the emulator does).
    assert config.choices["fwd_trail"] == kt.CommChoice(20, "norm_0")
    with pytest.raises(errors.PlanMismatch, match="'fwd_qkv_ag'.*its types: bwd_attn"):
        program.config({"kind": "forward", "microbatch": 0, "mode": "nanobatched",
                        "partitions": [{"type": "fwd_qkv_ag", "sms": 3, "slot": "norm_0"}]})
    single = kt.Program.of_workload(workload(microbatch_size=1))
    with pytest.raises(errors.PlanMismatch, match="cannot be nanobatched"):
        single.config({"kind": "backward", "microbatch": 2, "mode": "nanobatched"})


def plan(program, instructions_of):
    stages = []
    for s in range(2):
        order = kt.one_f_one_b(2, s, 4)
        stages.append({"stage": s, "gpus": 2, "instructions": [
            dict(kind=k, microbatch=m, freq_mhz=1980, time_s=0, energy_j=0, **instructions_of(k, m))
            for k, m in order]})
    return {"format": "kareus.plan/2", "method": "t", "workload": program.workload,
            "schedule": "1f1b", "num_microbatches": 4, "stages": stages}


def test_check_plan_names_the_slot_and_the_partitions_slots(program):
    good = plan(program, lambda k, m: {"mode": "nanobatched", "partitions": [
        {"type": "fwd_attn" if k == "forward" else "bwd_attn", "sms": 3 + m, "slot": "attn_0"}]})
    program.check_plan(good)
    assert kt.sm_counts([good], program) == {"tp": {3, 4, 5, 6, 20}, "cp": set(), "dp": set()}
    bad = plan(program, lambda k, m: {"mode": "nanobatched", "partitions": [
        {"type": "fwd_mlp" if k == "forward" else "bwd_mlp", "sms": 3, "slot": "rope_7"}]})
    with pytest.raises(errors.PlanMismatch, match="slot 'rope_7'.*fwd_mlp partitions do not have "
                       r"\(slots: norm_0, linear_0, activation_0, linear_1\)"):
        program.check_plan(bad)


def test_load_plan_applies_the_plan_check(program, tmp_path):
    """The executor reads plans through kareus.load_plan, which applies the plan check export
    and the runtime apply (issue 31): clocks the GPU has, the recorded stage list, known
    partitions."""
    import json
    good = plan(program, lambda k, m: {"mode": "nanobatched", "partitions": [
        {"type": "fwd_attn" if k == "forward" else "bwd_attn", "sms": 3 + m, "slot": "attn_0"}]})
    path = tmp_path / "plan.json"

    def load(document):
        path.write_text(json.dumps(document))
        return kareus.load_plan(path)

    assert load(good)["stages"][1]["gpus"] == 2
    for freq in (1, 5000, 2147483647):
        bad = json.loads(json.dumps(good))
        bad["stages"][1]["instructions"][3]["freq_mhz"] = freq
        with pytest.raises(kareus.InputError,
                           match=rf"stages\[1\]\.instructions\[3\]\.freq_mhz = {freq}: not a "
                                 "clock the H100"):
            load(bad)
    bad = json.loads(json.dumps(good))
    bad["workload"]["parallelism"]["pp"] = 4
    with pytest.raises(kareus.InputError, match=r"workload.parallelism.pp = 4: the plan lists 2"):
        load(bad)
    bad = json.loads(json.dumps(good))
    bad["stages"][0]["instructions"][0]["partitions"][0]["sms"] = 999
    with pytest.raises(kareus.InputError, match=r"partitions\[0\]\.sms = 999"):
        load(bad)


def test_workload_differences_name_both_sides(program):
    other = workload(microbatches=8)
    other["parallelism"] = {"tp": 2, "cp": 1, "pp": 4}
    theirs = kt.Program.of_workload(other).workload
    diff = workload_differences(theirs, program.workload)
    assert "parallelism.pp: plan 4, job 2" in diff
    assert "microbatches: plan 8, job 4" in diff
    assert "parallelism.layers_per_stage: plan [1, 1, 1, 1], job [2, 2]" in diff
    assert workload_differences(program.workload, program.workload) == []


def test_saved_rows_are_sliced_or_joined():
    saved = kernels.Saved()
    a, b = torch.arange(8.0).view(2, 4), torch.arange(8.0, 16.0).view(2, 4)
    saved.put(0, "k", slice(0, 2), (a,), extra="graph0")
    saved.put(0, "k", slice(2, 4), (b,))
    assert saved.get(0, "k", slice(0, 2))[0] is a
    assert torch.equal(saved.get(0, "k", slice(0, 4))[0], torch.cat([a, b]))  # joined
    assert torch.equal(saved.get(0, "k", slice(3, 4))[0], b[1:])  # sliced
    assert saved.extra(0, "k", slice(0, 2)) == "graph0" and saved.extra(0, "k", slice(0, 4)) is None
    with pytest.raises(RuntimeError, match="nothing saved for layer 1"):
        saved.get(1, "k", slice(0, 2))
    saved.put(2, "gap", slice(0, 1), (a[:1],))
    saved.put(2, "gap", slice(2, 4), (b,))
    with pytest.raises(RuntimeError, match="do not cover 0:4"):
        saved.get(2, "gap", slice(0, 4))


def test_the_rank_layout_is_megatrons():
    layout = kt.ParallelLayout(tp=2, cp=2, dp=2, pp=2)
    assert layout.coordinates(0) == {"tp": 0, "cp": 0, "dp": 0, "pp": 0}
    assert layout.coordinates(13) == {"tp": 1, "cp": 0, "dp": 1, "pp": 1}
    for r in range(layout.world_size):
        assert layout.rank(**layout.coordinates(r)) == r
    assert layout.groups("tp")[:2] == [[0, 1], [2, 3]]
    assert layout.groups("cp")[:2] == [[0, 2], [1, 3]]
    assert layout.groups("dp")[0] == [0, 2, 4, 6]  # DP x CP replicas of (stage 0, tp 0)
    assert layout.groups("pp")[0] == [0, 8]
    for kind in ("tp", "cp", "dp", "pp"):
        members = sorted(r for g in layout.groups(kind) for r in g)
        assert members == list(range(16)), kind  # every rank in exactly one group


def test_shards_reassemble_and_qkv_fuses_into_megatrons_layout():
    shape = kt.ModelShape.from_workload(kt.Program.of_workload(workload()).workload)
    full = kt.init_weights(shape, seed=2)
    for name, tensor in full.items():
        shards = [kt.shard(name, tensor, shape, r) for r in range(shape.tp)]
        assert torch.equal(kt.unshard(name, shards, shape), tensor), name
    h, g, d = 4, 2, 16
    wq, wk, wv = torch.randn(h * d, 64), torch.randn(g * d, 64), torch.randn(g * d, 64)
    fused = kt.fuse_qkv(wq, wk, wv, h, g, d).view(g, h // g + 2, d, 64)
    assert torch.equal(fused[1, 0], wq[2 * d:3 * d])  # group 1's first query head is head 2
    assert torch.equal(fused[1, 2], wk[d:])
    assert torch.equal(fused[0, 3], wv[:d])
    names = kt.stage_weight_names(shape, 1)
    assert names[0] == "decoder.layers.2.input_layernorm.weight" and names[-1] == "output_layer.weight"


def test_bound_weights_are_the_frameworks_own_parameters():
    shape = kt.ModelShape.from_workload(kt.Program.of_workload(workload()).workload)
    mine = kt.stage_weights(shape, 1, 0)
    theirs = {"module." + n: torch.nn.Parameter(p.detach().clone()) for n, p in mine.named_weights().items()}
    bound = kt.StageWeights(kt.bind_weights({n: "module." + n for n in mine.names}, theirs))
    for name, p in bound.named_weights().items():
        assert p is theirs["module." + name]  # the same Parameter: .grad lands in the framework's
    with pytest.raises(errors.PlanMismatch, match="not in the state: decoder.layers.2"):
        kt.bind_weights({n: n for n in mine.names}, theirs)


def test_context_parallel_ranks_hold_every_position_once():
    positions = torch.cat([load_balanced_positions(32, 4, r) for r in range(4)])
    assert sorted(positions.tolist()) == list(range(32))
    assert load_balanced_positions(32, 4, 0).tolist() == [0, 1, 2, 3, 28, 29, 30, 31]


def test_rope_backward_is_the_adjoint():
    cos, sin = kt.model.rotary_tables(torch.arange(8), 16, 10000.0, torch.float64)
    x, y = torch.randn(2, 3, 8, 16, dtype=torch.float64), torch.randn(2, 3, 8, 16, dtype=torch.float64)
    lhs = (kernels.rope(x, cos, sin) * y).sum()
    rhs = (x * kernels.rope_backward(y, cos, sin)).sum()
    assert float(lhs) == pytest.approx(float(rhs), rel=1e-12)


def test_unknown_kernels_and_collectives_are_refused_by_name():
    with pytest.raises(errors.Unsupported, match="fancy_norm"):
        kernels.check_kernels({"linear_qkv", "fancy_norm"})
    with pytest.raises(errors.Unsupported, match="tp_all_reduce after 'rotary'"):
        comm.collective(Kernel(name="tp_all_reduce", module="tp_all_reduce", kind="collective",
                               layer=0, after="rotary"))
    with pytest.raises(errors.Unsupported, match="interleaved"):
        w = workload()
        w["parallelism"] = dict(w["parallelism"], virtual_stages=2)
        kt.ModelShape.from_workload(w)
