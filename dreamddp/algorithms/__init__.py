"""Algorithm registry: ``algo.name`` -> class (one small module each)."""

from dreamddp.algorithms.ascwfbp import ASCWFBP
from dreamddp.algorithms.base import Algorithm
from dreamddp.algorithms.ddp import DDP
from dreamddp.algorithms.dear import DeAR
from dreamddp.algorithms.dreamddp import DreamDDP
from dreamddp.algorithms.dreamddp_overlap import DreamDDPOverlap
from dreamddp.algorithms.flsgd import FLSGD
from dreamddp.algorithms.partial import PLSGDENP
from dreamddp.algorithms.ssgd import SSGD
from dreamddp.algorithms.streaming_diloco import StreamingDiLoCo

ALGORITHMS: dict[str, type[Algorithm]] = {
    cls.name: cls for cls in (DDP, SSGD, ASCWFBP, FLSGD, PLSGDENP, DreamDDP, StreamingDiLoCo, DeAR)
}


def build_algorithm(cfg) -> Algorithm:
    try:
        cls = ALGORITHMS[cfg.name]
    except KeyError:
        raise ValueError(f"algo={cfg.name}: unknown algorithm; choose from {', '.join(ALGORITHMS)}") from None
    if cls is DreamDDP and getattr(cfg, "overlap_forward", False):
        cls = DreamDDPOverlap  # same name and schedule, averages completed in the next forward
    return cls(cfg)


__all__ = ["ALGORITHMS", "Algorithm", "build_algorithm"]
