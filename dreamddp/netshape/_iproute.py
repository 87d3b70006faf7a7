"""Thin, stdlib-only wrappers over the `ip` and `tc` binaries.

Kept free of any dreamddp/torch import so the reaper (a watchdog process that
must start in milliseconds) can load it by path.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess


class NetshapeError(RuntimeError):
    """A traffic-control or namespace command failed."""


def run(*argv: str) -> str:
    """Run one command; a failure becomes a one-line NetshapeError."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise NetshapeError(f"netshape: command not found: {argv[0]}") from None
    if proc.returncode != 0:
        err = " ".join((proc.stderr or proc.stdout).split())
        raise NetshapeError(f"netshape: `{' '.join(argv)}` failed: {err}")
    return proc.stdout


def netns_list() -> list[str]:
    """Names of the named network namespaces (``ip netns list``)."""
    try:
        out = run("ip", "netns", "list")
    except NetshapeError:
        return []
    # Lines look like "name (id: 3)" or just "name".
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def netns_pids(name: str) -> list[int]:
    try:
        out = run("ip", "netns", "pids", name)
    except NetshapeError:
        return []
    return [int(tok) for tok in out.split() if tok.isdigit()]


def kill_netns_processes(name: str) -> None:
    """SIGKILL what still runs inside a namespace: only our workers live there."""
    for pid in netns_pids(name):
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def delete_netns(names: list[str]) -> None:
    """Kill processes inside, then delete; missing namespaces are fine.

    Deleting a worker namespace destroys its veth end, which destroys the peer
    in the hub, so links need no separate teardown.
    """
    present = set(netns_list())
    for name in names:
        if name in present:
            kill_netns_processes(name)
    for name in names:
        if name in present:
            try:
                run("ip", "netns", "delete", name)
            except NetshapeError:
                pass


# <prefix>-<owner pid>-hub / <prefix>-<owner pid>-w<rank>
NAME_RE = re.compile(r"^(?P<prefix>[A-Za-z0-9_]+)-(?P<pid>\d+)-(?P<role>hub|w\d+)$")
