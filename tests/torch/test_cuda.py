# SPDX-License-Identifier: Apache-2.0
"""kareus.torch on a GPU (skipped without one): a stage in bf16 on CUDA against the fp32 CPU
reference, NCCL communicators with the plan's CTA count, CUDA-event timing. One GPU is enough:
a one-rank NCCL world (a tensor-parallel pair needs two GPUs, NCCL refuses two ranks on one)."""
import pathlib
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
pytest.importorskip("kareus._kareus", reason="the kareus Python module was not built")
if not torch.cuda.is_available() or not torch.distributed.is_nccl_available():
    pytest.skip("no CUDA device with NCCL", allow_module_level=True)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import distributed  # noqa: E402


def workload():
    return {"name": "cuda", "model": {"name": "tiny", "hidden": 256, "heads": 4, "kv_groups": 2,
                                      "head_dim": 64, "ffn": 512, "layers": 2, "vocab": 512},
            "gpu": "H200-SXM", "parallelism": {"tp": 1, "cp": 1, "pp": 1},
            "microbatch_size": 4, "sequence_length": 128, "microbatches": 2, "recompute": "none"}


def bf16_stage(rank):
    import kareus.torch as kt
    from kareus.torch import reference
    program = kt.Program.of_workload(workload())
    shape = kt.ModelShape.from_workload(program.workload)
    groups = kt.Groups(kt.ParallelLayout(), {})
    full = kt.init_weights(shape, seed=1)
    weights = kt.stage_weights(shape, 0, 0, full=full, device=torch.device("cuda"), dtype=torch.bfloat16)
    stage = kt.StageExecutor(program, shape, weights, groups, timing=True)
    g = torch.Generator().manual_seed(2)
    size = (shape.microbatches, shape.microbatch_size, shape.sequence_length)
    tokens, targets = (torch.randint(0, shape.vocab, size, generator=g) for _ in range(2))
    loss, applied = kt.PipelineRunner(stage).train_step(tokens, targets)
    ref_loss, ref = reference.gradients(shape, full, tokens, targets)
    worst = max(float((p.grad.float().cpu() - ref[n]).norm() / ref[n].norm())
                for n, p in weights.named_weights().items())
    return {"loss": loss, "ref": float(ref_loss), "worst": worst,
            "timed": all(a.block_s > 0 for a in applied)}


def test_a_bf16_stage_on_cuda_matches_the_fp32_reference(tmp_path):
    (result,) = distributed.run(1, bf16_stage, folder=tmp_path, backend="nccl")
    assert result["loss"] == pytest.approx(result["ref"], rel=2e-2)
    assert result["worst"] < 5e-2, result
    assert result["timed"]


def nccl_ctas(rank):
    import torch.distributed as dist
    from kareus.torch import comm
    options = comm._nccl_options(8)
    if options is None:
        return {"ctas": None}
    group = dist.new_group([0], backend="nccl", pg_options=options)
    t = torch.ones(1 << 20, device="cuda")
    work = dist.all_reduce(t, group=group, async_op=True)
    work.wait()  # the compute stream waits for the NCCL stream
    torch.cuda.synchronize()
    return {"ctas": [options.config.min_ctas, options.config.max_ctas], "sum": float(t[0])}


def test_nccl_communicators_take_the_plans_cta_count(tmp_path):
    (result,) = distributed.run(1, nccl_ctas, folder=tmp_path, backend="nccl")
    version = tuple(int(x) for x in torch.__version__.split(".")[:2])
    if version >= (2, 1):
        assert result["ctas"] == [8, 8] and result["sum"] == 1.0
    else:
        assert result["ctas"] is None  # warned once; the library default runs
