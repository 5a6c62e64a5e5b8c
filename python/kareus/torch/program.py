# SPDX-License-Identifier: Apache-2.0
"""What the executor runs, as the planner defines it.

`kareus.partitions()` (the C++ partition builder, `kareus partitions --json --program`) gives,
for every pipeline unit and instruction, the kernels in order and the partition occurrences of a
nanobatched block. This module turns that document into plain objects and resolves, for one
instruction of a plan, which communicator and launch slot each partition's collective gets.
Nothing here knows the partition layout itself: it is read, never written down a second time.
"""
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import kareus

from . import errors


@dataclass(frozen=True)
class Kernel:
    """One kernel in its place: `name` as the planner calls it (``linear_fc1.dgrad``), its
    module, its kind (gemm, attention, memory, collective), the unit's layer it belongs to
    (-1 outside the block); for a collective its type and group size, and the kernel it follows
    in the layer's kernel list (which tensor it moves)."""
    name: str
    module: str
    kind: str
    layer: int
    collective: Optional[str] = None
    group_size: int = 1
    after: str = ""

    @property
    def is_collective(self) -> bool:
        return self.kind == "collective"

    @staticmethod
    def from_json(j: Mapping) -> "Kernel":
        return Kernel(name=j["name"], module=j["module"], kind=j["kind"], layer=int(j["layer"]),
                      collective=j.get("type"), group_size=int(j.get("group_size", 1)),
                      after=j.get("after", ""))


@dataclass(frozen=True)
class Partition:
    """One occurrence of a nanobatched block: `nanobatch`'s compute, with the other
    nanobatch's collective (None for the block's first NB0 and last NB1)."""
    type: str
    direction: str
    nanobatch: int
    compute: Tuple[Kernel, ...]
    slots: Mapping[str, int]
    collective: Optional[Kernel]


@dataclass(frozen=True)
class InstructionProgram:
    kind: str  # "forward" | "backward"
    before_block: Tuple[Kernel, ...]
    sequential: Tuple[Kernel, ...]
    partitions: Tuple[Partition, ...]
    after_block: Tuple[Kernel, ...]


@dataclass(frozen=True)
class UnitProgram:
    stage: int
    chunk: int
    layers: int
    first_layer: int
    forward: InstructionProgram
    backward: InstructionProgram

    def instruction(self, kind: str) -> InstructionProgram:
        return self.forward if kind == "forward" else self.backward


@dataclass(frozen=True)
class PartitionTypeInfo:
    """What a plan may choose for a partition type (`kareus partitions`): the launch slots
    searched, the SM counts, and whether it is tuned at all (trailing types run with fixed
    knobs, the published 20 SMs at norm_0)."""
    name: str
    direction: str
    tunable: bool
    launch_slots: Tuple[str, ...]
    sm_choices: Tuple[int, ...]
    collective: str
    group_size: int


@dataclass(frozen=True)
class CommChoice:
    """The collective's communicator (SM count; None: the library's default communicator)
    and its launch slot."""
    sms: Optional[int]
    slot: str


@dataclass(frozen=True)
class InstructionConfig:
    """How one instruction runs: its mode and, when nanobatched, every partition type's
    choice (resolved with the planner's defaults where the plan names none)."""
    mode: str  # "sequential" | "nanobatched"
    choices: Mapping[str, CommChoice]

    @property
    def nanobatched(self) -> bool:
        return self.mode == "nanobatched"


SEQUENTIAL = InstructionConfig(mode="sequential", choices={})


def _kernels(items) -> Tuple[Kernel, ...]:
    return tuple(Kernel.from_json(j) for j in items)


def _instruction(j: Mapping) -> InstructionProgram:
    partitions = tuple(
        Partition(type=p["type"], direction=p["direction"], nanobatch=int(p["nanobatch"]),
                  compute=_kernels(p["compute"]), slots=dict(p["slots"]),
                  collective=Kernel.from_json(p["collective"]) if p["collective"] else None)
        for p in j["partitions"])
    return InstructionProgram(kind=j["kind"], before_block=_kernels(j["before_block"]),
                              sequential=_kernels(j["sequential"]), partitions=partitions,
                              after_block=_kernels(j["after_block"]))


class Program:
    """The partitions document of one workload: its recorded workload, the partition types
    and every unit's program."""

    def __init__(self, document: Mapping):
        if "program" not in document:
            raise errors.PlanMismatch("the partitions document has no program (call "
                                      "kareus.partitions(..., program=True))")
        self.document = document
        self.workload: Mapping = document["workload"]
        self.nanobatching: bool = bool(document["nanobatching"])
        self.types: Dict[str, PartitionTypeInfo] = {}
        for stage in document["stages"]:
            for instruction in stage["instructions"]:
                for p in instruction["partitions"]:
                    self.types.setdefault(p["type"], PartitionTypeInfo(
                        name=p["type"], direction=p["direction"], tunable=bool(p["tunable"]),
                        launch_slots=tuple(p["slots"]), sm_choices=tuple(p["sm_choices"]),
                        collective=p["collective"]["type"],
                        group_size=int(p["collective"]["group_size"])))
        self.units: List[UnitProgram] = [
            UnitProgram(stage=int(u["stage"]), chunk=int(u["chunk"]), layers=int(u["layers"]),
                        first_layer=int(u["first_layer"]), forward=_instruction(u["forward"]),
                        backward=_instruction(u["backward"]))
            for u in document["program"]]

    @classmethod
    def of_workload(cls, workload) -> "Program":
        """From a workload file's path or its mapping (dict)."""
        return cls(kareus.partitions(workload, program=True))

    @classmethod
    def of_plan(cls, plan_path) -> "Program":
        """From the workload a plan.json records."""
        return cls(kareus.partitions(plan=plan_path, program=True))

    @property
    def parallelism(self) -> Mapping:
        return self.workload["parallelism"]

    @property
    def num_stages(self) -> int:
        return int(self.parallelism["pp"])

    @property
    def num_chunks(self) -> int:
        return len(self.units) // self.num_stages

    def unit(self, stage: int, chunk: int = 0) -> UnitProgram:
        return self.units[stage * self.num_chunks + chunk]

    def kernel_names(self) -> set:
        """Every kernel name the program runs (what the executor must implement)."""
        names = set()
        for unit in self.units:
            for ins in (unit.forward, unit.backward):
                for k in ins.before_block + ins.sequential + ins.after_block:
                    names.add(k.name)
                for p in ins.partitions:
                    names.update(k.name for k in p.compute)
                    if p.collective:
                        names.add(p.collective.name)
        return names

    def config(self, instruction: Optional[Mapping]) -> InstructionConfig:
        """The configuration of a plan instruction (a plan.json instruction, or
        kareus.PlanExecutor.current): its mode, and per partition type the plan's SMs and slot;
        a tuned type the plan leaves out runs on the library default at its first launch
        slot, a fixed (trailing) type on its fixed knobs, as the planner's emulator runs them.
        """
        if instruction is None or instruction.get("mode", "sequential") == "sequential":
            return SEQUENTIAL
        if not self.nanobatching:
            raise errors.PlanMismatch(
                f"the plan runs {instruction['kind']} microbatch {instruction['microbatch']} "
                f"nanobatched, but the job's workload cannot be nanobatched "
                f"(microbatch_size < 2 or no collective inside a layer)")
        given = {p["type"]: p for p in instruction.get("partitions", [])}
        choices = {}
        for name, info in self.types.items():
            if not info.tunable:
                choices[name] = CommChoice(sms=info.sm_choices[0], slot=info.launch_slots[0])
            elif name in given:
                choices[name] = CommChoice(sms=int(given[name]["sms"]), slot=given[name]["slot"])
            else:
                choices[name] = CommChoice(sms=None, slot=info.launch_slots[0])
        for name in given:
            if name not in self.types:
                raise errors.PlanMismatch(
                    f"the plan's {instruction['kind']} of microbatch {instruction['microbatch']} "
                    f"names partition type {name!r}, which the job's model does not have "
                    f"(its types: {', '.join(sorted(self.types))})")
        return InstructionConfig(mode="nanobatched", choices=choices)

    def check_plan(self, plan: Mapping, stage: Optional[int] = None) -> None:
        """Refuses a plan whose partition types or slots the model does not have (for every
        stage, or one), naming both sides. The pipeline shape is checked by PlanExecutor."""
        for planned in plan["stages"]:
            if stage is not None and planned["stage"] != stage:
                continue
            for instruction in planned["instructions"]:
                config = self.config(instruction)
                if not config.nanobatched:
                    continue
                kind = instruction["kind"]
                unit = self.unit(planned["stage"], instruction.get("chunk", 0))
                for p in unit.instruction(kind).partitions:
                    if p.collective is None:
                        continue
                    choice = config.choices[p.type]
                    if choice.slot not in p.slots:
                        raise errors.PlanMismatch(
                            f"the plan launches {p.type}'s collective at slot {choice.slot!r} "
                            f"(stage {planned['stage']}, {kind} microbatch "
                            f"{instruction['microbatch']}), which the job's {p.type} partitions "
                            f"do not have (slots: {', '.join(p.slots)})")


def sm_counts(plans: Sequence[Mapping], program: Program) -> Dict[str, set]:
    """Every SM count the plans give a collective, per group kind ("tp", "cp", "dp"):
    the communicators a job creates at start (one per distinct count)."""
    counts: Dict[str, set] = {"tp": set(), "cp": set(), "dp": set()}
    for plan in plans:
        for stage in plan["stages"]:
            for instruction in stage["instructions"]:
                config = program.config(instruction)
                for name, choice in config.choices.items():
                    if choice.sms is not None:
                        counts[group_kind(program.types[name].collective)].add(choice.sms)
                sync = instruction.get("gradient_sync")
                if sync:
                    counts["dp"].add(int(sync["sms"]))
            if stage.get("gradient_sync"):
                counts["dp"].add(int(stage["gradient_sync"]["sms"]))
    return counts


def group_kind(collective: str) -> str:
    """The process group a collective type of the program runs on: all-reduces (inside a layer
    and around the embedding, output layer and loss) are tensor parallel, the K/V all-gathers
    and reduce-scatters context parallel."""
    return "tp" if collective == "all_reduce" else "cp"
