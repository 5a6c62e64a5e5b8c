# SPDX-License-Identifier: Apache-2.0
"""Kareus runtime for Python training loops.

Apply a Kareus plan (plan.json: a GPU clock per pipeline instruction, comm-kernel SMs and launch
slot per partition) and measure GPU energy::

    import kareus
    controller = kareus.FrequencyController(gpu=kareus.nvml_index_for_cuda_device(local_rank))
    executor = kareus.PlanExecutor("plan.json", stage=pp_rank, controller=controller)
    executor.on_step_begin()
    executor.on_instruction_begin("forward"); ...; executor.on_instruction_end("forward")
    executor.on_step_end()

NVML is loaded at run time: $KAREUS_NVML_LIBRARY, else libnvidia-ml.so.1.

Run a plan's partitions (nanobatches, comm SMs and launch slots) in a PyTorch job:
`kareus.torch` (imports torch; see examples/pytorch/).

Plan a workload end to end (what `kareus run` does, on the built-in emulator)::

    summary = kareus.optimize("examples/paper/01-llama3.2-3b-tp8-mbs8-seq4096.yaml", out="out")
"""

from ._kareus import (  # noqa: F401
    EnergyMonitor,
    EnvironmentError,
    Error,
    FrequencyController,
    InputError,
    Measurement,
    PlanExecutor,
    load_plan,
    nvml_index_for_cuda_device,
    optimize,
    partitions,
    sequential_job_refusal,
)

__all__ = [
    "EnergyMonitor",
    "EnvironmentError",
    "Error",
    "FrequencyController",
    "InputError",
    "Measurement",
    "PlanExecutor",
    "load_plan",
    "nvml_index_for_cuda_device",
    "optimize",
    "partitions",
    "sequential_job_refusal",
]
__version__ = "0.1.0"
