# SPDX-License-Identifier: Apache-2.0
# Type stubs of the compiled module kareus._kareus (python/src/kareus_module.cc).
import os
from types import TracebackType
from typing import Any, Callable, Dict, List, Literal, NotRequired, Optional, Sequence, TypedDict

class Error(RuntimeError): ...
class InputError(ValueError):
    """A bad plan/frontier file or clock, or a training loop that does not follow the plan."""
class EnvironmentError(OSError):
    """NVML missing or failing, no such GPU, a file that cannot be read."""

def nvml_index_for_cuda_device(cuda_device: int) -> int: ...
def partitions(workload: str | os.PathLike[str] | Dict[str, Any] | None = None, *,
               plan: str | os.PathLike[str] | None = None,
               record: Dict[str, Any] | None = None, virtual_stages: int = 1,
               program: bool = True) -> Dict[str, Any]:
    """`kareus partitions --json [--program]` of a workload file or dict, of the workload a
    plan.json records (plan=...), or of a plan's workload record (record=..., with the plan's
    virtual_stages)."""
def load_plan(plan_path: str | os.PathLike[str]) -> Dict[str, Any]:
    """A plan.json validated as export and the runtime read it (its shape, and that it fits the
    workload it records: stages, clocks, partition types, slots, SM counts; InputError naming the
    field), in the current format."""
def sequential_job_refusal(plan_path: str | os.PathLike[str]) -> Optional[str]:
    """Why a job that runs every instruction sequentially should not apply this plan, or None."""
def optimize(
    workload: str | os.PathLike[str] | Dict[str, Any],
    out: str | os.PathLike[str] | None = None,
    methods: Optional[List[str]] = None,
    budget_fraction: Optional[float] = None,
    seed: int = 1,
    quiet: bool = True,
) -> Dict[str, Any]:
    """`kareus run` on a workload file or its mapping as a dict: summary.json as a dict; with
    `out`, the run's files there."""

class SolveCost(TypedDict):
    time_s: float
    energy_j: float
    static_energy_j: float

class SolveResult(TypedDict):
    status: str
    message: str
    steps: int
    points: int
    fastest: SolveCost
    lowest_energy: SolveCost
    plan: str
    frontier: Optional[str]
    plans: List[str]

def solve(profile: str | os.PathLike[str], *, stages: int, microbatches: int,
          static_power_w: float, out: str | os.PathLike[str], unit_time_s: float = 1e-3,
          gpus_per_stage: int = 1, schedule: Literal["1f1b", "gpipe"] = "1f1b",
          deadline_s: float = 0.0) -> SolveResult:
    """`kareus solve`: a Perseus profile CSV's frontier, written to `out`."""
def export(plan: str | os.PathLike[str], *, format: Literal["zeus", "kareus-scheds"],
           out: str | os.PathLike[str], clocks_only: bool = False) -> List[str]:
    """`kareus export`: Zeus or Kareus schedule files in `out`; the files written."""

class ControllerStats(TypedDict):
    requests: int
    unchanged: int
    coalesced: int
    set_calls: int
    failures: int
    applied_mhz: int

class FrequencyController:
    def __init__(self, gpu: int = 0, install_signal_handlers: bool = True,
                 coalesce: bool = True) -> None: ...
    def request_clock(self, freq_mhz: int) -> None: ...
    def request_reset(self) -> None: ...
    def wait_idle(self) -> None: ...
    def reset_clocks(self) -> None: ...
    @property
    def gpu(self) -> int: ...
    @property
    def measure_only(self) -> bool: ...
    @property
    def supported_clocks_mhz(self) -> list[int]: ...
    @property
    def stats(self) -> ControllerStats: ...
    def __enter__(self) -> "FrequencyController": ...
    def __exit__(self, exc_type: Optional[type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> bool: ...

class Knobs(TypedDict):
    type: str
    sms: int
    slot: str

class Instruction(TypedDict):
    kind: Literal["forward", "backward"]
    microbatch: int
    freq_mhz: int
    mode: Literal["nanobatched", "sequential"]
    partitions: list[Knobs]
    time_s: float
    energy_j: float
    gradient_sync: NotRequired[InstructionGradientSync]

class InstructionGradientSync(TypedDict):
    sms: int
    overlapped: bool

class StageGradientSync(TypedDict):
    freq_mhz: int
    sms: int
    time_s: float
    energy_j: float

class FrontierChoice(TypedDict):
    point_index: int
    time_s: float
    energy_j: float
    plan_path: str
    meets_target: bool

class PowerChoice(TypedDict):
    point_index: int
    time_s: float
    energy_j: float
    power_w_per_gpu: float
    plan_path: str
    fits: bool

class TimetableStep(TypedDict):
    interval: int
    plan: Optional[str]
    pause_until: float
    planned_iterations: float
    behind: bool
    late: bool
    done: bool
    message: str

class PlanExecutor:
    def __init__(self, plan_path: str | os.PathLike[str], stage: int = 0,
                 controller: Optional[FrequencyController] = None,
                 check_supported_clocks: bool = True,
                 num_stages: Optional[int] = None,
                 num_microbatches: Optional[int] = None,
                 schedule: Optional[Literal["1f1b", "gpipe", "interleaved-1f1b"]] = None) -> None:
        """num_stages / num_microbatches / schedule: the job's pipeline; a plan made for another
        stage count, microbatch count or schedule raises InputError naming both, before any
        clock is touched."""
    def on_step_begin(self) -> None: ...
    def on_step_end(self) -> None: ...
    def on_instruction_begin(self, name: Literal["forward", "backward"],
                             chunk: Optional[int] = None) -> None: ...
    def on_instruction_end(self, name: Literal["forward", "backward"],
                           chunk: Optional[int] = None) -> None: ...
    def on_gradient_sync_begin(self) -> None: ...
    def on_gradient_sync_end(self) -> None: ...
    @property
    def gradient_sync(self) -> Optional[InstructionGradientSync]: ...
    @property
    def stage_gradient_sync(self) -> Optional[StageGradientSync]: ...
    @property
    def step(self) -> int: ...
    @property
    def instruction_index(self) -> int: ...
    @property
    def stage(self) -> int: ...
    @property
    def in_step(self) -> bool: ...
    @property
    def in_instruction(self) -> bool: ...
    @property
    def num_instructions(self) -> int: ...
    @property
    def method(self) -> str: ...
    @property
    def num_stages(self) -> int: ...
    @property
    def num_microbatches(self) -> int: ...
    @property
    def schedule(self) -> Literal["1f1b", "gpipe", "interleaved-1f1b"]: ...
    @property
    def current(self) -> Optional[Instruction]: ...
    def knobs(self, partition_type: str) -> Optional[tuple[int, str]]: ...
    def swap_plan(self, plan_path: str | os.PathLike[str]) -> None: ...
    def swap_to_frontier(self, frontier_folder: str | os.PathLike[str],
                         target_time_s: float) -> FrontierChoice: ...
    def swap_to_power_budget(self, frontier_folder: str | os.PathLike[str],
                             budget_w_per_gpu: float) -> PowerChoice: ...
    def follow_timetable(self, timetable: str | os.PathLike[str], first_iteration: float = 0.0,
                         now: Optional[Callable[[], float]] = None,
                         sleep_until: Optional[Callable[[float], None]] = None) -> None: ...
    @property
    def timetable_step(self) -> Optional[TimetableStep]: ...
    @property
    def timetable_swaps(self) -> int: ...
    @property
    def swap_pending(self) -> bool: ...

class Measurement:
    @property
    def time(self) -> float: ...
    @property
    def gpu_energy(self) -> dict[int, float]: ...
    @property
    def total_energy(self) -> float: ...
    @property
    def power_integrated(self) -> bool: ...

class EnergyMonitor:
    def __init__(self, gpu_indices: Optional[Sequence[int]] = None,
                 power_poll_period_s: float = 0.01) -> None: ...
    @property
    def gpu_indices(self) -> list[int]: ...
    def begin_window(self, key: str) -> None: ...
    def end_window(self, key: str) -> Measurement: ...
    def cancel_window(self, key: str) -> None: ...
    @property
    def open_windows(self) -> list[str]: ...


class PickedPlan(TypedDict):
    point_index: int
    time_s: float
    energy_j: float
    plan_path: str
    meets: bool

def pick_plan(folder: str | os.PathLike[str], deadline_s: float = 0.0,
              power_w: float = 0.0) -> PickedPlan: ...
