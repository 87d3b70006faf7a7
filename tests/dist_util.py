"""Run a function on N gloo workers (fresh processes) and collect their results.

Workers start through a forkserver: spawn semantics (fresh, thread-free
processes) with torch and dreamddp imported once in the server instead of once
per worker per test, which on a 2-core machine is most of a test's run time.
Results travel through files (torch.save), not pipes: a worker that exits
right after reporting can never cut a half-read message.
"""

from __future__ import annotations

import os
import socket
import tempfile
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


PRELOAD = ["torch", "torch.distributed", "dreamddp", "dreamddp.engine.engine", "dreamddp.algorithms", "dist_util"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, fn, args, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.save(fn(rank, world, *args), os.path.join(out_dir, f"{rank}.pt"))
    except Exception:
        with open(os.path.join(out_dir, f"{rank}.err"), "w") as f:
            f.write(traceback.format_exc())
        raise
    finally:
        dist.barrier()
        dist.destroy_process_group()


def run_workers(fn, world: int, *args) -> list:
    """``fn(rank, world, *args)`` on every rank; returns the results ordered by rank."""
    with tempfile.TemporaryDirectory() as out_dir:
        try:
            mp.set_forkserver_preload(PRELOAD)
            mp.start_processes(_entry, args=(world, free_port(), fn, args, out_dir), nprocs=world,
                               start_method="forkserver")
        except Exception as e:
            errs = [open(os.path.join(out_dir, f)).read() for f in sorted(os.listdir(out_dir)) if f.endswith(".err")]
            raise AssertionError("worker failed:\n" + ("\n".join(errs) or str(e))) from None
        return [torch.load(os.path.join(out_dir, f"{r}.pt"), weights_only=False) for r in range(world)]
