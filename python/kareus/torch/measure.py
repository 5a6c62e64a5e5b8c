# SPDX-License-Identifier: Apache-2.0
"""The torch measurement backend's worker: `python -m kareus.torch.measure`, driven by
`kareus profile|run|evaluate --backend torch` over its standard input and output.

It measures what kareus.torch runs: a partition is one occurrence of the executor's own program
(the other nanobatch's collective launched at the slot on a communicator with the SM count,
joined at the partition's end), replayed from a snapshot taken while the executor ran the
layer; an instruction is the executor's forward or backward of a stage; the fixed work is the
part of an instruction outside the collective-carrying partitions; a gradient reduction is the
data-parallel all-reduce of the stage's gradient buckets. Weights are random, shapes the
workload's. Each batch runs on as many ranks as it needs (one process per GPU; gloo on a CPU),
started for the batch. Time: CUDA events on a GPU, the host clock on a CPU (the CPU kernels'
wall time); energy: the runtime's NVML energy windows (kareus.EnergyMonitor; the fake NVML in
tests). Clocks are locked through the runtime's FrequencyController only when the request says
clock control is allowed.

Protocol kareus.measure/1, one JSON object per line. The first line in is the hello:
  {"protocol": "kareus.measure/1", "workload": <a plan's workload record>, "virtual_stages": V,
   "options": {"device": "auto"|"cpu"|"cuda", "allow_clock_control": bool, "warmup_runs": N,
               "window_s": S, "min_energy_window_s": S, "min_runs": N, "max_runs": N,
               "threads": N, "seed": N, "default_mhz": MHz}}
answered by {"protocol": ..., "ready": true, "description": "...", "device": "cpu"} or
{"error": "..."}. Then requests, each answered by one line per configuration, in order, then a
done line (or an error line, after which the request is over):
  {"id": I, "kind": "partition", "type": T, "configurations": [{"freq_mhz", "sms", "slot"}]}
  {"id": I, "kind": "instruction", "configurations": [{"stage", "chunk", "direction",
      "freq_mhz", "mode", "partitions": {T: {"sms", "slot"}}}]}
  {"id": I, "kind": "fixed_work", "configurations": [{"stage", "chunk", "direction", "freq_mhz"}]}
  {"id": I, "kind": "reduction", "configurations": [{"stage", "freq_mhz", "sms", "bytes": [...],
      "element_bytes": 4|2}]}
  -> {"id": I, "index": k, "time_s", "energy_j" (per GPU), "seconds", "gpus", "realized_mhz",
      "runs"} ... {"id": I, "done": true, "overhead_s": S}  |  {"id": I, "error": "..."}
An empty line or end of input ends the worker.
"""
import contextlib
import ctypes
import datetime
import json
import math
import os
import queue as queue_module
import signal
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import kareus

from .comm import Groups, ParallelLayout, free_port
from .executor import StageExecutor
from .model import ModelShape, stage_weights
from .kernels import Piece
from .program import SEQUENTIAL, CommChoice, InstructionConfig, Program, group_kind

PROTOCOL = "kareus.measure/1"
RANK_TIMEOUT_S = 600.0  # a rank that says nothing for this long has hung


class RequestError(Exception):
    """A request the worker cannot measure, with a message for the planner."""


def _die_with_parent() -> None:
    """Linux: this process gets SIGKILL when its parent dies (a killed kareus, a killed
    worker), so no rank outlives the measurement it was started for."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# -- the session: the workload and what every rank builds from it -------------------------------

class Session:
    def __init__(self, hello):
        if hello.get("protocol") != PROTOCOL:
            raise RequestError(f"protocol {hello.get('protocol')!r}: this worker speaks {PROTOCOL}")
        self.hello = hello
        self.options = dict(hello.get("options", {}))
        self.record = hello["workload"]
        self.virtual_stages = int(hello.get("virtual_stages", 1))
        self.program = Program(kareus.partitions(record=self.record,
                                                 virtual_stages=self.virtual_stages, program=True))
        self.shape = ModelShape.from_workload(self.program.workload)
        device = self.options.get("device", "auto")
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise RequestError("device cuda: this PyTorch sees no CUDA device")
        self.device = device
        self.backend = "nccl" if device == "cuda" else "gloo"
        self.seed = int(self.options.get("seed", 1))
        self._bench_program = None

    @property
    def bench_program(self) -> Program:
        """The program of the same layer as one stage of two layers: every partition type has a
        steady-state occurrence there (the executor's own kernels, inputs and slots)."""
        if self._bench_program is None:
            record = json.loads(json.dumps(self.record))
            record["model"]["layers"] = 2
            record["parallelism"].update(pp=1, dp=1, layers_per_stage=[2])
            self._bench_program = Program(kareus.partitions(record=record, program=True))
        return self._bench_program

    def description(self) -> str:
        library = os.environ.get("KAREUS_NVML_LIBRARY") or "libnvidia-ml.so.1"
        timing = ("CUDA events" if self.device == "cuda"
                  else "host wall time of the CPU kernels (not a GPU result)")
        return (f"PyTorch {torch.__version__} on {self.device} ({self.backend}), kareus.torch's "
                f"kernels and communicators; time: {timing}; energy: NVML energy windows "
                f"({os.path.basename(library)})")

    def ranks(self, kind: str) -> ParallelLayout:
        s = self.shape
        if kind == "reduction":
            return ParallelLayout(cp=s.cp, dp=s.dp)
        return ParallelLayout(tp=s.tp, cp=s.cp)


# -- what one rank measures ---------------------------------------------------------------------

class _Timer:
    def __init__(self, cuda: bool):
        self.cuda = cuda

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def now(self) -> float:
        self.sync()
        return time.perf_counter()


class _Bench:
    """configure(c) for each configuration, prepare() before each run (not timed), run() the
    timed work, part(elapsed_s) the share of a run that is the measured work (the fixed work is
    part of an instruction)."""

    def prepare(self):
        pass

    def run(self):
        raise NotImplementedError

    def part(self, elapsed_s: float) -> float:
        return elapsed_s


def _random_weights(session, program, stage, groups):
    shape = ModelShape.from_workload(program.workload)
    device = torch.device("cuda", torch.cuda.current_device()) if session.device == "cuda" else None
    dtype = torch.bfloat16 if session.device == "cuda" else torch.float32
    return shape, stage_weights(shape, stage, groups.tp_rank, seed=session.seed, device=device,
                                dtype=dtype)


def _inputs(session, shape, device):
    g = torch.Generator().manual_seed(session.seed + 7)
    b, n = shape.microbatch_size, shape.seq_local
    tokens = torch.randint(0, shape.vocab, (b, n), generator=g).to(device)
    targets = torch.randint(0, shape.vocab, (b, n), generator=g).to(device)
    return tokens, targets


def _config(program, kind, mode, partitions):
    return program.config({"kind": kind, "microbatch": 0, "mode": mode,
                           "partitions": [{"type": t, "sms": k["sms"], "slot": k["slot"]}
                                          for t, k in (partitions or {}).items()]})


class _StageRun:
    """A stage of the program on this rank, with inputs, running its forward or backward."""

    def __init__(self, session, program, stage, groups, timing=False):
        self.shape, self.weights = _random_weights(session, program, stage, groups)
        self.executor = StageExecutor(program, self.shape, self.weights, groups, stage=stage,
                                      timing=timing)
        params = list(self.weights.parameters())
        self.device, self.dtype = params[0].device, params[0].dtype
        self.tokens, self.targets = _inputs(session, self.shape, self.device)
        shape = (self.shape.microbatch_size, self.shape.seq_local, self.shape.hidden)
        g = torch.Generator().manual_seed(session.seed + 11)
        self.activation = (torch.randn(shape, generator=g) * 0.1).to(self.device, self.dtype)
        self.grad = (torch.randn(shape, generator=g) * 0.01).to(self.device, self.dtype)

    def forward(self, config):
        e = self.executor
        x = self.tokens if e.first else self.activation.detach().requires_grad_()
        with e.instruction("forward", 0, 0, config) as applied:
            out = e(x, self.targets if e.last else None)
        return out, applied

    def backward(self, out, config):
        e = self.executor
        with e.instruction("backward", 0, 0, config) as applied:
            torch.autograd.backward(out / self.shape.microbatches if e.last else out,
                                    None if e.last else self.grad)
        for p in self.weights.parameters():
            p.grad = None
        return applied


class PartitionBench(_Bench):
    """One steady-state occurrence of a partition type, replayed from a snapshot of the
    executor's state right before it ran."""

    def __init__(self, session, type_name, groups):
        program = session.bench_program  # main() checked that the type is one of its types
        self.info = program.types[type_name]
        self.stage = _StageRun(session, program, 0, groups)
        self.type = type_name
        kind = self.info.direction
        unit = program.unit(0)
        steady = max(len(p.compute) for p in unit.instruction(kind).partitions if p.type == type_name)
        snapshot = {}

        def capture(p, pieces, config):
            if snapshot or p.type != type_name or p.collective is None or len(p.compute) != steady:
                return
            snapshot["p"] = p
            snapshot["pieces"] = [(pc.index, pc.rows, dict(pc.t)) for pc in pieces]
            # The other nanobatch's tensors as they are now: its collective changes them in place.
            other = 1 - p.nanobatch
            snapshot["pieces"][other] = (pieces[other].index, pieces[other].rows,
                                         {k: _clone(v) for k, v in pieces[other].t.items()})
            snapshot["saved"] = self.stage.executor.kc.saved.copy()
            snapshot["saving"] = self.stage.executor.kc.saving
        e = self.stage.executor
        e.before_partition = capture
        e.kc.retain_graphs = True  # the replays run the snapshot's attention backward again
        default = _config(program, kind, "nanobatched", None)
        out, _ = self.stage.forward(default)
        if kind == "backward":
            self.stage.backward(out, default)
        e.before_partition = None
        if not snapshot:
            raise RequestError(f"partition {type_name!r}: no occurrence with a collective in the "
                               f"executor's program")
        self.snapshot = snapshot
        self.config = default

    def configure(self, c):
        choices = dict(self.config.choices)
        choices[self.type] = CommChoice(sms=int(c["sms"]), slot=c["slot"])
        if c["slot"] not in self.snapshot["p"].slots:
            raise RequestError(f"partition {self.type}: slot {c['slot']!r} is not one of its "
                               f"slots ({', '.join(self.snapshot['p'].slots)})")
        self.config = InstructionConfig("nanobatched", choices)

    def prepare(self):
        pieces = []
        for index, rows, tensors in self.snapshot["pieces"]:
            pc = Piece(index, rows)
            pc.t = {k: _clone(v) for k, v in tensors.items()} if index != self.snapshot["p"].nanobatch \
                else dict(tensors)
            pieces.append(pc)
        self.pieces, self.saved = pieces, self.snapshot["saved"].copy()

    def run(self):
        e = self.stage.executor
        e.kc.saving = self.snapshot["saving"]
        with e.instruction(self.info.direction, 0, 0, self.config):
            e.replay_partition(self.snapshot["p"], self.pieces, self.config, self.saved)
        e.applied.clear()


def _clone(v):
    if isinstance(v, torch.Tensor):
        return v.clone()
    if isinstance(v, tuple):
        return tuple(_clone(x) for x in v)
    return v


class InstructionBench(_Bench):
    """A forward or backward instruction of a stage, as the executor runs it (a backward after an
    untimed forward in the same mode, as a plan's microbatch runs)."""

    def __init__(self, session, stage, groups, timing=False):
        self.session = session
        self.stage = _StageRun(session, session.program, stage, groups, timing=timing)
        self.out = None

    def configure(self, c):
        self.kind = c["direction"]
        self.config = _config(self.session.program, self.kind, c.get("mode", "sequential"),
                              c.get("partitions"))
        self.forward_config = (_config(self.session.program, "forward", "nanobatched", None)
                               if self.config.nanobatched else SEQUENTIAL)

    def prepare(self):
        if self.kind == "backward":
            self.out, _ = self.stage.forward(self.forward_config)

    def run(self):
        if self.kind == "forward":
            out, self.applied = self.stage.forward(self.config)
            del out
        else:
            self.applied = self.stage.backward(self.out, self.config)
            self.out = None
        self.stage.executor.applied.clear()


class FixedWorkBench(InstructionBench):
    """The fixed work of an instruction (workload::FixedWorkOps): the kernels outside the block and
    the partitions that carry no collective, timed inside the executor's nanobatched instruction
    (sequential where the workload has no partitions: then all of the block is the layers')."""

    def __init__(self, session, stage, groups):
        super().__init__(session, stage, groups, timing=True)
        self.unit = session.program.unit(stage)

    def configure(self, c):
        mode = "nanobatched" if self.session.program.nanobatching else "sequential"
        super().configure(dict(c, mode=mode, partitions=None))
        partitions = self.unit.instruction(self.kind).partitions
        self.without = [i for i, p in enumerate(partitions) if p.collective is None]

    def part(self, elapsed_s):
        a = self.applied
        fixed = a.outside_block_s + sum(a.partition_times[i][2] for i in self.without)
        return min(fixed, elapsed_s)


class ReductionBench(_Bench):
    """The data-parallel gradient reduction of buckets: each bucket all-reduced over the DP x CP
    replicas on the communicator with the request's SMs, launched one after another and
    joined at the end (Megatron-Core's buckets on the communication stream)."""

    def __init__(self, session, groups):
        self.session, self.groups = session, groups
        self.device = torch.device("cuda", torch.cuda.current_device()) if session.device == "cuda" else None

    def configure(self, c):
        dtype = torch.bfloat16 if int(c.get("element_bytes", 4)) == 2 and self.session.device == "cuda" \
            else torch.float32
        size = torch.tensor([], dtype=dtype).element_size()
        self.buffers = [torch.ones(max(1, int(b) // size), dtype=dtype, device=self.device)
                        for b in c["bytes"]]
        self.group = self.groups.group("dp", int(c["sms"]))

    def run(self):
        works = [dist.all_reduce(b, group=self.group, async_op=True) for b in self.buffers]
        for w in works:
            w.wait()


# -- one rank ------------------------------------------------------------------------------------

def _sm_counts(kind, configurations, session):
    counts = {"tp": set(), "cp": set(), "dp": set()}
    for c in configurations:
        if kind == "reduction":
            counts["dp"].add(int(c["sms"]))
        elif kind == "partition":
            counts[group_kind(session.bench_program.types[c["_type"]].collective)].add(int(c["sms"]))
        elif kind == "instruction":
            for t, k in (c.get("partitions") or {}).items():
                info = session.program.types.get(t)
                if info is not None:
                    counts[group_kind(info.collective)].add(int(k["sms"]))
    # The trailing types' fixed knobs.
    for info in session.program.types.values():
        if not info.tunable:
            counts[group_kind(info.collective)].add(info.sm_choices[0])
    return counts


def _measure(bench, timer, monitor, options, freq_mhz):
    """Warm-up, calibration (every rank agrees on the number of runs: collectives run in each),
    then the timed runs inside one energy window. Returns this rank's reading."""
    started = time.perf_counter()
    for _ in range(int(options.get("warmup_runs", 2))):
        bench.prepare()
        bench.run()
    bench.prepare()
    dist.barrier()
    t0 = timer.now()
    bench.run()
    one = timer.now() - t0
    # At least window_s of timed work, and an energy window of at least min_energy_window_s (20
    # periods of the runtime's 10 ms power poller where there is no energy counter).
    window_s = max(float(options.get("window_s", 0.1)), float(options.get("min_energy_window_s", 0.2)))
    runs = max(int(options.get("min_runs", 3)), math.ceil(window_s / max(one, 1e-6)))
    runs = torch.tensor([min(runs, int(options.get("max_runs", 100000)))])
    dist.all_reduce(runs, op=dist.ReduceOp.MAX)
    runs = int(runs.item())
    timed = measured = 0.0
    monitor.begin_window("measurement")
    window_started = timer.now()
    for _ in range(runs):
        bench.prepare()
        dist.barrier()  # the ranks start each run together, as they do inside a step
        t0 = timer.now()
        bench.run()
        elapsed = timer.now() - t0
        timed += elapsed
        measured += bench.part(elapsed)
    window = monitor.end_window("measurement")
    window_time = window.time if window.time > 0 else max(timer.now() - window_started, 1e-9)
    # The window also covers the untimed preparation between runs: its energy is shared out by
    # time (the measured work's share of the window).
    energy = window.total_energy * (measured / window_time) / runs
    return {"time_s": measured / runs, "energy_j": energy, "runs": runs,
            "seconds": time.perf_counter() - started, "realized_mhz": freq_mhz}


def _rank_main(rank, world, port, hello, kind, configurations, results):
    _die_with_parent()
    try:
        session = Session(hello)
        options = session.options
        torch.set_num_threads(int(options.get("threads", 1)))
        if session.device == "cuda":
            torch.cuda.set_device(rank)
        dist.init_process_group(session.backend, rank=rank, world_size=world,
                                init_method=f"tcp://127.0.0.1:{port}",
                                timeout=datetime.timedelta(seconds=RANK_TIMEOUT_S))
        started = time.perf_counter()
        layout = session.ranks(kind)
        counts = _sm_counts(kind, configurations, session)
        groups = Groups(layout, {k: sorted(v) for k, v in counts.items()})
        gpu = kareus.nvml_index_for_cuda_device(rank)
        monitor = kareus.EnergyMonitor(gpu_indices=[gpu])
        controller = kareus.FrequencyController(gpu=gpu) if options.get("allow_clock_control") else None
        timer = _Timer(session.device == "cuda")
        bench, bench_key = None, None
        default_mhz = int(options.get("default_mhz", 0))
        try:
            for index, c in enumerate(configurations):
                if kind == "partition":
                    key = c["_type"]
                    if bench_key != key:
                        bench, bench_key = PartitionBench(session, key, groups), key
                elif kind == "reduction":
                    bench = bench or ReductionBench(session, groups)
                else:
                    key = (int(c.get("stage", 0)), int(c.get("chunk", 0)))
                    if c.get("chunk", 0):
                        raise RequestError("model chunks (interleaved 1F1B) are not run by kareus.torch")
                    if bench_key != key:
                        bench_type = FixedWorkBench if kind == "fixed_work" else InstructionBench
                        bench, bench_key = bench_type(session, key[0], groups), key
                if index == 0:
                    results.put(("overhead", rank, time.perf_counter() - started))
                bench.configure(c)
                freq = int(c.get("freq_mhz", 0)) or default_mhz
                if controller is not None:
                    controller.request_clock(freq)
                    controller.wait_idle()
                results.put(("reading", index, rank, _measure(bench, timer, monitor, options, freq)))
        finally:
            if controller is not None:
                controller.reset_clocks()
        results.put(("done", rank))
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as error:  # every failure goes to the launcher, which names it
        message = str(error) if isinstance(error, (RequestError, ValueError, OSError)) else \
            f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
        try:
            results.put(("error", rank, message))
            results.close()
            results.join_thread()  # the message is written before the process ends
        except Exception:
            pass
        os._exit(1)


def _aggregate(readings, gpus):
    """Per GPU as the published harness aggregates (time: max over the ranks, energy: mean)."""
    return {"time_s": max(r["time_s"] for r in readings),
            "energy_j": sum(r["energy_j"] for r in readings) / len(readings),
            "seconds": max(r["seconds"] for r in readings), "gpus": gpus,
            "realized_mhz": readings[0]["realized_mhz"], "runs": readings[0]["runs"]}


def run_batch(session, kind, configurations, reply):
    """Starts the batch's ranks, replies per configuration as every rank has read it."""
    layout = session.ranks(kind)
    world = layout.world_size
    context = mp.get_context("spawn" if session.device == "cuda" else "fork")
    results = context.Queue()
    port = free_port()
    ranks = [context.Process(target=_rank_main,
                             args=(r, world, port, session.hello, kind, configurations, results),
                             daemon=True)
             for r in range(world)]
    for process in ranks:
        process.start()
    readings = {}
    overhead = 0.0
    done = set()
    parent = os.getppid()
    try:
        next_index = 0
        while len(done) < world:
            try:
                message = results.get(timeout=1.0)
            except queue_module.Empty:
                if os.getppid() != parent:  # kareus is gone: nobody reads the replies
                    raise SystemExit(1)
                dead = [r for r, p in enumerate(ranks) if p.exitcode not in (None, 0)]
                if dead:
                    raise RequestError(f"rank {dead[0]} of the batch exited (code "
                                       f"{ranks[dead[0]].exitcode}) without a message")
                continue
            if message[0] == "error":
                raise RequestError(f"rank {message[1]}: {message[2]}")
            if message[0] == "overhead":
                overhead = max(overhead, message[2])
            elif message[0] == "reading":
                _, index, rank, reading = message
                readings.setdefault(index, []).append(reading)
                while len(readings.get(next_index, [])) == world:
                    reply(next_index, _aggregate(readings.pop(next_index), world))
                    next_index += 1
            elif message[0] == "done":
                done.add(message[1])
        return overhead
    finally:
        for process in ranks:
            process.join(timeout=30 if not done else 60)
            if process.is_alive():
                process.kill()
                process.join()


def main() -> int:
    # Replies go to the real standard output; anything a library prints goes to stderr.
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def send(obj):
        replies.write(json.dumps(obj, separators=(",", ":")) + "\n")
        replies.flush()

    line = sys.stdin.readline()
    if not line.strip():
        return 0
    try:
        session = Session(json.loads(line))
        kareus.EnergyMonitor(gpu_indices=[0])  # an energy source must be there
    except KeyError as error:
        send({"protocol": PROTOCOL, "error": f"the hello has no field {error}"})
        return 2
    except (RequestError, ValueError, OSError) as error:
        send({"protocol": PROTOCOL, "error": str(error)})
        return 2
    send({"protocol": PROTOCOL, "ready": True, "description": session.description(),
          "device": session.device})
    for line in sys.stdin:
        if not line.strip():
            break
        request_id = None
        try:
            request = json.loads(line)
            request_id = request["id"]
            kind = request["kind"]
            if kind not in ("partition", "instruction", "fixed_work", "reduction"):
                raise RequestError(f"kind {kind!r}: not a measurement kind")
            configurations = list(request["configurations"])
            if kind == "partition":
                if request["type"] not in session.bench_program.types:
                    raise RequestError(
                        f"partition {request['type']!r}: not a partition type of the workload "
                        f"(its types: {', '.join(sorted(session.bench_program.types))})")
                configurations = [dict(c, _type=request["type"]) for c in configurations]
            overhead = run_batch(session, kind, configurations,
                                 lambda index, reading: send(dict(reading, id=request_id, index=index)))
            send({"id": request_id, "done": True, "overhead_s": overhead})
        except (RequestError, ValueError, KeyError, TypeError) as error:
            send({"id": request_id, "error": str(error)})
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt, BrokenPipeError):
        sys.exit(main())
