"""``bandwidth.backend=tc``: real kernel shaping with tbf, one network namespace per worker.

The kernel paces the real traffic, so nothing is paced here (that would count
the link twice); the rate is kept for the run record and the simulator.
torchrun forks every worker into one namespace, so this link brings its own
launcher: one process per shaped namespace (dreamddp.netshape), needing root
or an unprivileged user namespace, one host only.
"""

from __future__ import annotations

import logging
import os

from dreamddp import netshape
from dreamddp.checks import ConfigError, positive
from dreamddp.comm.cost import LinkModel
from dreamddp.comm.links.base import Link
from dreamddp.comm.links.registry import LINKS
from dreamddp.procs import supervise

log = logging.getLogger(__name__)
LAUNCHED_ENV = "DREAMDDP_LAUNCHED"  # set in workers that dreamddp-run started


@LINKS.register
class TcLink(Link):
    name = "tc"
    per_worker_rates = True

    def __init__(self, gbps: float, calibration: float = 1.0, worker_gbps=None):
        self.gbps, self.calibration = float(gbps), float(calibration)
        # Per-worker uplinks: a ring all-reduce goes at the slowest one's pace, so the model does too
        self.worker_gbps = [float(g) for g in worker_gbps] if worker_gbps else None

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
        return {**super().describe(), "gbps": self.gbps, "latency_ms": 0.0, **uplinks}

    def model(self) -> LinkModel:
        gbps = min(self.worker_gbps) if self.worker_gbps else self.gbps
        return LinkModel(gbps, 0.0, self.calibration, self.alpha_s or 0.0)

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
