"""A worker's CPU quota on a host with more workers than cores (dreamddp/cpu_share.py)."""

from __future__ import annotations

import os
import threading

import pytest

from dreamddp import cpu_share


def test_share_is_cores_per_worker_only_when_oversubscribed():
    assert cpu_share.share(None, workers=4, threads=1, cores=2) == 0.5
    assert cpu_share.share(None, workers=2, threads=1, cores=2) is None
    assert cpu_share.share(None, workers=2, threads=2, cores=2) == 1.0
    assert cpu_share.share(0.25, workers=1, threads=1, cores=8) == 0.25  # asked for: always
    assert cpu_share.share(0, workers=8, threads=1, cores=2) is None  # 0: no cap


def _writable() -> bool:
    return os.geteuid() == 0 and os.access(os.path.join(cpu_share.ROOT, "cpu.cfs_quota_us"), os.W_OK)


@pytest.mark.skipif(not _writable(), reason="needs root and a writable cgroup v1 cpu controller")
def test_apply_caps_the_calling_thread_and_release_removes_its_group():
    parent = os.path.join(cpu_share.ROOT, "dreamddp")
    os.makedirs(parent, exist_ok=True)
    stale = os.path.join(parent, "999999999-1")  # a worker that is gone (no such pid)
    os.makedirs(stale, exist_ok=True)
    seen = {}

    def worker():
        group, note = cpu_share.apply(0.5)
        seen["note"], seen["group"] = note, group
        with open(os.path.join(group, "cpu.cfs_quota_us")) as f:
            seen["quota"] = int(f.read())
        with open(os.path.join(group, "tasks")) as f:
            seen["tasks"] = f.read().split()
        seen["tid"] = str(threading.get_native_id())
        cpu_share.release(group)

    t = threading.Thread(target=worker)  # the test's own thread stays uncapped
    t.start()
    t.join()
    assert seen["note"] == "compute thread capped at 0.5 cores"
    assert seen["quota"] == cpu_share.PERIOD_US // 2
    assert seen["tasks"] == [seen["tid"]]  # that thread only, not the process
    assert not os.path.exists(seen["group"]) and not os.path.exists(stale)


def test_apply_says_why_when_there_is_no_controller(monkeypatch):
    monkeypatch.setattr(cpu_share, "ROOT", "/nonexistent/cgroup/cpu")
    assert cpu_share.apply(0.5) == (None, "not capped: no cgroup v1 cpu controller at /nonexistent/cgroup/cpu")
