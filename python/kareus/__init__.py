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
    summary = kareus.optimize({"name": "w", "model": "llama3.2-3b", ...})  # the file as a dict
    plan = kareus.Frontier.load("out").pick(deadline_s=4.0)["plan_path"]

Solve a Perseus profile and export plans for Zeus (`kareus solve`, `kareus export`)::

    kareus.solve("profile.csv", stages=4, microbatches=16, static_power_w=90, out="solved")
    kareus.export("solved/plans", format="zeus", out="zeus")
"""

import os
from typing import Any, Dict, Iterator, Optional

from ._kareus import (  # noqa: F401
    EnergyMonitor,
    EnvironmentError,
    Error,
    FrequencyController,
    InputError,
    Measurement,
    PlanExecutor,
    export,
    load_plan,
    nvml_index_for_cuda_device,
    optimize,
    partitions,
    pick_plan,
    sequential_job_refusal,
    solve,
)

__all__ = [
    "EnergyMonitor",
    "EnvironmentError",
    "Error",
    "FrequencyController",
    "InputError",
    "Measurement",
    "PlanExecutor",
    "export",
    "load_plan",
    "nvml_index_for_cuda_device",
    "optimize",
    "partitions",
    "pick_plan",
    "sequential_job_refusal",
    "solve",
    "Frontier",
]
__version__ = "0.1.0"


class Frontier:
    """The iteration frontier of a finished `kareus run` (frontier.json) and its plans::

        frontier = kareus.Frontier.load("out")
        for point in frontier: print(point["time_s"], point["energy_j"], point["plan_path"])
        plan = frontier.pick(deadline_s=4.0)["plan_path"]   # or pick(power_w=250)

    ``pick`` applies the runtime's rules (`kareus pick`): for a deadline, the lowest-energy plan
    within it (none: the fastest, ``meets`` False); for an average power per GPU, the fastest
    plan within it (none: the lowest-power one).
    """

    def __init__(self, folder: "os.PathLike[str]", document: "Dict[str, Any]") -> None:
        self.folder = folder
        self.method = document.get("method")
        self.points = []
        for point in document["points"]:
            plan = point.get("plan_path") or (f"plans/plan_{point['plan_index']:05d}.json"
                                              if point.get("plan_index", -1) >= 0 else None)
            self.points.append(dict(point, plan_path=str(folder / plan) if plan else None))

    @classmethod
    def load(cls, folder: "str | os.PathLike[str]") -> "Frontier":
        import json
        import pathlib
        folder = pathlib.Path(folder)
        path = folder / "frontier.json"
        try:
            document = json.loads(path.read_text())
        except FileNotFoundError:
            raise InputError(f"{folder}: no frontier.json (a kareus run output folder)") from None
        except ValueError as error:
            raise InputError(f"{path}: not JSON: {error}") from None
        return cls(folder, document)

    def __iter__(self) -> "Iterator[Dict[str, Any]]":
        return iter(self.points)

    def __len__(self) -> int:
        return len(self.points)

    def pick(self, deadline_s: Optional[float] = None,
             power_w: Optional[float] = None) -> "Dict[str, Any]":
        if (deadline_s is None) == (power_w is None):
            raise InputError("Frontier.pick: give exactly one of deadline_s and power_w")
        return pick_plan(self.folder, deadline_s=deadline_s or 0.0, power_w=power_w or 0.0)
