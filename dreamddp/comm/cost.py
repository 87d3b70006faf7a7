"""The alpha-beta cost of one ring collective: what the emulated link paces and the simulator charges.

Per worker, a ring all-reduce sends 2(n-1)/n of the payload and pays 2(n-1)
latency hops; reduce-scatter and all-gather send (n-1)/n and pay n-1 hops.
On top, every collective pays ``alpha``: the fixed cost of one collective on
the real backend (launch, the backend's own round trips, completion), measured
at start-up with a one-element all-reduce (``Link.calibrate``).  Splitting a
run of units into several collectives pays it several times; that is what
makes many small collectives (bubble filling, per-unit syncs) cost more than
their bytes say.
``nbytes`` is always the size of the full flat tensor (the all-reduce buffer,
the reduce-scatter input, the all-gather output).  Pure Python: the planning
library and the schedule CLI use it without importing torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

KINDS = ("all_reduce", "reduce_scatter", "all_gather")
# How the real collectives carry the bytes under a paced link (comm/communicator.py).
CARRIERS = ("eager", "deferred", "step")
QUEUED = ("deferred", "step")  # the carriers that hold real collectives in a queue until a wait


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"collective kind: unknown {kind!r} (expected one of {', '.join(KINDS)})")


def ring_factor(kind: str, world: int) -> float:
    """Fraction of the payload one worker sends on a ring of ``world`` workers."""
    _check_kind(kind)
    if world < 1:
        raise ValueError(f"world: must be >= 1, got {world}")
    factor = (world - 1) / world
    return 2.0 * factor if kind == "all_reduce" else factor


def latency_hops(kind: str, world: int) -> int:
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
    return transfer + latency_hops(kind, world) * latency_s


@dataclass(frozen=True)
class LinkModel:
    """A link as the simulator and the schedulers see it: rate, per-hop latency, calibration,
    and the per-collective cost ``alpha_s``."""

    gbps: float
    latency_s: float = 0.0
    calibration: float = 1.0
    alpha_s: float = 0.0

    def seconds(self, kind: str, nbytes: int, world: int) -> float:
        if world == 1:
            return 0.0
        return self.alpha_s + collective_time(kind, nbytes, world, self.gbps, self.latency_s, self.calibration)


# The all-reduce sizes at which a paced link measures the real backend at start-up
# (RealTransfer); the one-element all-reduce (alpha) is the first point.  Gloo's time is not
# affine in the size (its algorithm changes with it), so a few sizes, interpolated.
PROBE_BYTES = (256 * 1024, 1024 * 1024, 4 * 1024 * 1024, 16 * 1024 * 1024)


@dataclass(frozen=True)
class RealTransfer:
    """What the real backend takes for one collective, by size, on the workers it was measured
    with: piecewise linear through measured all-reduces (bytes, seconds), beyond the largest
    along the last segment.  The deferred carrier (comm/carrier.py) runs the real transfer
    when a worker first waits, so on a real host it can outlast a fast emulated link."""

    points: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        if not self.points or any(b <= a for (a, _), (b, _) in zip(self.points, self.points[1:])):
            raise ValueError(f"RealTransfer: points need increasing byte counts, got {self.points}")

    @classmethod
    def probed(cls, alpha_s: float, sizes: "list[tuple[int, float]]") -> "RealTransfer":
        """From start-up measurements: the one-element all-reduce (alpha) at no bytes, then the
        (bytes, seconds) of the PROBE_BYTES all-reduces."""
        return cls(((0, alpha_s), *((int(b), float(s)) for b, s in sizes)))

    def seconds(self, kind: str, nbytes: int, world: int) -> float:
        if world == 1 or nbytes <= 0:
            return 0.0
        size = nbytes * ring_factor(kind, world) / ring_factor("all_reduce", world)  # all-reduce bytes alike
        pts = self.points
        if size <= pts[0][0] or len(pts) == 1:
            return pts[0][1]
        for (b0, s0), (b1, s1) in zip(pts, pts[1:]):
            if size <= b1:
                break
        return max(0.0, s0 + (s1 - s0) * (size - b0) / (b1 - b0))
