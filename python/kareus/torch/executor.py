# SPDX-License-Identifier: Apache-2.0
"""The partitioned overlap execution model: one pipeline stage's forward and backward
instructions, run kernel by kernel as the planner's program gives them.

Sequential: the full microbatch, one kernel at a time, each collective waited for right where
the kernel list has it (where Megatron-LM waits). Nanobatched: the microbatch split in two
([:b//2], [b//2:]), the partition occurrences in the published order (NB0 segment 0, NB1
segment 0, NB0 segment 1, ...); each occurrence's collective (on the other nanobatch's tensor)
is launched when its compute reaches the plan's launch slot, the kernel the slot names being the
first one it overlaps, so it starts right after the kernel before that slot ends (at once for
slot index 0), and it is waited for at the occurrence's end. The two nanobatches' weight
gradients are summed. The backward is one hand-ordered pass over the backward occurrences
inside one torch.autograd.Function around the stage (as the published design wraps its layer
stack), so backward collectives overlap too; with full recomputation the backward first re-runs
the forward occurrences.
"""
import contextlib
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch

from . import comm, errors, kernels
from .model import ModelShape, StageWeights, load_balanced_positions, rotary_tables
from .program import SEQUENTIAL, InstructionConfig, Program, group_kind
from .trace import Trace


@dataclass
class _Instruction:
    kind: str
    microbatch: int
    step: int
    config: InstructionConfig


@dataclass
class _Microbatch:
    """What one microbatch's forward leaves for its backward."""
    index: int
    step: int
    requires_grad: bool
    saved: kernels.Saved = field(default_factory=kernels.Saved)
    block_input: Optional[torch.Tensor] = None
    rows: int = 0
    targets: Optional[torch.Tensor] = None


@dataclass
class Applied:
    """What an instruction actually ran: its mode and, per partition type whose collective was
    launched, the SM count of its communicator (None: library default) and its slot."""
    kind: str
    microbatch: int
    mode: str
    partitions: Dict[str, Dict[str, object]] = field(default_factory=dict)
    time_s: float = 0.0
    planned: Optional[dict] = None  # the plan's instruction (PlanExecutor.current), if any
    # With timing: each partition occurrence's time, in execution order, as
    # (type, nanobatch, seconds), and the block's (CUDA events on a GPU, the host clock on a CPU;
    # a partition's time runs from its first kernel to the end of its collective's join).
    partition_times: List[tuple] = field(default_factory=list)
    block_s: float = 0.0
    outside_block_s: float = 0.0  # the kernels before and after the block


class _StageFunction(torch.autograd.Function):
    """The stage as one autograd node: its forward runs the forward instruction's program, its
    backward the backward instruction's (the parameters come in so that their gradients go
    back through autograd to .grad)."""

    @staticmethod
    def forward(ctx, executor, microbatch, inputs, *params):
        ctx.executor, ctx.microbatch = executor, microbatch
        ctx.tokens = not inputs.is_floating_point()
        return executor._forward(microbatch, inputs)

    @staticmethod
    def backward(ctx, grad):
        dx, grads = ctx.executor._backward(ctx.microbatch, grad)
        return (None, None, None if ctx.tokens else dx, *grads)


class StageExecutor:
    """One pipeline stage on one (TP, CP, DP) rank.

    Call it inside `instruction(...)` contexts, as a pipeline schedule runs its instructions::

        with stage.instruction("forward", microbatch=m, step=s, config=cfg):
            out = stage(inputs, targets)     # tokens on the first stage; loss on the last
        with stage.instruction("backward", microbatch=m, step=s, config=cfg):
            torch.autograd.backward(out, grad)

    `config` (program.config(plan instruction)) says sequential or nanobatched and each
    partition's SMs and slot; outside an instruction context a stage runs sequentially.
    """

    def __init__(self, program: Program, shape: ModelShape, weights: StageWeights,
                 groups: "comm.Groups", stage: Optional[int] = None, trace: Optional[Trace] = None,
                 timing: bool = False):
        self.program, self.shape, self.groups = program, shape, groups
        self.stage = groups.stage if stage is None else stage
        self.unit = program.unit(self.stage)
        self.first = self.stage == 0
        self.last = self.stage == shape.pp - 1
        self.weights = weights
        self._named = weights.named_weights()
        self._params = list(self._named.values())
        self._names = list(self._named)
        self.trace = trace
        self.timing = timing
        self._marks: List[tuple] = []
        self.applied: List[Applied] = []
        self._current: Optional[_Instruction] = None
        self._applied: Optional[Applied] = None
        # A callable (partition, pieces, config) called before each partition occurrence runs
        # (kareus.torch.measure takes a snapshot there); None: no hook.
        self.before_partition = None
        self._check_program()
        device = self._params[0].device if self._params else torch.device("cpu")
        self._cuda = device.type == "cuda"
        dtype = self._params[0].dtype if self._params else torch.float32
        positions = load_balanced_positions(shape.sequence_length, shape.cp, groups.cp_rank)
        gathered = torch.cat([load_balanced_positions(shape.sequence_length, shape.cp, r)
                              for r in range(shape.cp)])
        cos, sin = rotary_tables(positions, shape.head_dim, shape.rope_base, dtype)
        self.kc = kernels.KernelContext(
            shape, self._named, first_layer=self.unit.first_layer, tp_rank=groups.tp_rank,
            positions=positions.to(device), gathered_positions=gathered.to(device),
            rope=(cos.to(device), sin.to(device)))

    def _check_program(self) -> None:
        """Every kernel and collective of the stage's program has an implementation."""
        names = set()
        for ins in (self.unit.forward, self.unit.backward):
            every = list(ins.before_block + ins.sequential + ins.after_block)
            for p in ins.partitions:
                every += list(p.compute) + ([p.collective] if p.collective else [])
            for k in every:
                if k.is_collective:
                    comm.collective(k)  # raises naming an unknown one
                else:
                    names.add(k.name)
        kernels.check_kernels(names)
        if self.unit.layers != self.shape.layers_per_stage[self.stage]:
            raise errors.PlanMismatch(
                f"stage {self.stage}: the program has {self.unit.layers} layers, the model "
                f"{self.shape.layers_per_stage[self.stage]}")

    # -- the instruction context ----------------------------------------------------------------
    @contextlib.contextmanager
    def instruction(self, kind: str, microbatch: int, step: int = 0,
                    config: InstructionConfig = SEQUENTIAL, planned: Optional[dict] = None):
        if self._current is not None:
            raise RuntimeError(f"instruction {kind} begun inside {self._current.kind}")
        self._current = _Instruction(kind, microbatch, step, config)
        self._applied = Applied(kind=kind, microbatch=microbatch, mode=config.mode, planned=planned)
        started = time.perf_counter()
        self._marks = []
        try:
            yield self._applied
        finally:
            self._finish_timing()
            self._applied.time_s = time.perf_counter() - started
            self.applied.append(self._applied)
            self._current = None

    def __call__(self, inputs: torch.Tensor, targets: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The forward instruction on one microbatch: `inputs` are token ids [b, s_local] on
        the first stage, the previous stage's activation [b, s_local, hidden] otherwise;
        `targets` [b, s_local] on the last stage, which returns this rank's part of the mean
        loss (the CP ranks' parts sum to the microbatch's mean)."""
        current = self._current or _Instruction("forward", 0, 0, SEQUENTIAL)
        mb = _Microbatch(index=current.microbatch, step=current.step,
                         requires_grad=torch.is_grad_enabled(), rows=inputs.shape[0],
                         targets=targets)
        if not mb.requires_grad:
            return self._forward(mb, inputs)
        return _StageFunction.apply(self, mb, inputs, *self._params)

    # -- running a program ------------------------------------------------------------------------
    def _config(self) -> InstructionConfig:
        return self._current.config if self._current is not None else SEQUENTIAL

    def _begin(self, mb: _Microbatch) -> None:
        self.kc.saved = mb.saved
        self.kc.begin_microbatch(dropout_seed=(mb.step * 1_000_003 + mb.index))

    def _forward(self, mb: _Microbatch, inputs: torch.Tensor) -> torch.Tensor:
        ins = self.unit.forward
        self._begin(mb)
        full = kernels.Piece(None, slice(0, mb.rows))
        full.t["tokens" if self.first else "x"] = inputs
        if self.last:
            full.t["targets"] = mb.targets
        self.kc.saving = mb.requires_grad
        self._run_timed("before", ins.before_block, full)
        if mb.requires_grad and self.shape.recompute == "full":
            mb.block_input = full.t["x"]
            self.kc.saving = False  # the backward re-runs the block's forward
        self._run_block(ins, full, carry="x")
        self.kc.saving = mb.requires_grad
        self._run_timed("after", ins.after_block, full)
        return full.t.pop("loss") if self.last else full.t.pop("x")

    def _backward(self, mb: _Microbatch, grad: torch.Tensor):
        ins = self.unit.backward
        self._begin(mb)
        self.kc.grads = {}
        self.kc.saving = True  # a recomputed forward saves for the backward after it
        full = kernels.Piece(None, slice(0, mb.rows))
        full.t["dloss" if self.last else "dx"] = grad
        self._run_timed("before", ins.before_block, full)
        if mb.block_input is not None:
            full.t["x"] = mb.block_input
        self._run_block(ins, full, carry="dx")
        full.t.pop("x", None)  # the recomputed block's output
        self._run_timed("after", ins.after_block, full)
        mb.saved, mb.block_input = None, None
        self.kc.saved = None
        grads = []
        for name, param in zip(self._names, self._params):
            g = self.kc.grads.get(name)
            grads.append(None if g is None else g.to(param.dtype))
        self.kc.grads = {}
        return full.t.pop("dx", None), grads

    def _mark(self):
        if self._cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _finish_timing(self) -> None:
        if not self._marks:
            return
        if self._cuda:
            torch.cuda.synchronize()

        def seconds(a, b):
            return a.elapsed_time(b) / 1e3 if self._cuda else b - a
        for label, start, end in self._marks:
            if label == "block":
                self._applied.block_s += seconds(start, end)
            elif label in ("before", "after"):
                self._applied.outside_block_s += seconds(start, end)
            else:
                self._applied.partition_times.append(label + (seconds(start, end),))
        self._marks = []

    def _run_timed(self, label: str, sequence, full: kernels.Piece) -> None:
        start = self._mark() if self.timing and sequence else None
        self._run_kernels(sequence, full)
        if start is not None:
            self._marks.append((label, start, self._mark()))

    def _run_block(self, ins, full: kernels.Piece, carry: str) -> None:
        start = self._mark() if self.timing else None
        self._run_block_kernels(ins, full, carry)
        if self.timing:
            self._marks.append(("block", start, self._mark()))

    def _run_block_kernels(self, ins, full: kernels.Piece, carry: str) -> None:
        config = self._config()
        if not config.nanobatched:
            self._run_kernels(ins.sequential, full)
            return
        if not ins.partitions:
            raise errors.PlanMismatch(f"stage {self.stage}: the plan runs a {ins.kind} "
                                      f"nanobatched but the workload has no partitions")
        half = full.size // 2
        pieces = [kernels.Piece(0, slice(0, half)), kernels.Piece(1, slice(half, full.size))]
        for name in (carry, "x") if carry == "dx" else (carry,):
            if name in full.t:
                value = full.t.pop(name)
                for pc in pieces:
                    pc.t[name] = value[pc.rows]
        self._run_partitions(ins.partitions, pieces, config)
        full.t[carry] = torch.cat([pc.t.pop(carry) for pc in pieces])
        for pc in pieces:
            pc.t.pop("x", None)

    def replay_partition(self, p, pieces, config: InstructionConfig, saved: kernels.Saved) -> None:
        """Runs one partition occurrence on `pieces` exactly as an instruction does (compute,
        the other nanobatch's collective at the slot, the join), inside an instruction context,
        with `saved` as the microbatch's saved tensors: what kareus.torch.measure times."""
        self.kc.saved, self.kc.grads = saved, {}
        self._run_partitions([p], pieces, config)

    def _run_kernels(self, sequence, pc: kernels.Piece) -> None:
        for k in sequence:
            if k.is_collective:
                self._wait(self._launch(k, pc, None, None), k, None, None)
            else:
                self._compute(k, pc, None)

    def _run_partitions(self, partitions, pieces, config: InstructionConfig) -> None:
        for p in partitions:
            if self.before_partition is not None:
                self.before_partition(p, pieces, config)
            start = self._mark() if self.timing else None
            pc = pieces[p.nanobatch]
            pending, launch_at, choice = None, -1, None
            if p.collective is not None:
                choice = config.choices[p.type]
                launch_at = p.slots.get(choice.slot)
                if launch_at is None:
                    raise errors.PlanMismatch(
                        f"{p.type}: slot {choice.slot!r} is not a slot of this partition "
                        f"(slots: {', '.join(p.slots)})")
                self._applied.partitions.setdefault(p.type, {"sms": choice.sms, "slot": choice.slot})
            for i, k in enumerate(p.compute):
                if i == launch_at:
                    # The other nanobatch's tensor, made by the occurrence before this one.
                    pending = self._launch(p.collective, pieces[1 - p.nanobatch], choice.sms, p)
                self._compute(k, pc, p)
            if pending is not None:
                self._wait(pending, p.collective, choice.sms, p)
            if self.timing:
                self._marks.append(((p.type, p.nanobatch), start, self._mark()))

    def _compute(self, k, pc: kernels.Piece, p) -> None:
        if self.trace is not None:
            self._event("op_begin", k, p, None)
        kernels.COMPUTE[k.name](self.kc, pc, k.layer)
        if self.trace is not None:
            self._event("op_end", k, p, None)

    def _launch(self, k, pc: kernels.Piece, sms: Optional[int], p) -> "comm.Pending":
        group = self.groups.group(group_kind(k.collective), sms)
        if self.trace is not None:
            self._event("comm_launch", k, p, sms)
        return comm.collective(k)(self.kc, pc, group, k.layer)

    def _wait(self, pending: "comm.Pending", k, sms: Optional[int], p) -> None:
        if self.trace is not None:
            self._event("comm_wait", k, p, sms)
        pending.wait()

    def _event(self, event: str, k, p, sms) -> None:
        current = self._current
        self.trace.write({
            "stage": self.stage, "tp_rank": self.groups.tp_rank, "cp_rank": self.groups.cp_rank,
            "step": current.step if current else 0,
            "instruction": current.kind if current else None,
            "microbatch": current.microbatch if current else None,
            "nanobatch": None if p is None else p.nanobatch,
            "partition": None if p is None else p.type,
            "event": event, "op": k.name, "layer": k.layer, "sms": sms})
