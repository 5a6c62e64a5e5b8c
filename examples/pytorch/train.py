#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Tensor- and pipeline-parallel training of a small Llama, executing a Kareus plan.

The job is workload.yaml: 2 pipeline stages x 2 tensor-parallel ranks (4 processes; gloo on a
CPU, NCCL where GPUs are), Megatron's 1F1B schedule over send/recv, 4 microbatches of 2
sequences of 64 byte tokens. kareus.torch runs every instruction as the plan says: sequential,
or split into two nanobatches whose partitions overlap each collective with the other
nanobatch's compute, on a communicator with the plan's SM count, launched at the plan's slot.
The runtime's PlanExecutor checks the schedule against the plan, sets each instruction's GPU
clock, and switches to another frontier plan when a straggler is reported. Lines that Kareus
adds to a training loop are marked ``# Kareus``.

    kareus run examples/pytorch/workload.yaml --out run --unit-time 0.002
    /usr/bin/python3 examples/pytorch/train.py --plan run/plan.json      # starts 4 processes
    torchrun --standalone --nproc_per_node 4 --redirects 1 --tee 1 \\
        examples/pytorch/train.py --plan run/plan.json

See README.md next to this file.
"""
import argparse
import glob
import importlib
import json
import math
import os
import pathlib
import signal
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as missing:
    sys.exit(f"train.py: {missing}: run it with an interpreter that has PyTorch (on Debian: "
             f"/usr/bin/python3 with python3-torch installed)")

HERE = pathlib.Path(__file__).resolve().parent


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", help="plan.json from `kareus run` (without it: every "
                        "instruction sequential, no clocks touched)")
    parser.add_argument("--workload", default=str(HERE / "workload.yaml"),
                        help="the job (model, parallelism, batch); a plan made for another job "
                        "is refused (default: workload.yaml beside this file)")
    parser.add_argument("--frontier", help="folder with frontier.json and plans/ for straggler "
                        "mode (default: the plan's folder)")
    parser.add_argument("--straggler-file", help="a straggler detector writes "
                        '{"target_time_s": T} here; the job switches to the lowest-energy '
                        "frontier plan whose iteration time fits T, at the next step")
    parser.add_argument("--power-budget-file", help="a power manager writes "
                        '{"power_budget_w": W} here (average watts per GPU); the job switches '
                        "to the fastest frontier plan whose power fits, at the next step")
    parser.add_argument("--timetable", help="timetable.json of kareus schedule: every step "
                        "runs the plan (or waits through the pause) it asks for at rank 0's "
                        "clock; the run ends when its iterations are done")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus", default=str(HERE / "corpus.txt"))
    parser.add_argument("--report", help="folder for one JSON-lines record file per rank")
    parser.add_argument("--trace", help="write the executor's events (op_begin/op_end/"
                        "comm_launch/comm_wait) as JSON lines, one file per rank: FILE with "
                        ".rank<R> before its extension")
    parser.add_argument("--exact-clocks", action="store_true",
                        help="apply every clock change in order (no coalescing of a late "
                        "setter; for tracing and tests)")
    return parser.parse_args(argv)


def rank_path(path, rank):
    p = pathlib.Path(path)
    return str(p.with_name(f"{p.stem}.rank{rank}{p.suffix}"))


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


def read_request(path, key, what):
    """The number > 0 under `key` that a detector or a power manager wrote to `path`, or NaN;
    consumes the file (write it atomically: a temporary file, then rename; an empty file is
    left for later)."""
    try:
        text = pathlib.Path(path).read_text()
    except FileNotFoundError:
        return math.nan
    if not text.strip():
        return math.nan
    os.remove(path)
    try:
        value = float(json.loads(text)[key])
        if not value > 0 or math.isinf(value):
            raise ValueError
        return value
    except (ValueError, KeyError, TypeError):
        print(f"{what} file {path}: expected {{\"{key}\": a number > 0}}, got "
              f"{text.strip()!r}; ignored", file=sys.stderr, flush=True)
        return math.nan


def read_straggler_report(path):
    """The target iteration time a straggler detector asked for, or NaN."""
    return read_request(path, "target_time_s", "straggler")


def read_power_budget(path):
    """The average watts per GPU a power manager allows the job, or NaN."""
    return read_request(path, "power_budget_w", "power budget")


def describe(applied):
    """One instruction as it ran: its mode, and each partition's collective SMs and slot."""
    planned = applied.planned or {}
    text = (f"{applied.kind} microbatch {applied.microbatch}: "
            + (f"{planned['freq_mhz']} MHz, " if "freq_mhz" in planned else "") + applied.mode)
    for name, knobs in applied.partitions.items():
        sms = "library default" if knobs["sms"] is None else f"{knobs['sms']} SMs"
        text += f"; {name} {sms} @ {knobs['slot']}"
    return text


def worker(rank, world, args):
    import kareus.torch as kt

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    program = kt.Program.of_workload(args.workload)
    layout = kt.ParallelLayout(**{k: int(program.parallelism.get(k, 1)) for k in ("tp", "cp", "dp", "pp")})
    coords = layout.coordinates(rank)
    stage, tp_rank = coords["pp"], coords["tp"]
    prefix = f"[stage {stage} tp {tp_rank}]"

    def log(text, always=False):  # one write per line: the ranks share the terminal
        if always or tp_rank == 0:
            sys.stdout.write(f"{prefix} {text}\n")
            sys.stdout.flush()

    report = Reporter(args.report, rank)
    report(event="start", rank=rank, stage=stage, tp_rank=tp_rank, pid=os.getpid(), plan=args.plan)
    trace = rank_path(args.trace, rank) if args.trace else None
    frontier = args.frontier or (str(pathlib.Path(args.plan).parent) if args.plan else None)

    def agree(failure):
        """Every rank leaves, before the first step, when one of them cannot go on (they must
        all build the process groups together, or none)."""
        ok = torch.tensor([0 if failure else 1])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        if failure or not ok.item():
            message = str(failure) if failure else "another rank could not apply the plan"
            print(f"{prefix} error: {message}; no step was run", file=sys.stderr, flush=True)
            report(event="error", rank=rank, message=message)
            dist.barrier()  # every rank has said why before the launcher stops the others
            dist.destroy_process_group()
            sys.exit(2 if failure is None or isinstance(failure, ValueError) else 1)

    # Kareus: this rank's GPU clock, its stage of the plan executed by kareus.torch, an energy
    # monitor. A plan for another job (model, parallelism, batch, pipeline) is refused here.
    controller = monitor = job = None
    failure = None
    if args.plan:
        import kareus
        try:
            gpu = kareus.nvml_index_for_cuda_device(
                int(os.environ.get("LOCAL_RANK", rank)))  # CUDA ordinal -> NVML index
            controller = kareus.FrequencyController(gpu=gpu, coalesce=not args.exact_clocks)
            monitor = kareus.EnergyMonitor(gpu_indices=[gpu])
        except (ValueError, OSError) as error:  # kareus.InputError / EnvironmentError
            failure = error
        agree(failure)
    try:
        if args.plan:
            extra = sorted(glob.glob(os.path.join(frontier, "plans", "*.json"))) \
                if args.straggler_file or args.power_budget_file else []
            if args.timetable:
                extra += sorted(glob.glob(os.path.join(os.path.dirname(
                    os.path.abspath(args.timetable)), "plans", "*.json")))
            job = kt.Job.from_plan(args.plan, args.workload, seed=args.seed, controller=controller,
                                   extra_plans=extra, trace=trace)
            log(f"plan {args.plan} ({job.executor.method}): stage {stage} of "
                f"{job.executor.num_stages}, {job.executor.num_microbatches} microbatches, "
                f"TP {layout.tp}, GPU {gpu}"
                + (", measure-only (no clock privilege)" if controller.measure_only else ""))
        else:
            job = kt.Job.without_plan(args.workload, seed=args.seed, trace=trace)
    except (ValueError, OSError) as error:
        failure = error
    agree(failure)

    shape = job.shape
    executor = job.executor
    optimizer = torch.optim.AdamW(job.weights.parameters(), lr=args.lr)
    text = torch.tensor(list(pathlib.Path(args.corpus).read_bytes()), dtype=torch.long)
    M = shape.microbatches

    steps = args.steps
    if executor and args.timetable:
        # Kareus timetable mode: every rank decides from rank 0's clock (broadcast at each
        # decision), so all of them move to the same plan, or pause, at the same step.
        def job_clock():
            now = torch.tensor([time.time()], dtype=torch.float64)
            dist.broadcast(now, src=0)
            return now.item()
        executor.follow_timetable(args.timetable, now=job_clock)
        steps = min(steps, int(math.ceil(json.loads(
            pathlib.Path(args.timetable).read_text())["iterations"])))
        log(f"timetable {args.timetable}: {steps} steps")

    def run_steps():
        plan_in_effect, plan_pending = args.plan, None
        for step in range(steps):
            if monitor:
                monitor.begin_window("iteration")  # Kareus: this iteration's time and energy
            if plan_pending:
                plan_in_effect, plan_pending = plan_pending, None
                log(f"step {step}: now on {plan_in_effect}")
            started = time.perf_counter()
            data = batches(text, step, M, shape.microbatch_size, shape.sequence_length, args.seed)
            # Kareus: every instruction of this stage, executed as the plan says.
            loss, applied = job.train_step(data[..., :-1], data[..., 1:], step)
            if executor and args.timetable:  # Kareus: what the timetable ran this step
                decision = executor.timetable_step
                if decision and decision["message"]:
                    log(f"timetable: {decision['message']}")
                if decision and decision["plan"] and decision["plan"] != plan_in_effect:
                    plan_in_effect = decision["plan"]
                    log(f"step {step}: timetable interval {decision['interval']}: now on "
                        f"{plan_in_effect}")
                    report(event="timetable", rank=rank, step=step, **decision)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            elapsed = time.perf_counter() - started
            energy = monitor.end_window("iteration") if monitor else None  # Kareus
            if step == 0 or (args.plan and plan_in_effect != args.plan and step == switched[0]):
                for a in applied:
                    log("  " + describe(a))
            record = dict(event="step", rank=rank, stage=stage, tp_rank=tp_rank, step=step,
                          time_s=elapsed, loss=loss, plan=plan_in_effect, instructions=[
                              {"kind": a.kind, "microbatch": a.microbatch, "mode": a.mode,
                               "freq_mhz": (a.planned or {}).get("freq_mhz"),
                               "partitions": a.partitions} for a in applied])
            if energy is not None:
                record.update(energy_j=energy.total_energy, energy_time_s=energy.time,
                              power_integrated=energy.power_integrated)
            report(**record)
            log(f"step {step}" + (f" loss {loss:.3f}" if loss is not None else "")
                + f" {elapsed * 1e3:.0f} ms"
                + (f" {energy.total_energy:.2f} J" if energy is not None else ""))

            # Kareus straggler mode and power budget: rank 0 reads the detector's target time or
            # the power manager's budget; every rank then switches to the same frontier plan,
            # which takes effect at the next step on all of them.
            if executor and args.straggler_file:
                target = rank0_value(read_straggler_report, args.straggler_file)
                if not math.isnan(target):
                    choice = executor.swap_to_frontier(frontier, target)
                    slow = "" if choice["meets_target"] else ", slower than the target"
                    plan_pending = switch(
                        step, choice, f"straggler: target {target * 1e3:.4g} ms",
                        f"{choice['time_s'] * 1e3:.4g} ms, {choice['energy_j']:.4g} J{slow}",
                        target_time_s=target)
            if executor and args.power_budget_file:
                budget = rank0_value(read_power_budget, args.power_budget_file)
                if not math.isnan(budget):
                    choice = executor.swap_to_power_budget(frontier, budget)
                    over = "" if choice["fits"] else ", no plan fits: the lowest-power one"
                    plan_pending = switch(
                        step, choice, f"power budget {budget:.4g} W per GPU",
                        f"{choice['power_w_per_gpu']:.4g} W per GPU{over}",
                        power_budget_w=budget)

    def rank0_value(read, path):
        """What rank 0 read from `path` (NaN: nothing asked), on every rank."""
        value = torch.tensor([read(path) if rank == 0 else math.nan], dtype=torch.float64)
        dist.broadcast(value, src=0)
        return value.item()

    def switch(step, choice, asked, chosen_as, **request):
        """Every rank chose the same frontier point (checked); it runs from the next step."""
        chosen = [None] * world
        dist.all_gather_object(chosen, choice["point_index"])
        if len(set(chosen)) != 1:
            raise RuntimeError(f"ranks chose different frontier points: {chosen}")
        switched[0] = step + 1
        report(event="swap", rank=rank, after_step=step, effective_step=step + 1, **request,
               **choice)
        log(f"{asked} -> frontier point {choice['point_index']} ({chosen_as}) from step "
            f"{step + 1}: {choice['plan_path']}")
        return choice["plan_path"]

    switched = [-1]
    try:
        run_steps()
    except (RuntimeError, ValueError) as error:  # a lost rank (gloo), a loop off the plan
        print(f"{prefix} error: {error}; leaving", file=sys.stderr, flush=True)
        report(event="error", rank=rank, message=str(error))
        sys.exit(2 if isinstance(error, ValueError) else 1)
    finally:
        if controller:
            controller.reset_clocks()  # Kareus: default clocks again (also done on any exit)
        job.close()
    report(event="end", rank=rank, steps=args.steps)
    dist.destroy_process_group()


def main(argv=None):
    args = parse_args(argv)
    try:
        kareus = importlib.import_module("kareus")  # before starting the ranks: a clear message
        importlib.import_module("kareus.torch")
    except ImportError as error:
        sys.exit(f"train.py: cannot import the kareus module ({error}): build it "
                 f"(cmake --build build --target kareus_python), add <build>/python to "
                 f"PYTHONPATH and run with the interpreter it was built for "
                 f"(/usr/bin/python3 on Debian)")
    if "LOCAL_RANK" in os.environ:  # under torchrun: one process per rank already
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return 0
    try:
        parallelism = kareus.partitions(args.workload, program=False)["workload"]["parallelism"]
    except (ValueError, OSError) as error:
        print(f"train.py: {error}", file=sys.stderr)
        return 2
    world = 1
    for key in ("tp", "cp", "dp", "pp"):
        world *= int(parallelism.get(key, 1))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    from kareus.torch.comm import free_port
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    try:
        # fork: the ranks start without importing torch again; the parent has touched no
        # GPU and started no thread (a job that uses CUDA here would take "spawn").
        mp.start_processes(worker, args=(world, args), nprocs=world, start_method="fork")
    except mp.ProcessExitedException as error:
        if error.signal_name:
            print(f"train.py: rank {error.error_index} (pid {error.pid}) was terminated by "
                  f"{error.signal_name}; the other ranks were stopped", file=sys.stderr)
            return 128 + signal.Signals[error.signal_name].value
        print(f"train.py: rank {error.error_index} exited with code {error.exit_code}; the "
              f"other ranks were stopped", file=sys.stderr)
        return error.exit_code
    except mp.ProcessRaisedException as error:
        print(f"train.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
