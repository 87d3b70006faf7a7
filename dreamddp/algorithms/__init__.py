"""Algorithm registry: ``algo.name`` -> class, one module each (see base.Algorithm).

Every public module of this package is imported here, so an algorithm is
added by adding its module (and its conf/algo yaml); a module registers its
class with ``@ALGORITHMS.register``.  ``register_algorithm`` adds one from
elsewhere (a plugin, a test).
"""

from dreamddp.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm, Display
from dreamddp.registry import import_all

import_all(__name__, __path__)


def register_algorithm(cls: type[Algorithm]) -> type[Algorithm]:
    """Add an algorithm defined outside this package; call ``dreamddp.config.setup()``
    afterwards so Hydra knows its ``algo`` schema."""
    return ALGORITHMS.register(cls)


def build_algorithm(cfg, setup: dict | None = None) -> Algorithm:
    """The algorithm ``cfg.name`` names, complete: config checked, set-up applied."""
    return ALGORITHMS.lookup(cfg.name).build(cfg, setup)


# Keys older records carry, as the sync stages name them now (engine/stages.py)
LEGACY = {"quantize": "compress", "quant_block": "compress_block"}


def algo_config(values: dict):
    """An algorithm's Config from a plain mapping (e.g. a run record's ``config.algo``);
    older records' keys are renamed (``LEGACY``, ``outer_delay=1``: ``timing=late``), others
    its Config does not declare are ignored."""
    cls = ALGORITHMS.lookup(values["name"]).Config
    fields = cls.__dataclass_fields__
    values = {LEGACY.get(k, k): v for k, v in values.items()}
    if values.pop("outer_delay", 0):
        values["timing"] = "late"
    return cls(**{k: v for k, v in values.items() if k in fields})


__all__ = ["ALGORITHMS", "AlgoConfig", "Algorithm", "Display", "algo_config", "build_algorithm", "register_algorithm"]
