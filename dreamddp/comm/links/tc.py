"""``bandwidth.backend=tc``: real kernel shaping with tbf, one network namespace per worker.

The kernel paces the real traffic, so nothing is paced here (that would count
the link twice); the rate is kept for the run record.  The simulator's model of
this link is what start-up measures on it: gloo does not move bytes at the ring
formula's pace under tbf (somewhat slower at the set rate, and its reduce-scatter
and all-gather each their own way: results/bench/tc), so every collective kind is timed at a
small and a large size (``PROBE``) and the model interpolates between them.
torchrun forks every worker into one namespace, so this link brings its own
launcher: one process per shaped namespace (dreamddp.netshape), needing root
or an unprivileged user namespace, one host only.
"""

from __future__ import annotations

import logging
import os

from dreamddp import netshape
from dreamddp.checks import ConfigError, positive
from dreamddp.comm.cost import KINDS, LinkModel, timed_link
from dreamddp.comm.links.base import Link
from dreamddp.comm.links.registry import LINKS
from dreamddp.procs import supervise

log = logging.getLogger(__name__)
LAUNCHED_ENV = "DREAMDDP_LAUNCHED"  # set in workers that dreamddp-run started
# The sizes each collective kind is timed at (bytes of its whole tensor): about two tbf buckets
# (netshape.MIN_BURST), where a transfer is mostly burst, and large enough for the steady rate;
# two rounds after one dropped (about 2 s per run at the tens of Mbit/s the benchmark sets).
PROBE_BYTES = (256 * 1024, 2 * 1024 * 1024)
PROBE_ROUNDS = {"repeats": 2, "warmup": 1}


@LINKS.register
class TcLink(Link):
    name = "tc"
    per_worker_rates = True

    def __init__(self, gbps: float, calibration: float = 1.0, worker_gbps=None):
        self.gbps, self.calibration = float(gbps), float(calibration)
        # Per-worker uplinks: a ring all-reduce goes at the slowest one's pace, so the model does too
        self.worker_gbps = [float(g) for g in worker_gbps] if worker_gbps else None
        self._probed: dict[str, list[tuple[int, float]]] | None = None  # kind -> (bytes, s), at start-up

    @classmethod
    def check(cls, bandwidth, cluster) -> None:
        cls.check_waits(bandwidth)
        if bandwidth.gbps is None:
            raise ConfigError("bandwidth.gbps: required for backend tc (a fixed rate for the shaper)")
        positive("bandwidth.gbps", bandwidth.gbps)
        positive("bandwidth.calibration", bandwidth.calibration)
        if bandwidth.latency_ms:
            raise ConfigError(f"bandwidth.latency_ms={bandwidth.latency_ms}: not supported by backend tc "
                              "(tbf only); use emulated")
        if bandwidth.comm_ratio is not None:
            raise ConfigError(f"bandwidth.comm_ratio={bandwidth.comm_ratio}: backend tc shapes at the fixed "
                              "bandwidth.gbps; use emulated for a comm/backward ratio")
        if cluster is not None and cluster.nnodes > 1:  # srun must not start unshaped tc runs
            raise ConfigError(f"cluster.nnodes={cluster.nnodes}: bandwidth backend tc shapes namespaces on one "
                              "host; use the emulated link across nodes (bandwidth=1gbit)")
        cls.check_worker_gbps(bandwidth, cluster)

    @classmethod
    def check_host(cls, cfg) -> None:
        try:
            netshape.check_tc_available(int(cfg.cluster.nnodes))  # not root without user namespaces, no tbf, ...
        except netshape.TcUnavailable as exc:
            raise ConfigError(str(exc)) from exc

    @classmethod
    def check_worker(cls, environ=None) -> None:
        """A worker must sit in the namespace dreamddp-run made for it."""
        if not (os.environ if environ is None else environ).get(LAUNCHED_ENV):
            raise ConfigError("bandwidth.backend=tc: workers must be started by dreamddp-run, not torchrun/srun "
                              "(one network namespace per worker)")

    @classmethod
    def from_config(cls, bandwidth) -> "TcLink":
        return cls(bandwidth.gbps, bandwidth.calibration, getattr(bandwidth, "worker_gbps", None))

    def describe(self) -> dict:
        uplinks = {"worker_gbps": self.worker_gbps} if self.worker_gbps else {}
        ms = lambda probed: [[b, s * 1e3] for b, s in probed]  # noqa: E731
        measured = {} if self._probed is None else {"link_transfer_ms": {k: ms(v) for k, v in self._probed.items()}}
        return {**super().describe(), "gbps": self.gbps, "latency_ms": 0.0, **uplinks, **measured}

    def calibrate(self, warmup) -> dict:
        """Alpha, then each collective kind timed on the shaped link (``PROBE_BYTES``)."""
        out = super().calibrate(warmup)
        if warmup.world > 1:
            self._probed = {kind: warmup.transfer_times(kind, PROBE_BYTES, PROBE_ROUNDS) for kind in KINDS}
            out["link_transfer_s"] = self._probed
        return out

    def setup_state(self) -> dict:
        return {**super().setup_state(), "link_transfer_s": self._probed}

    def load_setup_state(self, state: dict) -> None:
        super().load_setup_state(state)
        probed = state.get("link_transfer_s")
        self._probed = None if probed is None else {k: [(int(b), float(t)) for b, t in v] for k, v in probed.items()}

    def model(self) -> LinkModel:
        gbps = min(self.worker_gbps) if self.worker_gbps else self.gbps
        return LinkModel(gbps, 0.0, self.calibration, self.alpha_s or 0.0, timed_link(self.alpha_s, self._probed))

    @staticmethod
    def launch_workers(cfg, command: list[str], env: dict) -> int:
        """One worker per shaped namespace, each running ``command`` (re-runs it as the
        launcher inside a user namespace when not root)."""
        if netshape.needs_user_namespace():
            # Become root of a fresh user+net+mount namespace; the launcher there shapes.
            return supervise(netshape.userns_argv(command), env)
        port = int(cfg.cluster.master_port) or 29500  # private namespaces: any port is free
        per_worker = cfg.bandwidth.get("worker_gbps")
        rates = [float(g) for g in per_worker] if per_worker else float(cfg.bandwidth.gbps)
        net = netshape.ShapedNetwork(int(cfg.cluster.nproc), rates)
        log.info("starting %d workers in shaped namespaces at %s Gbit/s", cfg.cluster.nproc, rates)
        return netshape.launch_shaped(net, lambda rank: command, env, port)
