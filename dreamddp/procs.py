"""Running a process tree in its own session and making sure none of it outlives us.

The launcher starts workers (torchrun, or the shaped-namespace launcher) through
:func:`supervise`: SIGINT/SIGTERM are forwarded, stragglers are killed after a
grace period, and an exception in the waiting loop kills the whole tree.

A tree loses track of its members when a parent dies first: a worker's helper
processes (a W&B service) are orphaned when the worker is killed, and orphans
normally go to init.  Inside :func:`no_leftovers` this process is their
"child subreaper" (Linux prctl), so they come to us instead, and whatever is
still running when the block ends is given a moment and then killed.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

GRACE_S = 30.0  # after a forwarded signal, how long workers get before SIGKILL
LEFTOVER_GRACE_S = 5.0  # how long orphans get to exit by themselves at the end of no_leftovers
_PR_SET_CHILD_SUBREAPER = 36


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


def alive(pid: int) -> bool:
    """A process with this pid exists (anyone's: no permission to signal it still counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _reap(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _subreaper(on: bool) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@contextmanager
def no_leftovers(grace_s: float | None = None):
    """Every process started inside the block is gone when it ends (orphans included).

    Processes that were already our descendants before the block are left alone.
    """
    grace_s = LEFTOVER_GRACE_S if grace_s is None else grace_s
    before = set(descendants(os.getpid()))
    adopted = _subreaper(True)
    try:
        yield
    finally:
        deadline = time.monotonic() + grace_s
        while True:
            left = [p for p in descendants(os.getpid()) if p not in before]
            _reap(left)
            left = [p for p in left if _running(p)]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if left:
            log.warning("killing %d process(es) the run left behind: %s", len(left), left)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 5.0
        while left and time.monotonic() < deadline:
            _reap(left)
            left = [p for p in left if _running(p)]
            time.sleep(0.05)
        if adopted:
            _subreaper(False)


def _term_pending_while_stopped(pid: int) -> bool:
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":" in line)
        pending = int(fields["ShdPnd"], 16) | int(fields["SigPnd"], 16)
    except (OSError, KeyError, ValueError):
        return False
    return fields.get("State", "").strip().startswith("T") and bool(pending >> (signal.SIGTERM - 1) & 1)


def wake_terminated(root: int, done: threading.Event, period_s: float = 0.5) -> None:
    """Until ``done``: continue any stopped descendant of ``root`` that has a SIGTERM pending.

    A stopped (SIGSTOP, frozen) process acts on nothing but SIGKILL and SIGCONT, so
    the SIGTERM of a launcher shutting it down would wait for the SIGKILL that ends
    the grace period; continued, it dies at once.  Run it in a thread."""
    while not done.wait(period_s):
        for pid in descendants(root):
            if _term_pending_while_stopped(pid):
                try:
                    os.kill(pid, signal.SIGCONT)
                except (ProcessLookupError, PermissionError):
                    pass


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
