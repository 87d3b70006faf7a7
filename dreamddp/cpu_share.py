"""Each worker's fair share of a host with more workers than cores (``cluster.cpu_quota``).

The emulated link models the network; compute is real.  With 4 workers on 2
cores, a worker that waits lends its core to the others, whose compute then
runs faster the more the algorithm waits (measured here: local SGD variants'
backward passes faster than local training's in the same job, results/bench/skew), which no
cluster does: a worker waiting for the network keeps its GPU.  A CFS bandwidth
quota on the worker's compute thread caps it at its share (cores / workers)
whatever the others do, and the communication backend's threads, started
before and left outside the quota, carry the bytes like a NIC with its own
processor.

Linux cgroup v1 ``cpu`` controller (``/sys/fs/cgroup/cpu``), written by root:
one group per worker thread under ``dreamddp/``, 10 ms period.  Groups of
workers that are gone are removed by the next worker that starts; a worker
leaves and removes its own at shutdown.  Where the controller is missing or
not writable, ``apply`` says why and nothing is capped.
"""

from __future__ import annotations

import os
import threading

from dreamddp.procs import alive

ROOT = "/sys/fs/cgroup/cpu"
PERIOD_US = 10_000  # short, so a capped thread waits at most a few ms at a time


def share(cores_per_worker: float | None, workers: int, threads: int, cores: int) -> float | None:
    """Cores each worker's compute may use: the given value (0: no cap), or for None (auto)
    cores / workers when the host has more worker threads than cores."""
    if cores_per_worker is not None:
        return cores_per_worker or None
    return cores / workers if workers * threads > cores else None


def _sweep(parent: str) -> None:
    """Remove the groups of workers that are gone (a killed worker cannot remove its own)."""
    for name in os.listdir(parent):
        pid = name.split("-")[0]
        if pid.isdigit() and not alive(int(pid)):
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                pass


def apply(cores: float) -> tuple[str | None, str]:
    """Cap the calling thread at ``cores`` cores; (its group's path, what happened)."""
    parent = os.path.join(ROOT, "dreamddp")
    if not os.path.isfile(os.path.join(ROOT, "cpu.cfs_quota_us")):
        return None, f"not capped: no cgroup v1 cpu controller at {ROOT}"
    try:
        os.makedirs(parent, exist_ok=True)
        _sweep(parent)
        group = os.path.join(parent, f"{os.getpid()}-{threading.get_native_id()}")
        os.makedirs(group, exist_ok=True)
        with open(os.path.join(group, "cpu.cfs_period_us"), "w") as f:
            f.write(str(PERIOD_US))
        with open(os.path.join(group, "cpu.cfs_quota_us"), "w") as f:
            f.write(str(max(1000, round(cores * PERIOD_US))))
        with open(os.path.join(group, "tasks"), "w") as f:
            f.write(str(threading.get_native_id()))
    except OSError as e:
        return None, f"not capped: {ROOT} not writable ({e.strerror})"
    return group, f"compute thread capped at {cores:g} cores"


def release(group: str | None) -> None:
    """Move the calling thread back to the root group and remove its group."""
    if group is None:
        return
    try:
        with open(os.path.join(ROOT, "tasks"), "w") as f:
            f.write(str(threading.get_native_id()))
        os.rmdir(group)
    except OSError:
        pass
