# SPDX-License-Identifier: Apache-2.0
"""Runs a function on N local processes joined by gloo (forked, so torch is not imported
again) or NCCL (spawned), and collects what each returns (JSON-serializable) by rank."""
import datetime
import json
import os
import pathlib
import traceback

import torch.distributed as dist
import torch.multiprocessing as mp

from kareus.torch.comm import free_port


def _worker(rank, world, port, folder, backend, fn, args):
    import torch
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    # A rank that fails leaves the others in a collective: they fail too, after the timeout.
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        result = {"ok": fn(rank, *args)}
    except BaseException as error:  # reported to the test, which fails with it
        result = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
    pathlib.Path(folder, f"rank{rank}.json").write_text(json.dumps(result))
    try:
        dist.barrier()
        dist.destroy_process_group()
    except RuntimeError:
        pass


def run(world, fn, *args, folder, backend="gloo"):
    """fn(rank, *args) on `world` ranks; returns their results in rank order. A rank that
    raised fails the caller with its traceback. NCCL ranks are spawned (CUDA cannot be used in
    a forked child), one per GPU."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    mp.start_processes(_worker, args=(world, free_port(), str(folder), backend, fn, args),
                       nprocs=world, start_method="spawn" if backend == "nccl" else "fork")
    results = []
    for rank in range(world):
        result = json.loads((folder / f"rank{rank}.json").read_text())
        if "error" in result:
            raise AssertionError(f"rank {rank}: {result['error']}\n{result['traceback']}")
        results.append(result["ok"])
    return results
