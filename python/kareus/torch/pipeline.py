# SPDX-License-Identifier: Apache-2.0
"""A pipeline-parallel training step over torch.distributed send/recv, driven by a plan.

Each rank runs its stage's instructions in the schedule's order (Megatron-LM's non-interleaved
1F1B, or GPipe), receives its input from the previous stage and sends its output on, and, with
a `kareus.PlanExecutor`, calls its hooks around every instruction: the executor checks the order
against the plan, sets the instruction's GPU clock and says how the instruction runs (mode, SMs
and slot per partition), which the stage then executes. After the last backward the gradients
are reduced: the data-parallel and context-parallel replicas' (one all-reduce over DP x CP, on
the plan's gradient-sync SMs), the q/k norms' over tensor parallelism, a tied embedding's
between the first and last stage.
"""
from typing import List, Optional, Tuple

import torch
import torch.distributed as dist

from . import errors
from .executor import Applied, StageExecutor
from .model import EMBEDDING, QK_NORM_WEIGHTS, load_balanced_positions
from .program import SEQUENTIAL


def one_f_one_b(stages: int, stage: int, microbatches: int) -> List[Tuple[str, int]]:
    """Megatron-LM's non-interleaved 1F1B order of one stage: warm-up forwards, one forward
    and one backward each, the cool-down backwards."""
    warmup = min(stages - stage - 1, microbatches)
    order = [("forward", m) for m in range(warmup)]
    for m in range(microbatches - warmup):
        order += [("forward", warmup + m), ("backward", m)]
    return order + [("backward", m) for m in range(microbatches - warmup, microbatches)]


def gpipe(microbatches: int) -> List[Tuple[str, int]]:
    return [("forward", m) for m in range(microbatches)] + [("backward", m) for m in range(microbatches)]


class PipelineRunner:
    """One rank's part of a training step.

    `executor`: a kareus.PlanExecutor for this rank's stage (None: every instruction runs
    sequentially, or as `configs` says: a callable (kind, microbatch) -> InstructionConfig, for
    tests and plan-less runs). `sync_cuda`: synchronize the device before each instruction, so
    that the clock set at its start applies to its own kernels (as Zeus and the published
    runtime do).
    """

    def __init__(self, stage: StageExecutor, *, executor=None, schedule: str = "1f1b",
                 configs=None, sync_cuda: bool = True):
        if schedule not in ("1f1b", "gpipe"):
            raise errors.Unsupported(f"schedule {schedule!r}: the executor runs 1f1b and gpipe")
        self.stage, self.executor, self.configs = stage, executor, configs
        self.shape, self.groups = stage.shape, stage.groups
        self.schedule = schedule
        self.sync_cuda = sync_cuda
        params = list(stage.weights.parameters())
        self.device = params[0].device if params else torch.device("cpu")
        self.dtype = params[0].dtype if params else torch.float32
        self.positions = load_balanced_positions(self.shape.sequence_length, self.shape.cp,
                                                 self.groups.cp_rank)
        self.order = (one_f_one_b(self.shape.pp, stage.stage, self.shape.microbatches)
                      if schedule == "1f1b" else gpipe(self.shape.microbatches))

    # -- hooks ----------------------------------------------------------------------------------
    def _begin(self, kind: str, microbatch: int):
        """The instruction's configuration and the plan's instruction (or None)."""
        if self.sync_cuda and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        if self.executor is not None:
            self.executor.on_instruction_begin(kind)
            planned = self.executor.current
            return self.stage.program.config(planned), planned
        if self.configs is not None:
            return self.configs(kind, microbatch), None
        return SEQUENTIAL, None

    def _end(self, kind: str) -> None:
        if self.executor is not None:
            self.executor.on_instruction_end(kind)

    # -- one step ---------------------------------------------------------------------------------
    def train_step(self, tokens: Optional[torch.Tensor], targets: Optional[torch.Tensor],
                   step: int = 0) -> Tuple[Optional[float], List[Applied]]:
        """Runs every instruction of this rank's stage for one iteration and reduces the
        gradients (the optimizer step is the caller's). `tokens`, `targets`: [M, b, S] token
        ids of the whole sequence (the first stage needs tokens, the last targets; each CP
        rank takes its own positions). Returns the iteration's mean loss on the last stage
        (None elsewhere) and what every instruction ran."""
        stage, shape, groups = self.stage, self.shape, self.groups
        M = shape.microbatches
        first, last = stage.first, stage.last
        if self.executor is not None:
            self.executor.on_step_begin()
        stage.applied = []
        shape_act = (shape.microbatch_size, shape.seq_local, shape.hidden)
        prev, nxt = groups.neighbour(-1), groups.neighbour(+1)
        inputs, outputs, sends, losses = {}, {}, [], []
        positions = self.positions.to(tokens.device) if tokens is not None else self.positions
        for kind, m in self.order:
            if kind == "forward":
                if first:
                    x = tokens[m][:, positions].to(self.device)
                else:
                    x = torch.empty(shape_act, dtype=self.dtype, device=self.device)
                    dist.recv(x, src=prev)
                    x.requires_grad_()
                y = targets[m][:, positions].to(self.device) if last else None
                config, planned = self._begin("forward", m)
                with stage.instruction("forward", m, step, config, planned):
                    out = stage(x, y)
                self._end("forward")
                inputs[m], outputs[m] = x, out
                if last:
                    losses.append(out.detach())
                else:
                    sends.append((dist.isend(out.detach(), dst=nxt), out))
            else:
                grad = None
                if not last:
                    grad = torch.empty(shape_act, dtype=self.dtype, device=self.device)
                    dist.recv(grad, src=nxt)
                config, planned = self._begin("backward", m)
                with stage.instruction("backward", m, step, config, planned):
                    out = outputs.pop(m)
                    if last:
                        torch.autograd.backward(out / M)
                    else:
                        torch.autograd.backward(out, grad)
                self._end("backward")
                x = inputs.pop(m)
                if not first:
                    sends.append((dist.isend(x.grad, dst=prev), x.grad))
        for handle, _ in sends:
            handle.wait()
        self.reduce_gradients()
        if self.executor is not None:
            self.executor.on_step_end()
        loss = None
        if last and losses:
            total = torch.stack(losses).sum() / M
            if shape.cp > 1:
                dist.all_reduce(total, group=groups.group("cp"))
            loss = float(total)
        return loss, list(stage.applied)

    def reduce_gradients(self) -> None:
        """Sums what other ranks hold of this rank's gradients: q/k norms over TP, every
        gradient over the DP x CP replicas (averaged over DP), a tied embedding between the
        first and last stage."""
        shape, groups = self.shape, self.groups
        named = self.stage.weights.named_weights()
        if shape.qk_norm and shape.tp > 1:
            for name, p in named.items():
                if p.grad is not None and name.endswith(QK_NORM_WEIGHTS):
                    dist.all_reduce(p.grad, group=groups.group("tp"))
        if shape.dp * shape.cp > 1:
            sync = self.executor.stage_gradient_sync if self.executor is not None else None
            group = groups.group("dp", sync["sms"] if sync else None)
            if self.executor is not None:
                self.executor.on_gradient_sync_begin()
            grads = [p.grad for p in named.values() if p.grad is not None]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=group)
            if shape.dp > 1:
                flat /= shape.dp
            offset = 0
            for g in grads:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()
            if self.executor is not None:
                self.executor.on_gradient_sync_end()
        if shape.tied_embeddings and shape.pp > 1 and EMBEDDING in named:
            grad = named[EMBEDDING].grad
            if grad is None:
                grad = named[EMBEDDING].grad = torch.zeros_like(named[EMBEDDING])
            dist.all_reduce(grad, group=groups.group("embedding"))
