# SPDX-License-Identifier: Apache-2.0
"""kareus.torch: Kareus's partitioned overlap execution model in PyTorch, driven by plan.json.

The planner's program (`kareus.partitions(...)`, the same partition builder `kareus partitions`
prints) says which kernels every instruction runs and how a nanobatched block splits into
partitions; the plan says, per instruction, sequential or nanobatched, and per partition type
the collective's SM count and launch slot. This package runs exactly that: a Llama-style
decoder (RMSNorm, grouped-query attention with RoPE, SwiGLU) with tensor and context
parallelism, its stage as one autograd node whose forward and backward execute the program
kernel by kernel, one communicator per SM count, and a 1F1B / GPipe pipeline over send/recv with
the runtime's PlanExecutor hooks. Works with PyTorch 1.13 (CPU, gloo) and 2.x (CUDA, NCCL).

    import kareus, kareus.torch as kt
    job = kt.Job.from_plan("run/plan.json", workload="workload.yaml")   # after init_process_group
    for step in range(steps):
        loss, applied = job.train_step(tokens, targets, step)
        optimizer.step(); optimizer.zero_grad()

See examples/pytorch/ for a complete job, and its README for binding your own layer's weights.
"""
from . import errors
from .comm import Groups, ParallelLayout
from .executor import Applied, StageExecutor
from .job import Job
from .model import (ModelShape, StageWeights, bind_weights, fuse_qkv, init_weights, shard,
                    stage_weight_names, stage_weights, unshard)
from .pipeline import PipelineRunner, gpipe, one_f_one_b
from .program import CommChoice, InstructionConfig, Program, SEQUENTIAL, sm_counts
from .trace import Trace

__all__ = [
    "Applied", "CommChoice", "Groups", "InstructionConfig", "Job", "ModelShape", "ParallelLayout",
    "PipelineRunner", "Program", "SEQUENTIAL", "StageExecutor", "StageWeights", "Trace",
    "bind_weights", "errors", "fuse_qkv", "gpipe", "init_weights", "one_f_one_b", "shard",
    "sm_counts", "stage_weight_names", "stage_weights", "unshard",
]
