"""Algorithm registry: ``algo.name`` -> class (one small module each)."""

from dreamddp.algorithms.ascwfbp import ASCWFBP
from dreamddp.algorithms.base import Algorithm
from dreamddp.algorithms.ddp import DDP
from dreamddp.algorithms.dreamddp import DreamDDP
from dreamddp.algorithms.flsgd import FLSGD
from dreamddp.algorithms.partial import PLSGDENP
from dreamddp.algorithms.ssgd import SSGD

ALGORITHMS: dict[str, type[Algorithm]] = {
    cls.name: cls for cls in (DDP, SSGD, ASCWFBP, FLSGD, PLSGDENP, DreamDDP)
}


def build_algorithm(cfg) -> Algorithm:
    try:
        cls = ALGORITHMS[cfg.name]
    except KeyError:
        raise ValueError(f"algo={cfg.name}: unknown algorithm; choose from {', '.join(ALGORITHMS)}") from None
    return cls(cfg)


__all__ = ["ALGORITHMS", "Algorithm", "build_algorithm"]
