# SPDX-License-Identifier: Apache-2.0
"""Process groups and collectives of the executor.

Ranks are laid out as Megatron-Core lays them (tensor parallel fastest, then context, data and
pipeline parallel): rank = ((pp * DP + dp) * CP + cp) * TP + tp.

A collective's SM count is a property of its communicator (NCCL's minCTAs / maxCTAs, per
communicator in NCCL <= 2.30; reference: NVIDIA/nccl #1045), so the job makes one process group
per distinct SM count the plan uses, for every group of ranks, at start (`Groups`). With NCCL
the group's `ProcessGroupNCCL.Options().config` gets min_ctas = max_ctas = N (PyTorch >= 2.1);
a PyTorch without that field runs with NCCL's default, and says so once. With gloo (CPU) there
is one group per count too, on the same code path; the count has no effect there.

Collectives are asynchronous (`async_op=True`). On CUDA, ProcessGroupNCCL runs each one on its
own stream after the work already queued on the compute stream (an event), and `wait()` makes
the compute stream wait for it: the launch slot and the join at the partition's end are
stream-ordered, not host-blocking. With gloo the collective runs on the group's thread while
this thread computes, and `wait()` blocks.
"""
import socket
import warnings
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from . import errors, kernels


@dataclass(frozen=True)
class ParallelLayout:
    tp: int = 1
    cp: int = 1
    dp: int = 1
    pp: int = 1

    @property
    def world_size(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    def coordinates(self, rank: int) -> Dict[str, int]:
        tp, rest = rank % self.tp, rank // self.tp
        cp, rest = rest % self.cp, rest // self.cp
        dp, pp = rest % self.dp, rest // self.dp
        return {"tp": tp, "cp": cp, "dp": dp, "pp": pp}

    def rank(self, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        return ((pp * self.dp + dp) * self.cp + cp) * self.tp + tp

    def groups(self, kind: str) -> List[List[int]]:
        """Every group of ranks of a kind: "tp", "cp", "dp" (data-parallel gradients: the
        DP x CP replicas of a (stage, TP rank)), "pp", "embedding" (first and last stage)."""
        out = []
        for r in range(self.world_size):
            c = self.coordinates(r)
            if kind == "tp":
                members = [self.rank(t, c["cp"], c["dp"], c["pp"]) for t in range(self.tp)]
            elif kind == "cp":
                members = [self.rank(c["tp"], x, c["dp"], c["pp"]) for x in range(self.cp)]
            elif kind == "dp":
                members = [self.rank(c["tp"], x, d, c["pp"]) for d in range(self.dp) for x in range(self.cp)]
            elif kind == "pp":
                members = [self.rank(c["tp"], c["cp"], c["dp"], p) for p in range(self.pp)]
            elif kind == "embedding":
                members = sorted({self.rank(c["tp"], c["cp"], c["dp"], 0),
                                  self.rank(c["tp"], c["cp"], c["dp"], self.pp - 1)})
            else:
                raise ValueError(kind)
            if members not in out:
                out.append(members)
        return out


def free_port() -> int:
    """A TCP port free on this host now (for a local process group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_warned_no_ctas = False


def _nccl_options(sms: int):
    """ProcessGroupNCCL options whose communicator uses exactly `sms` CTAs (= SMs), or None
    (with one warning) where this PyTorch has no such setting."""
    global _warned_no_ctas
    options_type = getattr(dist, "ProcessGroupNCCL", None)
    options = options_type.Options() if options_type is not None else None
    config = getattr(options, "config", None)
    if config is None or not hasattr(config, "max_ctas"):
        if not _warned_no_ctas:
            _warned_no_ctas = True
            warnings.warn(f"kareus.torch: PyTorch {torch.__version__} has no "
                          f"ProcessGroupNCCL.Options().config.max_ctas (PyTorch >= 2.1): "
                          f"collectives run with NCCL's default CTA count, not the plan's SMs")
        return None
    config.min_ctas = sms
    config.max_ctas = sms
    return options


class Groups:
    """This rank's process groups: for "tp", "cp" and "dp" one per SM count (None: the
    library's default communicator) and its neighbours in the pipeline. Every rank must
    create the same Groups (same layout and counts): new_group is collective over the world."""

    def __init__(self, layout: ParallelLayout, sm_counts: Optional[Mapping[str, Iterable[int]]] = None,
                 backend: Optional[str] = None):
        if not dist.is_initialized():
            raise RuntimeError("kareus.torch.Groups: call torch.distributed.init_process_group first")
        if dist.get_world_size() != layout.world_size:
            raise errors.PlanMismatch(
                f"the job has {dist.get_world_size()} processes, the plan's parallelism "
                f"(TP {layout.tp} x CP {layout.cp} x DP {layout.dp} x PP {layout.pp}) needs "
                f"{layout.world_size}")
        self.layout = layout
        self.rank = dist.get_rank()
        self.coords = layout.coordinates(self.rank)
        self.backend = backend or dist.get_backend()
        self.nccl_ctas = False
        self._groups: Dict[Tuple[str, Optional[int]], object] = {}
        counts = {k: sorted(set(v)) for k, v in (sm_counts or {}).items()}
        for kind in ("tp", "cp", "dp"):
            size = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp * layout.cp}[kind]
            if size == 1:
                continue
            for sms in [None] + counts.get(kind, []):
                self._create(kind, sms)
        if layout.pp > 1:
            self._create("embedding", None)
        self.sm_counts = counts

    def _create(self, kind: str, sms: Optional[int]) -> None:
        options = None
        if sms is not None and self.backend == "nccl":
            options = _nccl_options(sms)
            self.nccl_ctas = options is not None
        for members in self.layout.groups(kind):
            if options is not None:
                group = dist.new_group(members, backend=self.backend, pg_options=options)
            else:
                group = dist.new_group(members, backend=self.backend)
            if self.rank in members:
                self._groups[(kind, sms)] = group

    def group(self, kind: str, sms: Optional[int] = None):
        """The group of `kind` with `sms` SMs (None: default); KeyError naming the counts."""
        try:
            return self._groups[(kind, sms)]
        except KeyError:
            known = sorted(s for k, s in self._groups if k == kind and s is not None)
            raise errors.PlanMismatch(
                f"no {kind} communicator with {sms} SMs was created at start (created: "
                f"{known}); give every plan the job may switch to when building the groups")

    @property
    def tp_rank(self) -> int:
        return self.coords["tp"]

    @property
    def cp_rank(self) -> int:
        return self.coords["cp"]

    @property
    def dp_rank(self) -> int:
        return self.coords["dp"]

    @property
    def stage(self) -> int:
        return self.coords["pp"]

    def neighbour(self, offset: int) -> Optional[int]:
        """The global rank of the same (tp, cp, dp) position `offset` stages away, or None."""
        stage = self.stage + offset
        if not 0 <= stage < self.layout.pp:
            return None
        c = self.coords
        return self.layout.rank(c["tp"], c["cp"], c["dp"], stage)


# -- collectives on a piece ------------------------------------------------------------------

class Pending:
    """An issued collective: `wait()` joins it and puts its result where the kernels read it."""
    __slots__ = ("works", "finish")

    def __init__(self, works: Sequence, finish: Optional[Callable[[], None]] = None):
        self.works, self.finish = works, finish

    def wait(self) -> None:
        for work in self.works:
            work.wait()
        if self.finish is not None:
            self.finish()


def _all_reduce(channel: str):
    def launch(c: kernels.KernelContext, pc: kernels.Piece, group, layer: int) -> Pending:
        return Pending([dist.all_reduce(pc.t[channel], group=group, async_op=True)])
    return launch


def _gather_kv(from_saved: bool):
    """The K/V all-gather of context parallelism: K and V of this rank's tokens, in one launch
    (two buffers, as the planner's collective moves), into the whole sequence. The backward's
    re-gather reads the K/V the forward saved."""
    def launch(c: kernels.KernelContext, pc: kernels.Piece, group, layer: int) -> Pending:
        if from_saved:
            _, k, v = c.load(layer, "core_attention", pc)
        else:
            k, v = pc.t["k"], pc.t["v"]
        local = torch.stack([k, v])  # [2, b, groups, s_local, d]
        parts = [torch.empty_like(local) for _ in range(c.shape.cp)]
        work = dist.all_gather(parts, local, group=group, async_op=True)

        def finish():
            full = torch.cat(parts, dim=3)
            pc.t["kv_full"] = (full[0], full[1])
        return Pending([work], finish)
    return launch


def _scatter_kv_grad(c: kernels.KernelContext, pc: kernels.Piece, group, layer: int) -> Pending:
    """The dK/dV reduce-scatter: the gradient of the whole sequence's K/V summed over the CP
    ranks, each keeping its own tokens. gloo has no reduce_scatter: there it is an all-reduce
    followed by taking this rank's part (same result, more bytes)."""
    dk, dv = pc.t.pop("dkv_full")
    full = torch.stack([dk, dv])  # [2, b, groups, S, d]
    rank = dist.get_rank(group)
    if dist.get_backend(group) == "nccl":
        chunks = [chunk.contiguous() for chunk in full.chunk(c.shape.cp, dim=3)]
        out = torch.empty_like(chunks[0])
        work = dist.reduce_scatter(out, chunks, group=group, async_op=True)
    else:
        work, out = dist.all_reduce(full, group=group, async_op=True), None

    def finish():
        mine = out if out is not None else full.chunk(c.shape.cp, dim=3)[rank]
        pc.t["dk"], pc.t["dv"] = mine[0], mine[1]
    return Pending([work], finish)


def _loss_reduce(c: kernels.KernelContext, pc: kernels.Piece, group, layer: int) -> Pending:
    """The vocabulary-parallel cross entropy's reductions: the maximum of the ranks'
    log-sum-exps, then the sum of their exponentials and of the target logit (the planner
    merges them into one small all-reduce)."""
    lse, target = pc.t.pop("loss_parts")
    top = lse.clone()
    dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
    both = torch.stack([torch.exp(lse - top), target])
    work = dist.all_reduce(both, group=group, async_op=True)

    def finish():
        kernels.finish_loss(c, pc, top + torch.log(both[0]), both[1])
    return Pending([work], finish)


# (collective kernel, the kernel it follows) -> launch(context, piece, group, layer).
COLLECTIVES: Dict[Tuple[str, str], Callable] = {
    ("tp_all_reduce", "linear_proj"): _all_reduce("p"),
    ("tp_all_reduce", "linear_fc2"): _all_reduce("m"),
    ("tp_all_reduce", "linear_fc1.wgrad"): _all_reduce("da2"),
    ("tp_all_reduce", "linear_qkv.wgrad"): _all_reduce("da1"),
    ("cp_all_gather_kv", "rotary"): _gather_kv(from_saved=False),
    ("cp_all_gather_kv", "linear_proj.wgrad"): _gather_kv(from_saved=True),
    ("cp_reduce_scatter_kv", "core_attention.bwd"): _scatter_kv_grad,
    ("embedding_all_reduce", "embedding"): _all_reduce("x"),
    ("loss_all_reduce", "loss"): _loss_reduce,
    ("output_all_reduce", "output_layer.wgrad"): _all_reduce("dy"),
}


def collective(kernel) -> Callable:
    try:
        return COLLECTIVES[(kernel.name, kernel.after)]
    except KeyError:
        raise errors.Unsupported(
            f"the planner's program has a collective the executor does not implement: "
            f"{kernel.name} after {kernel.after!r} (kareus/torch/comm.py)") from None
