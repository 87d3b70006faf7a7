"""``bandwidth.backend=emulated``: a FIFO virtual clock per worker, paced by the alpha-beta ring model.

What lets a laptop reproduce results about slow networks: the real collective
runs over loopback at full speed, and the worker is then held until a virtual
clock says the bytes would have crossed a link of the configured bandwidth.
The clock is FIFO per worker, like a real NIC queue, so a second collective
launched while the first is still "on the wire" starts only when the first
one ends, while compute carries on meanwhile.

A collective occupies the link for alpha (the cost of one collective on the
real backend, measured at start-up) plus the ring model's latency hops and
bytes / bandwidth (comm/cost.py).  The rate is ``bandwidth.gbps``, or, with
``bandwidth.comm_ratio``, derived at start-up: the all-reduce of all
parameters is made to take ``comm_ratio`` times the backward pass measured on
the live job (the paper's GPT-2 regime is about 7).  Until calibrated the
link refuses to pace.  With ``bandwidth.worker_gbps`` (one uplink rate per
worker) every ring collective goes at the slowest uplink's pace, as a ring
does: each hop waits for the slowest sender, so every worker is paced at
min(worker_gbps) (``gbps`` stays the nominal rate in the record).
"""

from __future__ import annotations

import math
import threading

from dreamddp.checks import ConfigError, at_least, positive
from dreamddp.comm.cost import LinkModel, RealTransfer, ring_factor
from dreamddp.comm.links.base import Link
from dreamddp.comm.links.registry import LINKS


@LINKS.register
class EmulatedLink(Link):
    name = "emulated"
    paced = True
    per_worker_rates = True

    def __init__(self, gbps: float | None, latency_ms: float = 0.0, calibration: float = 1.0,
                 comm_ratio: float | None = None, alpha_s: float | None = None, worker_gbps=None):
        self._lock = threading.Lock()
        self._gbps = None if gbps is None else float(gbps)
        self.worker_gbps = [float(g) for g in worker_gbps] if worker_gbps else None
        self.latency_ms = float(latency_ms)
        self.calibration = float(calibration)
        self.comm_ratio = comm_ratio
        self.alpha_s = alpha_s  # None: measured by calibrate() at start-up
        self._probed: list[tuple[int, float]] | None = None  # the real backend's all-reduces by size, ditto
        self._probed_kinds: dict[str, list[tuple[int, float]]] | None = None  # its other collectives, ditto
        self._free_at = -math.inf

    @classmethod
    def check(cls, bandwidth, cluster) -> None:
        super().check(bandwidth, cluster)
        positive("bandwidth.comm_ratio", bandwidth.comm_ratio, optional=True)
        positive("bandwidth.calibration", bandwidth.calibration)
        at_least("bandwidth.latency_ms", bandwidth.latency_ms, 0)
        if bandwidth.gbps is None and bandwidth.comm_ratio is None and bandwidth.worker_gbps is None:
            raise ConfigError("bandwidth.gbps: required for backend emulated (or set bandwidth.comm_ratio)")
        if bandwidth.worker_gbps is not None and bandwidth.comm_ratio is not None:
            raise ConfigError(f"bandwidth.comm_ratio={bandwidth.comm_ratio}: sets one rate for all workers; not "
                              "with bandwidth.worker_gbps")
        if bandwidth.gbps is not None and bandwidth.comm_ratio is not None:
            raise ConfigError(f"bandwidth.comm_ratio={bandwidth.comm_ratio}: set either bandwidth.gbps or "
                              "bandwidth.comm_ratio, not both")

    @classmethod
    def from_config(cls, bandwidth) -> "EmulatedLink":
        return cls(bandwidth.gbps, bandwidth.latency_ms, bandwidth.calibration, bandwidth.comm_ratio,
                   worker_gbps=bandwidth.worker_gbps)

    @property
    def gbps(self) -> float | None:
        return self._gbps

    @property
    def rate(self) -> float | None:
        """The rate every worker is paced at: the slowest uplink's, or the one rate."""
        return min(self.worker_gbps) if self.worker_gbps else self._gbps

    @property
    def free_at(self) -> float:
        """When the last reserved transfer leaves the wire (-inf when idle since reset)."""
        return self._free_at

    def reserve(self, kind: str, nbytes: int, world: int, now: float) -> tuple[float, float]:
        if self.rate is None or self.alpha_s is None:
            raise RuntimeError("emulated link: not calibrated yet (its alpha, and a comm_ratio's rate, are measured at start-up)")
        with self._lock:
            start = max(now, self._free_at)
            deadline = start + self.model().seconds(kind, nbytes, world)
            self._free_at = deadline
        return start, deadline

    def reset(self) -> None:
        with self._lock:
            self._free_at = -math.inf

    def shift(self, dt: float) -> None:
        with self._lock:
            self._free_at += dt

    def describe(self) -> dict:
        ms = lambda probed: [[b, s * 1e3] for b, s in probed]  # noqa: E731
        out = {**super().describe(), "gbps": self._gbps, "latency_ms": self.latency_ms,
               "calibration": self.calibration, "real_transfer_ms": None if self._probed is None else ms(self._probed)}
        if self.worker_gbps:
            out["worker_gbps"] = self.worker_gbps
        if self._probed_kinds:
            out["real_transfer_kinds_ms"] = {k: ms(v) for k, v in self._probed_kinds.items()}
        return out

    @property
    def real_transfer(self) -> RealTransfer | None:
        """The real backend's time per collective by size (the one-element probe's alpha, then
        the sizes probed at start-up): what the deferred carrier adds at a wait."""
        if self._probed is None or self.alpha_s is None:
            return None
        return RealTransfer.probed(self.alpha_s, self._probed, self._probed_kinds)

    def model(self) -> LinkModel:
        return LinkModel(self.rate, self.latency_ms / 1e3, self.calibration, self.alpha_s or 0.0)

    def carrier(self, requested: str, device, late: bool = False) -> str:
        """``auto``: eager on GPUs, whose collectives run on their own streams; on CPU, where
        the workers' compute starves gloo's threads, deferred, or step where averages merge
        ``late`` (an algorithm's ``merges_late``): they start as the iteration ends, merged, and
        travel behind the next one's compute, so the slowest rank has that long to launch its
        own (4 workers on 2 cores, small GPT-2, merge_delay=1: 114 ms per iteration against
        118 deferred; 2 workers one per core: 422 against 424), and an average awaited in the
        next forward (overlap_forward) is not carried whole at that wait (results/bench_carrier/)."""
        if requested != "auto":
            return requested
        if getattr(device, "type", str(device)) == "cuda":
            return "eager"
        return "step" if late else "deferred"

    def hold_core(self, requested: bool | None, device, contended: bool) -> bool:
        """``None`` (auto): on a contended CPU host (a sleeping worker would lend its core
        to the others)."""
        if requested is not None:
            return requested
        return contended and getattr(device, "type", str(device)) != "cuda"

    @property
    def needs_calibration(self) -> bool:
        return super().needs_calibration or self.rate is None

    def calibrate(self, warmup) -> dict:
        """Measure alpha; with comm_ratio, set the rate so that the all-reduce of all
        parameters (bandwidth term) takes comm_ratio x the backward pass."""
        out = super().calibrate(warmup)
        self._probed = warmup.real_transfer()
        out["real_transfer_s"] = self._probed
        self._probed_kinds = warmup.real_transfer_kinds()
        if self._probed_kinds:
            out["real_transfer_kinds_s"] = self._probed_kinds
        if self.comm_ratio is not None:
            backward = warmup.backward_time()
            nbytes, world = warmup.model_bytes, warmup.world
            self._gbps = ring_factor("all_reduce", world) * nbytes * 8 / (self.comm_ratio * backward) / 1e9
            out.update(comm_ratio=self.comm_ratio, backward=backward, model_bytes=nbytes, gbps=self._gbps)
        return out

    def setup_state(self) -> dict:
        return {**super().setup_state(), "gbps": self._gbps, "real_transfer_s": self._probed,
                "real_transfer_kinds_s": self._probed_kinds}

    def load_setup_state(self, state: dict) -> None:
        super().load_setup_state(state)
        if state.get("gbps") is not None:
            self._gbps = float(state["gbps"])
        pairs = lambda probed: [(int(b), float(s)) for b, s in probed]  # noqa: E731
        if state.get("real_transfer_s") is not None:
            self._probed = pairs(state["real_transfer_s"])
        if state.get("real_transfer_kinds_s"):
            self._probed_kinds = {k: pairs(v) for k, v in state["real_transfer_kinds_s"].items()}
