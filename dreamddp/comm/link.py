"""Link models: how long a collective occupies one worker's uplink.

The emulated link is what lets a laptop reproduce results about slow networks:
the real collective runs over loopback at full speed, and the worker is then
held until a virtual clock says the bytes would have crossed a link of the
configured bandwidth.  The clock is FIFO per worker, like a real NIC queue, so
a second collective launched while the first is still "on the wire" starts
only when the first one ends, while compute carries on meanwhile.

Cost model (ring algorithms, alpha-beta): per worker, all-reduce sends
2(n-1)/n of the payload and pays 2(n-1) latency hops; reduce-scatter and
all-gather send (n-1)/n and pay n-1 hops.  ``nbytes`` is always the size of
the full flat tensor (the all-reduce buffer, the reduce-scatter input, the
all-gather output).
"""

from __future__ import annotations

import math
import threading

_KINDS = ("all_reduce", "reduce_scatter", "all_gather")
BACKENDS = ("ideal", "emulated", "tc")


def _check_kind(kind: str) -> None:
    if kind not in _KINDS:
        raise ValueError(f"collective kind: unknown {kind!r} (expected one of {', '.join(_KINDS)})")


def ring_factor(kind: str, world: int) -> float:
    """Fraction of the payload one worker sends on a ring of ``world`` workers."""
    _check_kind(kind)
    if world < 1:
        raise ValueError(f"world: must be >= 1, got {world}")
    factor = (world - 1) / world
    return 2.0 * factor if kind == "all_reduce" else factor


def _latency_hops(kind: str, world: int) -> int:
    return 2 * (world - 1) if kind == "all_reduce" else world - 1


def collective_time(
    kind: str,
    nbytes: int,
    world: int,
    gbps: float,
    latency_s: float = 0.0,
    calibration: float = 1.0,
) -> float:
    """Modelled seconds for one ring collective of ``nbytes`` on ``world`` workers.

    ``calibration`` scales only the bandwidth term: it absorbs protocol overhead
    measured against a real shaped link, which is proportional to bytes sent.
    """
    factor = ring_factor(kind, world)  # validates kind and world
    if nbytes < 0:
        raise ValueError(f"nbytes: must be >= 0, got {nbytes}")
    if world == 1:
        return 0.0
    if not gbps > 0 or not math.isfinite(gbps):
        raise ValueError(f"bandwidth.gbps: must be a finite number > 0, got {gbps}")
    if latency_s < 0:
        raise ValueError(f"bandwidth.latency_ms: must be >= 0, got {latency_s * 1e3} ms")
    if not calibration > 0:
        raise ValueError(f"bandwidth.calibration: must be > 0, got {calibration}")
    transfer = factor * calibration * nbytes * 8.0 / (gbps * 1e9)
    return transfer + _latency_hops(kind, world) * latency_s


class Link:
    """Interface: reserve wire time for a collective and describe the link."""

    def reserve(self, kind: str, nbytes: int, world: int, now: float) -> tuple[float, float]:
        """Return (start, deadline) in ``time.perf_counter()`` seconds."""
        raise NotImplementedError

    def describe(self) -> dict:
        """Plain-data description for the run record."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forget queued transfers (e.g. after warm-up); no-op for stateless links."""


class IdealLink(Link):
    """No pacing: a collective may complete as soon as the real one does.

    Also used for the ``tc`` backend, where the kernel shapes the real traffic
    and pacing it again would count the link twice; ``backend``/``gbps`` are
    kept only so the run record says which link was used.
    """

    def __init__(self, backend: str = "ideal", gbps: float | None = None, latency_ms: float = 0.0):
        self.backend = backend
        self.gbps = gbps
        self.latency_ms = latency_ms

    def reserve(self, kind: str, nbytes: int, world: int, now: float) -> tuple[float, float]:
        _check_kind(kind)
        return now, now

    def describe(self) -> dict:
        info = {"backend": self.backend, "paced": False}
        if self.backend != "ideal":
            info.update(gbps=self.gbps, latency_ms=self.latency_ms)
        return info


class EmulatedLink(Link):
    """A FIFO virtual clock per worker, paced by the alpha-beta ring model."""

    def __init__(self, gbps: float, latency_ms: float = 0.0, calibration: float = 1.0):
        if latency_ms is None or not latency_ms >= 0:
            raise ValueError(f"bandwidth.latency_ms: must be >= 0, got {latency_ms}")
        if calibration is None or not calibration > 0:
            raise ValueError(f"bandwidth.calibration: must be > 0, got {calibration}")
        self._lock = threading.Lock()
        self.gbps = gbps  # validated by the setter
        self.latency_ms = float(latency_ms)
        self.calibration = float(calibration)
        self._free_at = -math.inf

    @property
    def gbps(self) -> float:
        return self._gbps

    @gbps.setter
    def gbps(self, value: float) -> None:
        # Settable because the lead may derive it at start-up from a measured
        # comm/backward ratio; validate here so a bad measurement fails loudly.
        if value is None or not (value > 0 and math.isfinite(value)):
            raise ValueError(f"bandwidth.gbps: must be > 0 for the emulated link, got {value}")
        self._gbps = float(value)

    @property
    def free_at(self) -> float:
        """When the last reserved transfer leaves the wire (-inf when idle since reset)."""
        return self._free_at

    def reserve(self, kind: str, nbytes: int, world: int, now: float) -> tuple[float, float]:
        with self._lock:
            start = max(now, self._free_at)
            duration = collective_time(
                kind, nbytes, world, self._gbps, self.latency_ms / 1e3, self.calibration
            )
            deadline = start + duration
            self._free_at = deadline
        return start, deadline

    def reset(self) -> None:
        with self._lock:
            self._free_at = -math.inf

    def describe(self) -> dict:
        return {
            "backend": "emulated",
            "paced": True,
            "gbps": self._gbps,
            "latency_ms": self.latency_ms,
            "calibration": self.calibration,
        }


def build_link(
    backend: str, gbps: float | None, latency_ms: float = 0.0, calibration: float = 1.0
) -> Link:
    """Build the link named by the ``bandwidth`` config group.

    ``tc`` needs a rate (the shaping scripts use it) but no pacing here.
    """
    if backend not in BACKENDS:
        raise ValueError(
            f"bandwidth.backend: unknown link {backend!r} (expected one of {', '.join(BACKENDS)})"
        )
    if backend == "ideal":
        return IdealLink()
    if gbps is None or not (gbps > 0 and math.isfinite(gbps)):
        raise ValueError(f"bandwidth.gbps: must be > 0 for the {backend} link, got {gbps}")
    if latency_ms is None or not latency_ms >= 0:
        raise ValueError(f"bandwidth.latency_ms: must be >= 0, got {latency_ms}")
    if backend == "tc":
        return IdealLink(backend="tc", gbps=float(gbps), latency_ms=float(latency_ms))
    return EmulatedLink(gbps, latency_ms, calibration)
