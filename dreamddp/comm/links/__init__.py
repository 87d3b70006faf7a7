"""Link types: one module per ``bandwidth.backend``, found by import (see base.Link)."""

from dreamddp.comm.links.base import Link
from dreamddp.comm.links.registry import LINKS
from dreamddp.registry import import_all

import_all(__name__, __path__)


def build_link(bandwidth) -> Link:
    """The link the ``bandwidth`` config section describes (its rules checked first)."""
    cls = LINKS.lookup(bandwidth.backend)
    cls.check(bandwidth, None)
    return cls.from_config(bandwidth)


__all__ = ["LINKS", "Link", "build_link"]
