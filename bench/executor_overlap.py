#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Does nanobatching hide collectives in kareus.torch? One comm-heavy transformer layer, TP 2 over
gloo on loopback (2 local processes, CPU), forward and backward of every microbatch, run three
ways in alternating repetitions: sequential; nanobatched (every partition's all-reduce launched
at its first slot, overlapping all of the other nanobatch's compute); and nanobatched with each
collective joined as soon as it is launched (the same kernels on the same halves, no overlap:
what splitting alone changes). Prints the median step times and the ratios, measured in the
same run.

    PYTHONPATH=build/python /usr/bin/python3 bench/executor_overlap.py [--repeats 9] [--json]

Also the time the sequential steps spend waiting for collectives (their comm_wait to the
collective's end), so the ratio can be read against what there was to hide. This is a
benchmark, not a test: the machine's load moves the numbers; report medians and the ratio.
"""
import argparse
import datetime
import json
import os
import pathlib
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def workload(args):
    return {"name": "overlap-bench",
            "model": {"name": "comm-heavy", "hidden": args.hidden, "heads": args.heads,
                      "kv_groups": args.heads, "head_dim": args.head_dim, "ffn": args.ffn,
                      "layers": 1, "vocab": 256},
            "gpu": "H100-SXM", "parallelism": {"tp": 2, "cp": 1, "pp": 1},
            "microbatch_size": args.microbatch_size, "sequence_length": args.sequence,
            "microbatches": args.microbatches, "recompute": "none"}


def worker(rank, port, args, out):
    import kareus.torch as kt
    from kareus.torch import comm

    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=300))
    program = kt.Program.of_workload(workload(args))
    shape = kt.ModelShape.from_workload(program.workload)
    groups = kt.Groups(kt.ParallelLayout(tp=2), {})
    weights = kt.stage_weights(shape, 0, groups.tp_rank, seed=0)
    stage = kt.StageExecutor(program, shape, weights, groups)
    nanobatched = kt.InstructionConfig("nanobatched", {
        name: kt.CommChoice(sms=None, slot=info.launch_slots[0]) for name, info in program.types.items()})
    g = torch.Generator().manual_seed(0)
    size = (shape.microbatches, shape.microbatch_size, shape.sequence_length)
    tokens = torch.randint(0, shape.vocab, size, generator=g)
    targets = torch.randint(0, shape.vocab, size, generator=g)

    # The time blocked in collectives: wrap Pending.wait. "joined at launch": every collective
    # waited for right after it is issued.
    waited = [0.0]
    original_wait = comm.Pending.wait
    original_launch = kt.StageExecutor._launch
    serialize = [False]

    def timed_wait(self):
        started = time.perf_counter()
        original_wait(self)
        waited[0] += time.perf_counter() - started
    comm.Pending.wait = timed_wait

    def launch(self, k, pc, sms, p):
        pending = original_launch(self, k, pc, sms, p)
        if serialize[0]:
            pending.wait()
            return comm.Pending([])
        return pending
    kt.StageExecutor._launch = launch

    runs = {"sequential": None, "nanobatched": lambda kind, m: nanobatched,
            "nanobatched, joined at launch": lambda kind, m: nanobatched}
    times = {name: [] for name in runs}
    waits = {name: [] for name in runs}
    for repeat in range(args.warmup + args.repeats):
        for name, configs in runs.items():
            runner = kt.PipelineRunner(stage, configs=configs)
            serialize[0] = name.endswith("joined at launch")
            dist.barrier()
            waited[0] = 0.0
            started = time.perf_counter()
            runner.train_step(tokens, targets, repeat)
            elapsed = time.perf_counter() - started
            for p in weights.parameters():
                p.grad = None
            if repeat >= args.warmup:
                times[name].append(elapsed)
                waits[name].append(waited[0])
    if rank == 0:
        pathlib.Path(out).write_text(json.dumps({"times": times, "waits": waits}))
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # Narrow attention and MLP against a wide residual stream: every all-reduce moves the whole
    # [tokens, hidden] activation, while the GEMMs are thin (comm-heavy, as a layer is under
    # TP 8 on NVLink-less links).
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--ffn", type=int, default=64)
    parser.add_argument("--sequence", type=int, default=128)
    parser.add_argument("--microbatch-size", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="compute threads per rank")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from kareus.torch.comm import free_port
    port = free_port()
    out = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"kareus-overlap-{os.getpid()}.json"
    mp.start_processes(worker, args=(port, args, str(out)), nprocs=2, start_method="fork")
    result = json.loads(out.read_text())
    out.unlink()
    median = {k: statistics.median(v) for k, v in result["times"].items()}
    wait = {k: statistics.median(v) for k, v in result["waits"].items()}
    ratio = median["sequential"] / median["nanobatched"]
    overlap = median["nanobatched, joined at launch"] / median["nanobatched"]
    summary = {"median_step_s": median, "median_wait_s": wait, "speedup": ratio,
               "overlap_speedup": overlap, "repeats": args.repeats, "shape": vars(args)}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"one layer, TP 2 over gloo on loopback, {args.microbatches} microbatches of "
          f"{args.microbatch_size} x {args.sequence} tokens, hidden {args.hidden}, ffn "
          f"{args.ffn}; median of {args.repeats}:")
    for name in median:
        print(f"  {name:30s} {median[name] * 1e3:8.1f} ms per step, {wait[name] * 1e3:7.1f} ms "
              f"of it waiting for collectives")
    print(f"  sequential / nanobatched = {ratio:.3f}; nanobatched joined at launch / nanobatched "
          f"= {overlap:.3f} (the overlap alone)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
