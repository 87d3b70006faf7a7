"""``bandwidth.backend=ideal``: no pacing; a collective completes when the real one does."""

from __future__ import annotations

from dreamddp.checks import ConfigError
from dreamddp.comm.links.base import Link
from dreamddp.comm.links.registry import LINKS

# What to choose instead when a link setting is given: the links that use it.
_USED_BY = {
    "gbps": "an emulated link (bandwidth=1gbit, or bandwidth.backend=emulated) or a kernel-shaped one "
            "(bandwidth=tc_1gbit, or bandwidth.backend=tc)",
    "latency_ms": "an emulated link (bandwidth=1gbit, or bandwidth.backend=emulated)",
    "comm_ratio": "bandwidth=ratio7 (an emulated link whose rate is set from it)",
}


@LINKS.register
class IdealLink(Link):
    name = "ideal"

    @classmethod
    def check(cls, bandwidth, cluster) -> None:
        """A rate, latency or comm/backward ratio would be ignored here, and the run would go
        unshaped while its record says otherwise: refused.  ideal.yaml leaves them unset
        (null, 0), so any value was asked for, on the command line or by a preset switched
        to backend=ideal."""
        super().check(bandwidth, cluster)
        given = {"gbps": bandwidth.gbps is not None, "latency_ms": bool(bandwidth.latency_ms),
                 "comm_ratio": bandwidth.comm_ratio is not None}
        for key, is_given in given.items():
            if is_given:
                raise ConfigError(f"bandwidth.{key}={getattr(bandwidth, key)}: bandwidth=ideal does not shape "
                                  f"traffic and would ignore it; choose {_USED_BY[key]}")

    @classmethod
    def from_config(cls, bandwidth) -> "IdealLink":
        return cls()
