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
    and the per-collective cost ``alpha_s``; ``measured``: the collectives as timed on the link
    itself at start-up (a real shaped link, whose backend does not move bytes at the ring
    formula's pace), which then give every collective's time in place of the formula."""

    gbps: float
    latency_s: float = 0.0
    calibration: float = 1.0
    alpha_s: float = 0.0
    measured: RealTransfer | None = None

    def seconds(self, kind: str, nbytes: int, world: int) -> float:
        if world == 1:
            return 0.0
        if self.measured is not None:
            return self.measured.seconds(kind, nbytes, world)
        return self.alpha_s + collective_time(kind, nbytes, world, self.gbps, self.latency_s, self.calibration)


# The sizes at which a paced link measures the real backend at start-up (RealTransfer), for
# every collective kind; the one-element all-reduce (alpha) is the first point.  Gloo's time is
# not affine in the size (its algorithm changes with it), so a few sizes, interpolated; nor do
# its kinds scale as a ring's would: on a 2-core host (2 workers) a reduce-scatter took 1.3x an
# all-reduce of the same bytes (median, results/simulator_fast's probes), where a ring takes
# half, and an all-gather 0.7x.
PROBE_BYTES = (256 * 1024, 1024 * 1024, 4 * 1024 * 1024, 16 * 1024 * 1024)

Points = tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class RealTransfer:
    """What the real backend takes for one collective, by size, on the workers it was measured
    with: piecewise linear through measured collectives (bytes, seconds), beyond the largest
    along the last segment; ``points`` the all-reduce's, ``kinds`` the other kinds' where
    probed (else the all-reduce's, scaled as a ring).  Bytes: the collective's whole tensor
    (a reduce-scatter's input, an all-gather's output).  The deferred carrier
    (comm/carrier.py) runs the real transfer when a worker first waits, so on a real host it
    can outlast a fast emulated link."""

    points: Points
    kinds: tuple[tuple[str, Points], ...] = ()

    def __post_init__(self) -> None:
        for kind, pts in (("all_reduce", self.points), *self.kinds):
            if kind not in KINDS:
                raise ValueError(f"RealTransfer: unknown collective {kind!r}")
            if not pts or any(b <= a for (a, _), (b, _) in zip(pts, pts[1:])):
                raise ValueError(f"RealTransfer: {kind} points need increasing byte counts, got {pts}")

    @classmethod
    def probed(cls, alpha_s: float, sizes: "list[tuple[int, float]]",
               kinds: "dict[str, list[tuple[int, float]]] | None" = None) -> "RealTransfer":
        """From start-up measurements: the one-element all-reduce (alpha) at no bytes, then the
        (bytes, seconds) of the PROBE_BYTES all-reduces; ``kinds``: the other kinds' probes."""
        def points(measured):
            return ((0, alpha_s), *((int(b), float(s)) for b, s in measured))
        return cls(points(sizes), tuple((k, points(v)) for k, v in sorted((kinds or {}).items())))

    def seconds(self, kind: str, nbytes: int, world: int) -> float:
        if world == 1 or nbytes <= 0:
            return 0.0
        pts = next((p for k, p in self.kinds if k == kind), None)
        if pts is None:  # the all-reduce's, at the bytes a ring moves alike
            pts, size = self.points, nbytes * ring_factor(kind, world) / ring_factor("all_reduce", world)
        else:
            size = nbytes
        if size <= pts[0][0] or len(pts) == 1:
            return pts[0][1]
        for (b0, s0), (b1, s1) in zip(pts, pts[1:]):
            if size <= b1:
                break
        return max(0.0, s0 + (s1 - s0) * (size - b0) / (b1 - b0))


def timed_link(alpha_s: float | None, probed: "dict[str, list[tuple[int, float]]]") -> RealTransfer | None:
    """A real link's collectives as start-up timed them on it (``probed``: kind -> (bytes,
    seconds), the all-reduce's among them), through the one-element all-reduce's ``alpha_s`` at
    no bytes: LinkModel.measured.  None before they were timed."""
    if not probed or "all_reduce" not in probed:
        return None
    return RealTransfer.probed(alpha_s or 0.0, probed["all_reduce"], {k: v for k, v in probed.items() if k != "all_reduce"})
