"""Start one worker process per rank, each inside its own shaped namespace.

torchrun forks all local workers from one agent process, so it cannot place
them in different network namespaces. Instead each rank is started directly
with the environment torchrun would have given it (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) plus the variables
that pin gloo/NCCL to the shaped interface; `init_process_group("env://")`
then rendezvouses over the shaped links at rank 0's address. LOCAL_RANK is
the global rank because every worker still runs on this one host (device
selection must not collide).

Supervision is torchrun's, minus restarts: the first worker to fail, or a
SIGINT/SIGTERM to this process, terminates all workers (SIGTERM and SIGCONT, so
that a frozen worker dies too, then SIGKILL after a grace period), and the
network is always torn down.  Like torchrun run through dreamddp.run.failures, it
writes how the failed ranks ended (exit status or signal) to the file that
``DREAMDDP_EXITS`` in ``env`` names, for the run record.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Callable

from dreamddp.run.failures import EXITS_ENV, write_exits
from dreamddp.netshape.topology import ShapedNetwork

GRACE_S = 5.0
_POLL_S = 0.05


def _exit_code(rc: int) -> int:
    """Shell convention: killed by signal N -> 128 + N."""
    return 128 - rc if rc < 0 else rc


def _stop_all(procs: list[subprocess.Popen]) -> None:
    # Each worker leads its own process group, so its children die with it.
    for sig, wait_s in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5.0)):
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                    if sig == signal.SIGTERM:
                        os.killpg(p.pid, signal.SIGCONT)  # a stopped process acts on nothing else
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(_POLL_S)


def _report_exits(env: dict, failed: list[tuple[int, int]]) -> None:
    path = env.get(EXITS_ENV)
    if path:
        now = time.time()
        try:
            write_exits(path, 0, ((rank, code, now) for rank, code in failed))
        except OSError:
            pass


def launch_shaped(
    net: ShapedNetwork,
    argv_for_rank: Callable[[int], list[str]],
    env: dict,
    master_port: int,
) -> int:
    """Run every rank in its namespace; return 0, or the first failure's code.

    ``env`` is the base environment (usually ``os.environ``) for every rank;
    the rank variables and ``net.env(rank)`` are laid over it. A signal to
    this process returns 128 + signum after the workers are stopped.
    Always closes ``net``.
    """
    if net.closed:
        raise ValueError("launch_shaped: the ShapedNetwork is already closed")
    if isinstance(master_port, bool) or not isinstance(master_port, int) or not 1 <= master_port <= 65535:
        raise ValueError(f"launch_shaped: master_port must be an int in 1..65535, got {master_port!r}")
    n = net.n_workers
    caught: list[int] = []
    prev = {}
    on_main = threading.current_thread() is threading.main_thread()
    if on_main:
        for sig in (signal.SIGINT, signal.SIGTERM):
            prev[sig] = signal.signal(sig, lambda s, f: caught.append(s))
    procs: list[subprocess.Popen] = []
    try:
        for rank in range(n):
            argv = argv_for_rank(rank)
            if not argv or not all(isinstance(a, str) for a in argv):
                raise ValueError(f"launch_shaped: argv_for_rank({rank}) must be a non-empty list of str")
            rank_env = {
                **{str(k): str(v) for k, v in env.items()},
                **net.env(rank),
                "RANK": str(rank), "WORLD_SIZE": str(n),
                "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(n),
                "GROUP_RANK": "0", "MASTER_PORT": str(master_port),
            }
            procs.append(subprocess.Popen(net.wrap(rank, argv), env=rank_env, start_new_session=True))
        code = 0
        while not caught:
            done = [p for p in procs if p.poll() is not None]
            failed = [p for p in done if p.returncode != 0]
            if failed:
                code = _exit_code(failed[0].returncode)
                _report_exits(env, [(procs.index(p), p.returncode) for p in failed])
                break
            if len(done) == n:
                break
            time.sleep(_POLL_S)
        if caught:
            code = 128 + caught[0]
        return code
    finally:
        _stop_all(procs)
        # Restore before closing, so that a handler `net` installed goes back
        # in place and close() can then remove it.
        for sig, handler in prev.items():
            signal.signal(sig, handler)
        net.close()
