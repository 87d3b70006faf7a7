"""Running a process tree in its own session and making sure none of it outlives us.

The launcher starts workers (torchrun, or the shaped-namespace launcher) through
:func:`supervise`: SIGINT/SIGTERM are forwarded, stragglers are killed after a
grace period, and an exception in the waiting loop kills the whole tree.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from pathlib import Path

log = logging.getLogger(__name__)

GRACE_S = 30.0  # after a forwarded signal, how long workers get before SIGKILL


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (torchrun's workers lead their own sessions)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_tree(proc: subprocess.Popen) -> None:
    for pid in [*descendants(proc.pid), proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()


def supervise(cmd: list[str], env: dict[str, str]) -> int:
    """Run ``cmd`` in its own session; forward SIGINT/SIGTERM; return its exit status.

    A forwarded signal gives the process tree GRACE_S to stop, then it is
    killed; either way nothing started here outlives this call.  Exit status
    after a signal is 128 + signum, as a shell reports it.
    """
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    caught: list[int] = []

    def forward(signum, _frame):
        caught.append(signum)
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    first_signal = None
    try:
        while True:
            try:
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if caught and first_signal is None:
                    first_signal = time.monotonic()
                if first_signal is not None and time.monotonic() - first_signal > GRACE_S:
                    log.warning("workers ignored the signal for %.0f s: killing them", GRACE_S)
                    kill_tree(proc)
                    rc = proc.returncode
                    break
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if proc.poll() is None:  # an exception in this loop: leave nothing behind
            kill_tree(proc)
    if caught:
        return 128 + caught[0]
    return 128 - rc if rc < 0 else rc
