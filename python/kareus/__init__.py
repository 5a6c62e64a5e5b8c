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

NVML is loaded at run time: $KAREUS_NVML_LIBRARY, else libnvidia-ml.so.1. `kareus.optimize`
(the end-to-end `kareus run`) is not exposed yet.
"""

from ._kareus import (  # noqa: F401
    EnergyMonitor,
    EnvironmentError,
    Error,
    FrequencyController,
    InputError,
    Measurement,
    PlanExecutor,
    nvml_index_for_cuda_device,
)

__all__ = [
    "EnergyMonitor",
    "EnvironmentError",
    "Error",
    "FrequencyController",
    "InputError",
    "Measurement",
    "PlanExecutor",
    "nvml_index_for_cuda_device",
]
__version__ = "0.1.0"
