"""PLSGD-ENP: partial local SGD with the equal-number partition.

Units in backward order are cut into H contiguous groups of equal count
(schedule.partition.equal_count_groups; the first n % H groups, output side,
take one unit more); group g averages its parameters when t mod H == g,
launched as each unit's gradient is ready (the mechanism in partial.py).
"""

from __future__ import annotations

from dreamddp.algorithms.base import ALGORITHMS, Display
from dreamddp.algorithms.partial import PartialParamSync
from dreamddp.checks import ConfigError
from dreamddp.schedule.partition import equal_count_groups


@ALGORITHMS.register
class PLSGDENP(PartialParamSync):
    name = "plsgd_enp"
    display = Display(50, periodic=True, authors_key="pipe_seq_localsgd")

    @classmethod
    def check_model(cls, cfg, layout) -> None:
        """Every iteration of the window needs a unit of its own."""
        units, _ = layout()
        if cfg.H > len(units):
            raise ConfigError(f"algo.H={cfg.H}: must be between 1 and the model's {len(units)} units")

    def assignment(self, layout) -> list[list[int]]:
        return equal_count_groups(len(layout), self.cfg.H)
