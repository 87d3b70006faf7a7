"""The two-level link ``dreamddp-plan`` charges: R replicas (sites) of W workers each.

A collective of ``S`` bytes (its whole tensor: the all-reduce buffer, the all-gather's
output) over the ``n = R * W`` workers runs hierarchically, as NCCL's and torch's
hierarchical collectives do:

    all-reduce:  reduce-scatter inside each replica (fast link, W workers), then W
                 all-reduces of S/W bytes across the R replicas in parallel (one per
                 shard, all through the replica's slow uplink), then all-gather inside
                 each replica (fast link):

        T = alpha + 2 (R-1)/R * S / B_slow + 2 (R-1) * l_slow
                  + 2 (W-1)/W * S / B_fast + 2 (W-1) * l_fast

    reduce-scatter / all-gather: the same with (R-1)/R, (R-1), (W-1)/W and (W-1).

``B_slow`` is each replica's uplink (its W workers share it), ``B_fast`` each worker's link
inside a replica, ``l`` one ring hop's latency, ``alpha`` the fixed cost of one collective.
With W = 1 it is a flat ring across the replicas (comm/cost.py's ``collective_time``: the
same numbers as the simulator's ``LinkModel``); with R = 1 a flat ring on the fast link.

Bytes per worker per iteration on the slow link (``slow_bytes``): each replica sends
f(R) * S over its uplink (f = 2(R-1)/R for an all-reduce), shared by its W workers, so
f(R) * S / W per worker; for W = 1 the ring's f(n) * S, the definition the run record uses.
The world size enters only here: the simulator times one rank (the ranks are alike).
"""

from __future__ import annotations

from dataclasses import dataclass

from dreamddp.comm.cost import latency_hops, ring_factor
from dreamddp.planner.spec import Cluster


def _ring(kind: str, nbytes: float, n: int, gbps: float, latency_s: float) -> float:
    if n < 2:
        return 0.0
    return ring_factor(kind, n) * nbytes * 8.0 / (gbps * 1e9) + latency_hops(kind, n) * latency_s


@dataclass(frozen=True)
class HierLink:
    """Seconds of one collective on a cluster's two levels (module docstring); duck-types
    ``comm.cost.LinkModel`` (``seconds``, ``alpha_s``) for the schedulers."""

    cluster: Cluster

    @property
    def alpha_s(self) -> float:
        return self.cluster.alpha_s

    def seconds(self, kind: str, nbytes: int | float, world: int | None = None) -> float:
        c = self.cluster
        if world is not None and world != c.workers:
            raise ValueError(f"HierLink: a collective over {world} workers on a cluster of {c.workers}")
        if c.workers < 2:
            return 0.0
        return (self.alpha_s + _ring(kind, nbytes, c.replicas, c.slow.gbps, c.slow.latency_s)
                + _ring(kind, nbytes, c.workers_per_replica, c.fast.gbps, c.fast.latency_s))

    def slow_bytes(self, kind: str, nbytes: int | float) -> float:
        """Bytes one worker sends across replicas for this collective (module docstring)."""
        c = self.cluster
        if c.replicas < 2:
            return 0.0
        return ring_factor(kind, c.replicas) * nbytes / c.workers_per_replica
