#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Pipeline-parallel training of a small transformer, driven by a Kareus plan.

Each pipeline stage is one process (gloo, CPU tensors); the stages run Megatron's
non-interleaved 1F1B schedule with torch.distributed send/recv, and Kareus's runtime wraps every
forward and backward instruction: it checks the schedule against the plan, sets the GPU clock
the plan chose for the instruction, serves the collectives' knobs to the model, measures each
iteration's energy, and switches to another frontier plan at a step boundary when a straggler
is reported. Every line that Kareus adds to the loop is marked ``# Kareus``.

    kareus run examples/pytorch/workload.yaml --out run --unit-time 0.002
    /usr/bin/python3 examples/pytorch/train.py --plan run/plan.json      # starts 2 stages
    torchrun --standalone --nproc_per_node 2 --redirects 1 --tee 1 \
        examples/pytorch/train.py --plan run/plan.json

See README.md next to this file.
"""
import argparse
import importlib
import json
import math
import os
import pathlib
import signal
import socket
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as missing:
    sys.exit(f"train.py: {missing}: run it with an interpreter that has PyTorch (on Debian: "
             f"/usr/bin/python3 with python3-torch installed)")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from model import ModelConfig, NoComm, Stage  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", help="plan.json from `kareus run` (without it: no Kareus)")
    parser.add_argument("--frontier", help="folder with frontier.json and plans/ for straggler "
                        "mode (default: the plan's folder)")
    parser.add_argument("--straggler-file", help="a straggler detector writes "
                        '{"target_time_s": T} here; the job switches to the lowest-energy '
                        "frontier plan whose iteration time fits T, at the next step")
    parser.add_argument("--stages", type=int, default=2,
                        help="pipeline stages = processes when not under torchrun (default 2)")
    parser.add_argument("--microbatches", type=int, default=4,
                        help="microbatches per iteration (the workload's `microbatches`)")
    parser.add_argument("--microbatch-size", type=int, default=2,
                        help="sequences per microbatch (the workload's `microbatch_size`)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus", default=str(HERE / "corpus.txt"))
    parser.add_argument("--report", help="folder for one JSON-lines record file per rank")
    parser.add_argument("--exact-clocks", action="store_true",
                        help="apply every clock change in order (no coalescing of a late "
                        "setter; for tracing and tests)")
    return parser.parse_args(argv)


def one_f_one_b(stages, stage, microbatches):
    """The job's own schedule (Megatron's non-interleaved 1F1B): warm-up forwards, then one
    forward and one backward each, then the cool-down backwards."""
    warmup = min(stages - stage - 1, microbatches)
    order = [("forward", m) for m in range(warmup)]
    for m in range(microbatches - warmup):
        order += [("forward", warmup + m), ("backward", m)]
    return order + [("backward", m) for m in range(microbatches - warmup, microbatches)]


class PlanComm:
    """What a tensor-parallel job does where it launches a collective: read the running
    instruction's knobs for the partition that starts there and configure the collective
    (e.g. the NCCL communicator's CTA count and the compute op it launches with). There is no
    collective on one CPU process per stage, so the knobs are recorded and logged."""

    def __init__(self, executor):
        self.executor, self.log = executor, None
        self.seen = {}  # this instruction's partition type -> knobs served

    def start(self, log):
        """A new instruction began; `log` (or None) shows its clock and knobs."""
        self.seen, self.log = {}, log
        if log:
            i = self.executor.current
            log(f"{i['kind']} microbatch {i['microbatch']}: {i['freq_mhz']} MHz, {i['mode']}")

    def partition_begins(self, partition_type):
        knobs = self.executor.knobs(partition_type)  # Kareus: (sms, slot) or None
        if partition_type not in self.seen:
            self.seen[partition_type] = list(knobs) if knobs else None
            if knobs and self.log:
                self.log(f"  {partition_type}: collective on {knobs[0]} SMs, "
                         f"launched with {knobs[1]}")


class Reporter:
    """--report DIR: one JSON line per event (start, step, swap, error, end) in rank<r>.jsonl."""

    def __init__(self, folder, rank):
        self.file = None
        if folder:
            pathlib.Path(folder).mkdir(parents=True, exist_ok=True)
            self.file = open(pathlib.Path(folder) / f"rank{rank}.jsonl", "a", buffering=1)

    def __call__(self, **record):
        if self.file:
            self.file.write(json.dumps(record) + "\n")


def batches(tokens, step, microbatches, size, length, seed):
    """The same random windows of the text on every rank: [microbatches, size, length + 1]."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, len(tokens) - length - 1, (microbatches, size), generator=generator)
    return torch.stack([torch.stack([tokens[s:s + length + 1] for s in row]) for row in starts])


def read_straggler_report(path):
    """The target iteration time a straggler detector asked for, or NaN; consumes the file
    (write it atomically: a temporary file, then rename; an empty file is left for later)."""
    try:
        text = pathlib.Path(path).read_text()
    except FileNotFoundError:
        return math.nan
    if not text.strip():
        return math.nan
    os.remove(path)
    try:
        target = float(json.loads(text)["target_time_s"])
        if not target > 0:
            raise ValueError
        return target
    except (ValueError, KeyError, TypeError):
        print(f"straggler file {path}: expected {{\"target_time_s\": seconds > 0}}, got "
              f"{text.strip()!r}; ignored", file=sys.stderr, flush=True)
        return math.nan


def worker(rank, world, args):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    first, last = rank == 0, rank == world - 1
    prefix = f"[stage {rank}]"

    def log(text):  # one write per line: the stages share the terminal
        sys.stdout.write(f"{prefix} {text}\n")
        sys.stdout.flush()

    report = Reporter(args.report, rank)
    report(event="start", rank=rank, pid=os.getpid(), plan=args.plan)
    cfg = ModelConfig()
    model = Stage(cfg, rank, world, seed=args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    tokens = torch.tensor(list(pathlib.Path(args.corpus).read_bytes()), dtype=torch.long)
    M = args.microbatches
    order = one_f_one_b(world, rank, M)

    # Kareus: this rank's GPU clock, its stage of the plan, an energy monitor.
    controller = executor = monitor = None
    failure = None
    if args.plan:
        import kareus
        try:
            gpu = kareus.nvml_index_for_cuda_device(
                int(os.environ.get("LOCAL_RANK", rank)))  # CUDA ordinal -> NVML index
            controller = kareus.FrequencyController(gpu=gpu, coalesce=not args.exact_clocks)
            executor = kareus.PlanExecutor(args.plan, stage=rank, controller=controller,
                                           num_stages=world, num_microbatches=M,
                                           schedule="1f1b")
            monitor = kareus.EnergyMonitor(gpu_indices=[gpu])
            log(f"plan {args.plan} ({executor.method}): stage {rank} of "
                f"{executor.num_stages}, {executor.num_microbatches} microbatches, GPU {gpu}"
                + (", measure-only (no clock privilege)" if controller.measure_only else ""))
        except (kareus.InputError, kareus.EnvironmentError) as error:
            failure = error
    # Every rank leaves before the first step when one of them cannot apply the plan.
    ok = torch.tensor([0 if failure else 1])
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if failure or not ok.item():
        message = str(failure) if failure else "another stage could not apply the plan"
        print(f"{prefix} error: {message}; no step was run", file=sys.stderr, flush=True)
        report(event="error", rank=rank, message=message)
        dist.barrier()  # every stage has said why before the launcher stops the others
        dist.destroy_process_group()
        sys.exit(2 if failure is None or isinstance(failure, ValueError) else 1)

    frontier = args.frontier or (str(pathlib.Path(args.plan).parent) if args.plan else None)
    comm = PlanComm(executor) if executor else NoComm()
    activation_shape = (args.microbatch_size, cfg.sequence_length, cfg.hidden)

    def run_steps():
        plan_in_effect, plan_pending = args.plan, None
        for step in range(args.steps):
            knob_log = log if step == 0 else None
            if executor:
                executor.on_step_begin()  # Kareus: applies a plan switch requested before
                monitor.begin_window("iteration")  # Kareus: this iteration's time and energy
                if plan_pending and not executor.swap_pending:
                    plan_in_effect, plan_pending, knob_log = plan_pending, None, log
                    log(f"step {step}: now on {plan_in_effect}")
            started = time.perf_counter()
            data = batches(tokens, step, M, args.microbatch_size, cfg.sequence_length, args.seed)
            inputs, outputs, losses, sends, served = {}, {}, [], [], []
            for kind, m in order:
                if kind == "forward":
                    if first:
                        x = data[m, :, :-1]
                    else:
                        x = torch.empty(activation_shape)
                        dist.recv(x, src=rank - 1)
                        x.requires_grad_()
                    if executor:
                        executor.on_instruction_begin("forward")  # Kareus: clock, knobs
                        comm.start(knob_log)
                    out = model(x, comm, targets=data[m, :, 1:] if last else None)
                    if executor:
                        executor.on_instruction_end("forward")  # Kareus
                        served.append(dict(executor.current, knobs=comm.seen))
                    inputs[m] = x
                    if last:
                        outputs[m] = out
                        losses.append(out.item())
                    else:
                        outputs[m] = out
                        sends.append((dist.isend(out.detach(), dst=rank + 1), out))
                else:
                    if not last:
                        grad = torch.empty(activation_shape)
                        dist.recv(grad, src=rank + 1)
                    if executor:
                        executor.on_instruction_begin("backward")  # Kareus
                        comm.start(knob_log)
                    if last:
                        (outputs.pop(m) / M).backward()
                    else:
                        outputs.pop(m).backward(grad)
                    if executor:
                        executor.on_instruction_end("backward")  # Kareus
                        served.append(dict(executor.current, knobs=comm.seen))
                    x = inputs.pop(m)
                    if not first:
                        sends.append((dist.isend(x.grad, dst=rank - 1), x.grad))
            if executor:
                executor.on_step_end()  # Kareus: all 2 x M instructions ran
            for handle, _ in sends:
                handle.wait()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            elapsed = time.perf_counter() - started
            energy = monitor.end_window("iteration") if monitor else None  # Kareus

            loss = sum(losses) / len(losses) if losses else None
            record = dict(event="step", rank=rank, step=step, time_s=elapsed, loss=loss,
                          plan=plan_in_effect, instructions=[
                              {k: i[k] for k in ("kind", "microbatch", "freq_mhz", "mode", "knobs")}
                              for i in served])
            if energy is not None:
                record.update(energy_j=energy.total_energy, energy_time_s=energy.time,
                              power_integrated=energy.power_integrated)
            report(**record)
            log(f"step {step}" + (f" loss {loss:.3f}" if loss is not None else "")
                + f" {elapsed * 1e3:.0f} ms"
                + (f" {energy.total_energy:.2f} J" if energy is not None else ""))

            # Kareus straggler mode: stage 0 reads the detector's report; every stage then switches
            # to the same frontier plan, which takes effect at the next step on all of them.
            if executor and args.straggler_file:
                target = torch.tensor([read_straggler_report(args.straggler_file) if first
                                       else math.nan], dtype=torch.float64)
                dist.broadcast(target, src=0)
                if not math.isnan(target.item()):
                    choice = executor.swap_to_frontier(frontier, target.item())
                    chosen = [None] * world
                    dist.all_gather_object(chosen, choice["point_index"])
                    if len(set(chosen)) != 1:
                        raise RuntimeError(f"stages chose different frontier points: {chosen}")
                    plan_pending = choice["plan_path"]
                    report(event="swap", rank=rank, after_step=step, effective_step=step + 1,
                           target_time_s=target.item(), **choice)
                    slow = "" if choice["meets_target"] else ", slower than the target"
                    log(f"straggler: target {target.item() * 1e3:.4g} ms -> frontier point "
                        f"{choice['point_index']} ({choice['time_s'] * 1e3:.4g} ms, "
                        f"{choice['energy_j']:.4g} J{slow}) from step {step + 1}: "
                        f"{plan_pending}")

    try:
        run_steps()
    except (RuntimeError, ValueError) as error:  # a lost stage (gloo), a loop off the plan
        print(f"{prefix} error: {error}; leaving", file=sys.stderr, flush=True)
        report(event="error", rank=rank, message=str(error))
        sys.exit(2 if isinstance(error, ValueError) else 1)
    finally:
        if controller:
            controller.reset_clocks()  # Kareus: default clocks again (also done on any exit)
    report(event="end", rank=rank, steps=args.steps)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    args = parse_args(argv)
    if args.plan:
        try:
            importlib.import_module("kareus")  # before starting the stages: a clear message
        except ImportError as error:
            sys.exit(f"train.py: cannot import the kareus module ({error}): build it "
                     f"(cmake --build build --target kareus_python), add <build>/python to "
                     f"PYTHONPATH and run with the interpreter it was built for "
                     f"(/usr/bin/python3 on Debian)")
    if "LOCAL_RANK" in os.environ:  # under torchrun: one process per stage already
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return 0
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    try:
        # fork: the stages start without importing torch again; the parent has touched no
        # GPU and started no thread (a job that uses CUDA here would take "spawn").
        mp.start_processes(worker, args=(args.stages, args), nprocs=args.stages,
                           start_method="fork")
    except mp.ProcessExitedException as error:
        if error.signal_name:
            print(f"train.py: stage {error.error_index} (pid {error.pid}) was terminated by "
                  f"{error.signal_name}; the other stages were stopped", file=sys.stderr)
            return 128 + signal.Signals[error.signal_name].value
        print(f"train.py: stage {error.error_index} exited with code {error.exit_code}; the "
              f"other stages were stopped", file=sys.stderr)
        return error.exit_code
    except mp.ProcessRaisedException as error:
        print(f"train.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
