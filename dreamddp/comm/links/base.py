"""What every link type provides: pacing, a description, a cost model, calibration, launching.

A link type is one module in this package holding one :class:`Link` subclass
registered in ``LINKS`` under its ``bandwidth.backend`` name.  It owns:

- ``check(bandwidth, cluster)``: its rules on the ``bandwidth`` fields;
- ``check_host(cfg)``: whether this host can run it (launcher only);
- ``reserve``: the pacing of one collective (the communicator calls it);
- ``describe()``: what the run record says about it;
- ``model()``: the cost model the simulator charges (None: use measured times);
- ``calibrate(warmup)`` and ``setup_state()``: start-up measurements that fix
  its parameters (every link measures ``alpha_s``, the cost of one collective
  on the real backend, see comm/cost.py), and what a checkpoint keeps of them;
- ``launch_workers``: a launcher of its own (None: torchrun on this host).
"""

from __future__ import annotations

import math
from typing import ClassVar

from dreamddp.checks import ConfigError, choice, positive
from dreamddp.comm.cost import CARRIERS, QUEUED, LinkModel, RealTransfer


class Link:
    name: ClassVar[str] = "base"
    # True: the communicator holds every collective until this link's deadline.
    # Code that talks to the process group itself (torch DDP) escapes such pacing.
    paced: ClassVar[bool] = False
    # True: it takes bandwidth.worker_gbps, one uplink rate per worker (a ring goes at the slowest's)
    per_worker_rates: ClassVar[bool] = False
    alpha_s: float | None = None  # seconds one collective costs on the real backend; None until measured

    @classmethod
    def check(cls, bandwidth, cluster) -> None:
        """Refuse bad ``bandwidth`` fields for this link (one line, naming the field)."""
        cls.check_waits(bandwidth)
        positive("bandwidth.gbps", bandwidth.gbps, optional=True)  # a rate, whether or not this link uses it
        cls.check_worker_gbps(bandwidth, cluster)

    @classmethod
    def check_worker_gbps(cls, bandwidth, cluster) -> None:
        """``bandwidth.worker_gbps``: one positive rate per worker, on a link that models them."""
        rates = bandwidth.worker_gbps
        if rates is None:
            return
        if not cls.per_worker_rates:
            raise ConfigError(f"bandwidth.worker_gbps: per-worker rates need a link that models them "
                              f"(bandwidth backend emulated or tc); the {cls.name} link does not pace")
        world = None if cluster is None else int(cluster.nproc) * int(cluster.nnodes)
        if world is not None and len(rates) != world:
            raise ConfigError(f"bandwidth.worker_gbps: {len(rates)} rates for {world} workers (cluster.nproc="
                              f"{cluster.nproc} x cluster.nnodes={cluster.nnodes}); one per worker")
        for i, g in enumerate(rates):
            if not (g > 0 and math.isfinite(g)):
                raise ConfigError(f"bandwidth.worker_gbps[{i}]={g}: must be a finite number > 0")

    @classmethod
    def check_waits(cls, bandwidth) -> None:
        """The carrier and core-holding options: only a paced link has waits of its own."""
        choice("bandwidth.carrier", bandwidth.carrier, ("auto", *CARRIERS))
        if bandwidth.carrier in QUEUED and not cls.paced:
            raise ConfigError(f"bandwidth.carrier={bandwidth.carrier}: only a paced link (emulated) can defer its real "
                              f"collectives; on the {cls.name} link the real traffic is what is measured")
        if bandwidth.hold_core and not cls.paced:
            raise ConfigError(f"bandwidth.hold_core=true: only a paced link (emulated) has waits of its own to "
                              f"hold a core through; the {cls.name} link's waits are the real collectives'")

    @classmethod
    def check_host(cls, cfg) -> None:
        """Refuse a host that cannot run this link (runs in the launcher only)."""

    @classmethod
    def check_worker(cls, environ=None) -> None:
        """Refuse a worker started in a way this link cannot serve (runs in each worker)."""

    @classmethod
    def from_config(cls, bandwidth) -> "Link":
        raise NotImplementedError

    def reserve(self, kind: str, nbytes: int, world: int, now: float) -> tuple[float, float]:
        """Return (start, deadline) in ``time.perf_counter()`` seconds; no pacing by default."""
        return now, now

    def carrier(self, requested: str, device, late: bool = False) -> str:
        """How the real collectives run (comm/communicator.py): always at launch here,
        since an unpaced link's real traffic is the measurement."""
        return "eager"

    def hold_core(self, requested: bool | None, device, contended: bool) -> bool:
        """Whether a waiting worker keeps its core (comm/communicator.py); ``contended``: the
        host's cores are shared by more worker threads, with no CPU quota.  Never here:
        nothing is paced."""
        return False

    def describe(self) -> dict:
        """Plain-data description for the run record."""
        alpha = None if self.alpha_s is None else self.alpha_s * 1e3
        return {"backend": self.name, "paced": self.paced, "alpha_ms": alpha}

    def reset(self) -> None:
        """Forget queued transfers (e.g. after warm-up); no-op for stateless links."""

    def shift(self, dt: float) -> None:
        """Delay queued transfers by ``dt`` seconds (the clock was paused); no-op for stateless links."""

    def model(self) -> LinkModel | None:
        """The simulator's cost model of this link; None: the profile's measured times."""
        return None

    # The real backend's time per collective by size, where the link measured it (a paced link,
    # whose deferred carrier exposes it at a wait); None: the link's own times say it all.
    real_transfer: RealTransfer | None = None

    @property
    def needs_calibration(self) -> bool:
        return self.alpha_s is None

    def calibrate(self, warmup) -> dict:
        """Fix parameters from start-up measurements (``warmup`` times the live job); returns
        what the run record should keep.  Here: alpha, the one-collective cost."""
        self.alpha_s = warmup.collective_alpha()
        return {"alpha_s": self.alpha_s}

    def setup_state(self) -> dict:
        """What calibration decided, for a checkpoint (a resumed run does not measure again)."""
        return {"alpha_s": self.alpha_s}

    def load_setup_state(self, state: dict) -> None:
        self.alpha_s = state.get("alpha_s")

    # A launcher of its own: ``launch_workers(cfg, command, env) -> exit status``, starting
    # cluster.nproc workers that each run ``command``; None = torchrun on this host.
    launch_workers = None
