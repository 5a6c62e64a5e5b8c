# SPDX-License-Identifier: Apache-2.0
"""A rank's whole setup for training under a plan, in one call (`Job.from_plan`)."""
import os
from typing import Mapping, Optional, Sequence

import torch

import kareus

from . import errors
from .comm import Groups, ParallelLayout
from .executor import StageExecutor
from .model import ModelShape, StageWeights, stage_weights
from .pipeline import PipelineRunner
from .program import Program, sm_counts
from .trace import Trace

# What a plan's workload and the job's must share for the plan to describe the job (the GPU
# may differ: a plan made for H100s can be exercised on a CPU).
_COMPARED = (
    ("model", ("hidden", "heads", "kv_groups", "head_dim", "ffn", "layers", "vocab", "qk_norm",
               "tied_embeddings")),
    ("parallelism", ("tp", "cp", "pp", "dp", "layers_per_stage")),
    (None, ("microbatch_size", "sequence_length", "microbatches", "recompute")),
)


def workload_differences(plan_workload: Mapping, job_workload: Mapping) -> list:
    """The fields in which a plan's recorded workload and the job's differ, as
    "field: plan value, job value" strings."""
    out = []
    for section, keys in _COMPARED:
        a = plan_workload.get(section, {}) if section else plan_workload
        b = job_workload.get(section, {}) if section else job_workload
        for key in keys:
            va, vb = a.get(key), b.get(key)
            if va != vb:
                out.append(f"{section + '.' if section else ''}{key}: plan {va}, job {vb}")
    return out


class Job:
    """This rank's stage of a training job under a plan: the program, the groups, the weights,
    the stage executor, the pipeline runner and the runtime's PlanExecutor."""

    def __init__(self, plan: Mapping, program: Program, shape: ModelShape, groups: Groups,
                 weights: StageWeights, stage: StageExecutor, runner: PipelineRunner, executor,
                 trace: Optional[Trace]):
        self.plan, self.program, self.shape, self.groups = plan, program, shape, groups
        self.weights, self.stage, self.runner, self.executor = weights, stage, runner, executor
        self.trace = trace

    @classmethod
    def from_plan(cls, plan_path, workload=None, *, seed: int = 0,
                  device: Optional[torch.device] = None, dtype: torch.dtype = torch.float32,
                  controller=None, extra_plans: Sequence = (), trace: Optional[str] = None,
                  weights: Optional[StageWeights] = None, check_supported_clocks: bool = True,
                  **shape_overrides) -> "Job":
        """Builds everything after torch.distributed.init_process_group.

        `workload`: the workload the job runs (a file or its dict; None: the one the plan
        records). A plan made for another model, parallelism, batch or recompute policy is
        refused (errors.PlanMismatch) naming both; so is a plan whose partition types or slots
        the model does not have, or a pipeline shape the job does not run (PlanExecutor).
        `extra_plans`: plans the job may switch to (straggler mode; e.g. a frontier's
        plans/), so their SM counts get communicators at start. `controller`: a
        kareus.FrequencyController (None: clocks are not touched). `trace`: a path; this rank
        writes its events to it (give each rank its own). `weights`: this rank's weights
        (default: the shard of init_weights(shape, seed)). `shape_overrides`: norm_eps,
        rope_base, hidden_dropout.
        """
        plan_path = os.fspath(plan_path)
        plan = kareus.load_plan(plan_path)
        if workload is None:
            program = Program.of_plan(plan_path)
        else:
            program = Program.of_workload(workload)
            # A plan from a Perseus profile (`kareus solve`) records no workload to compare.
            different = workload_differences(plan["workload"], program.workload) if plan["workload"] else []
            if different:
                raise errors.PlanMismatch(
                    f"{plan_path}: the plan was made for another job: " + "; ".join(different))
        plans = [plan] + [kareus.load_plan(os.fspath(p)) for p in extra_plans]
        for p in plans:
            program.check_plan(p)

        def make_executor(shape, groups):
            return kareus.PlanExecutor(plan_path, stage=groups.stage, controller=controller,
                                       check_supported_clocks=check_supported_clocks,
                                       num_stages=shape.pp, num_microbatches=shape.microbatches,
                                       schedule=plan["schedule"])
        return cls._build(program, plans, plan["schedule"], make_executor, seed=seed,
                          device=device, dtype=dtype, trace=trace, weights=weights,
                          plan=plan, **shape_overrides)

    @classmethod
    def without_plan(cls, workload, *, schedule: str = "1f1b", configs=None, seed: int = 0,
                     device: Optional[torch.device] = None, dtype: torch.dtype = torch.float32,
                     trace: Optional[str] = None, weights: Optional[StageWeights] = None,
                     sm_counts_by_kind: Optional[Mapping] = None, **shape_overrides) -> "Job":
        """The same job without a plan: every instruction sequential, or as `configs`
        ((kind, microbatch) -> InstructionConfig) says, with communicators for
        `sm_counts_by_kind` ({"tp": [...], "cp": [...]})."""
        program = Program.of_workload(workload)
        return cls._build(program, [], schedule, None, seed=seed, device=device, dtype=dtype,
                          trace=trace, weights=weights, configs=configs,
                          counts=sm_counts_by_kind, **shape_overrides)

    @classmethod
    def _build(cls, program, plans, schedule, make_executor, *, seed, device, dtype, trace,
               weights, plan=None, configs=None, counts=None, **shape_overrides) -> "Job":
        shape = ModelShape.from_workload(program.workload, **shape_overrides)
        layout = ParallelLayout(tp=shape.tp, cp=shape.cp, dp=shape.dp, pp=shape.pp)
        groups = Groups(layout, counts if counts is not None else sm_counts(plans, program))
        rank_trace = Trace(trace) if trace else None
        if weights is None:
            weights = stage_weights(shape, groups.stage, groups.tp_rank, seed=seed, device=device,
                                    dtype=dtype)
        executor = make_executor(shape, groups) if make_executor else None
        stage = StageExecutor(program, shape, weights, groups, trace=rank_trace)
        runner = PipelineRunner(stage, executor=executor, schedule=schedule, configs=configs)
        return cls(plan, program, shape, groups, weights, stage, runner, executor, rank_trace)

    def train_step(self, tokens, targets, step: int = 0):
        """One iteration (see PipelineRunner.train_step): (mean loss on the last stage, the
        instructions as they ran)."""
        return self.runner.train_step(tokens, targets, step)

    def close(self) -> None:
        if self.trace is not None:
            self.trace.close()
