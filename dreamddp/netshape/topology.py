"""Per-worker shaped links: one network namespace per worker joined by a bridge.

Topology (all inside namespaces we create; the host's networking is untouched
and no traffic can leave, because the hub namespace has no route out)::

    <prefix>-<pid>-w0: shaped0 10.77.0.1/24 ──veth── v0 ┐
    <prefix>-<pid>-w1: shaped0 10.77.0.2/24 ──veth── v1 ┼─ br0 in <prefix>-<pid>-hub
    ...                                                  ┘

Shaping: a tbf qdisc on each worker's ``shaped0`` egress, i.e. its upload,
which is what the emulated link models (a FIFO uplink per worker). A ring
all-reduce has one flow out and one flow in per worker, so the upload shaper
alone bounds it exactly like a full-duplex NIC would; the slowest uplink gates
every ring step. ``shape_download=True`` also puts a tbf on the hub-side
``v<r>`` (the worker's download), for fan-in patterns (several peers sending
to one) where a real NIC would limit the receiver too. Measured: uniform rings
are the same either way (time / ring formula 1.05); with one slow worker a
fast sender into the slow download bucket now and then drops a packet and
that repetition stalls on a TCP retransmit (upload only 1.04x, tight; with
download shaping 1.10x median, single repetitions up to 1.25x).

The owner pid is part of every namespace name so that ``cleanup_stale`` only
removes leftovers of dead owners, never a concurrent live run.
"""

from __future__ import annotations

import atexit
import math
import os
import re
import secrets
import signal
import subprocess
import sys
import threading

from dreamddp.netshape._iproute import NAME_RE, NetshapeError, delete_netns, netns_list, run
from dreamddp.procs import alive

IFNAME = "shaped0"
SUBNET = "10.77.0"  # private /24, only ever inside our own namespaces
# veth hands tbf GSO super-packets of up to 64 KiB + headers; a bucket smaller
# than one of them throttles the flow to about half the rate (measured: 64 KiB
# at 0.5 Gbit gave 2.5x the ring time, 96 KiB 1.09x, 128 KiB 1.07x).
MIN_BURST = 128 * 1024
MIN_USER_BURST = 96 * 1024
TBF_LATENCY = "50ms"  # queue depth; TCP fills the rate with much less
_REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reaper.py")


def default_burst(gbps: float) -> int:
    """At least 128 KiB, or about two milliseconds of traffic at this rate."""
    return max(MIN_BURST, int(gbps * 1e9 / 8 * 2e-3))


def _check_args(n_workers, gbps, burst_bytes, prefix) -> list[float]:
    if isinstance(n_workers, bool) or not isinstance(n_workers, int) or not 1 <= n_workers <= 250:
        raise ValueError(f"ShapedNetwork: n_workers must be an int in 1..250, got {n_workers!r}")
    rates = list(gbps) if isinstance(gbps, (list, tuple)) else [gbps] * n_workers
    if len(rates) != n_workers:
        raise ValueError(f"ShapedNetwork: got {len(rates)} per-worker gbps values for {n_workers} workers")
    for g in rates:
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not (g > 0 and math.isfinite(g)):
            raise ValueError(f"ShapedNetwork: gbps must be finite numbers > 0, got {g!r}")
    if burst_bytes is not None and (not isinstance(burst_bytes, int) or burst_bytes < MIN_USER_BURST):
        raise ValueError(f"ShapedNetwork: burst_bytes must be an int >= {MIN_USER_BURST} "
                         f"(smaller buckets throttle 64 KiB GSO packets), got {burst_bytes!r}")
    if not isinstance(prefix, str) or not re.fullmatch(r"[A-Za-z0-9_]{1,24}", prefix):
        raise ValueError(f"ShapedNetwork: prefix must be 1-24 of [A-Za-z0-9_], got {prefix!r}")
    return [float(g) for g in rates]


def _in_initial_userns() -> bool:
    try:
        with open("/proc/self/uid_map") as f:
            return f.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return True


def _ensure_netns_dir() -> None:
    """Inside `unshare -Urnm`, give our private mount namespace its own tmpfs
    on /run/netns: the host's directory belongs to the real root, and names
    made there would be visible (as dead files) outside our namespaces."""
    if _in_initial_userns():
        return
    with open("/proc/self/mounts") as f:
        if any(line.split()[:3] == ["netshape", "/run/netns", "tmpfs"] for line in f):
            return  # an earlier ShapedNetwork of this process mounted it
    if not os.path.isdir("/run/netns"):
        raise NetshapeError("netshape: /run/netns is missing and cannot be created in a user namespace")
    run("mount", "-t", "tmpfs", "netshape", "/run/netns")


class ShapedNetwork:
    """N workers, each in its own netns with a tbf-shaped veth into a bridge."""

    def __init__(
        self,
        n_workers: int,
        gbps: float | list[float],
        burst_bytes: int | None = None,
        prefix: str | None = None,
        shape_download: bool = False,
        slow_start_after_idle: bool = True,
    ):
        prefix = prefix if prefix is not None else "ddp" + secrets.token_hex(3)
        self.gbps = _check_args(n_workers, gbps, burst_bytes, prefix)
        self.n_workers = n_workers
        self.bursts = [burst_bytes or default_burst(g) for g in self.gbps]
        self.prefix = prefix
        self.shape_download = bool(shape_download)
        self.slow_start_after_idle = bool(slow_start_after_idle)
        self.ifname = IFNAME
        base = f"{prefix}-{os.getpid()}"
        self.hub = f"{base}-hub"
        self._ns = [f"{base}-w{r}" for r in range(n_workers)]
        self._closed = False
        self._lock = threading.Lock()
        self._prev_handlers: dict[int, object] = {}
        _ensure_netns_dir()
        taken = set(netns_list()) & {self.hub, *self._ns}
        if taken:
            raise NetshapeError(f"netshape: namespace {sorted(taken)[0]} already exists (pick another prefix)")
        self._reaper = subprocess.Popen(
            [sys.executable, _REAPER, self.hub, *self._ns],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True,
        )
        atexit.register(self.close)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        hub = self.hub
        run("ip", "netns", "add", hub)
        run("ip", "-n", hub, "link", "set", "lo", "up")
        run("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", hub, "link", "set", "br0", "up")
        for r, ns in enumerate(self._ns):
            port = f"v{r}"
            run("ip", "netns", "add", ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
            run("ip", "-n", hub, "link", "add", port, "type", "veth", "peer", "name", IFNAME, "netns", ns)
            run("ip", "-n", hub, "link", "set", port, "master", "br0", "up")
            run("ip", "-n", ns, "addr", "add", f"{self.worker_ip(r)}/24", "dev", IFNAME)
            run("ip", "-n", ns, "link", "set", IFNAME, "up")
            # A connection idle for longer than its RTO restarts from the initial window (RFC
            # 2861), so a collective after a stretch of compute begins in slow start; a link
            # between datacentres keeps its window (the kernel's default in a new namespace is 1).
            if not self.slow_start_after_idle:
                run("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.tcp_slow_start_after_idle=0")
            tbf = ["root", "tbf", "rate", f"{int(self.gbps[r] * 1e9)}bit",
                   "burst", str(self.bursts[r]), "latency", TBF_LATENCY]
            run("tc", "-n", ns, "qdisc", "add", "dev", IFNAME, *tbf)  # upload
            if self.shape_download:
                run("tc", "-n", hub, "qdisc", "add", "dev", port, *tbf)

    # --- addressing and process placement -------------------------------
    def worker_ip(self, rank: int) -> str:
        self._check_rank(rank)
        return f"{SUBNET}.{rank + 1}"

    @property
    def master_addr(self) -> str:
        return self.worker_ip(0)

    def namespace(self, rank: int) -> str:
        self._check_rank(rank)
        return self._ns[rank]

    def wrap(self, rank: int, argv: list[str]) -> list[str]:
        """argv that runs ``argv`` inside worker ``rank``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(rank), *argv]

    def env(self, rank: int) -> dict[str, str]:
        """Environment that pins every transport to the shaped interface.

        NCCL would otherwise see one host (same hostname) and use shared memory
        or P2P, bypassing the shaped link entirely.
        """
        self._check_rank(rank)
        return {
            "MASTER_ADDR": self.master_addr,
            "GLOO_SOCKET_IFNAME": IFNAME,
            "TP_SOCKET_IFNAME": IFNAME,
            "NCCL_SOCKET_IFNAME": IFNAME,
            "NCCL_P2P_DISABLE": "1",
            "NCCL_SHM_DISABLE": "1",
            "NCCL_IB_DISABLE": "1",
        }

    def qdisc_stats(self, rank: int) -> str:
        """``tc -s qdisc`` of the worker's upload shaper (for debugging/tests)."""
        return run("tc", "-s", "-n", self.namespace(rank), "qdisc", "show", "dev", IFNAME)

    def _check_rank(self, rank: int) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.n_workers:
            raise ValueError(f"ShapedNetwork: rank must be in 0..{self.n_workers - 1}, got {rank!r}")

    # --- teardown -------------------------------------------------------
    def close(self) -> None:
        """Kill anything left in our namespaces and delete them; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        delete_netns([*self._ns, self.hub])
        self._restore_handlers()
        atexit.unregister(self.close)
        if self._reaper.poll() is None:
            try:
                self._reaper.stdin.write(b"done\n")
                self._reaper.stdin.close()
                self._reaper.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self._reaper.kill()

    @property
    def closed(self) -> bool:
        return self._closed

    def _on_signal(self, signum, frame) -> None:
        prev = self._prev_handlers.get(signum, signal.SIG_DFL)
        self.close()  # also restores the previous handlers
        if callable(prev):
            prev(signum, frame)
        elif prev == signal.SIG_DFL:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            os.kill(os.getpid(), signum)  # default action, now that we are clean

    def _restore_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, prev in self._prev_handlers.items():
            if signal.getsignal(sig) == self._on_signal:
                signal.signal(sig, prev)
        self._prev_handlers.clear()

    def __enter__(self) -> "ShapedNetwork":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._prev_handlers[sig] = signal.getsignal(sig)
                signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "up"
        return f"ShapedNetwork({self.n_workers} workers, gbps={self.gbps}, hub={self.hub!r}, {state})"


def cleanup_stale(prefix: str = "ddp", include_live: bool = False) -> list[str]:
    """Delete namespaces left by dead ShapedNetwork owners; returns their names.

    Only names of our form ``<prefix...>-<pid>-(hub|w<r>)`` are touched, and
    only when the owner pid is gone, unless ``include_live``.
    """
    if not isinstance(prefix, str) or not re.fullmatch(r"[A-Za-z0-9_]*", prefix):
        raise ValueError(f"cleanup_stale: prefix must be [A-Za-z0-9_]*, got {prefix!r}")
    stale = []
    for name in netns_list():
        m = NAME_RE.match(name)
        if m and m["prefix"].startswith(prefix) and (include_live or not alive(int(m["pid"]))):
            stale.append(name)
    delete_netns(stale)
    return stale
