"""PLSGD-ENP: partial local SGD with the equal-number partition.

Units in backward order are cut into H contiguous groups of equal count
(schedule.partition.equal_count_groups; the first n % H groups, output side,
take one unit more); group g averages its parameters when t mod H == g,
launched as each unit's gradient is ready, in place, complete by the end of
backward; then the optimizer applies the LOCAL gradient on top of the averaged
parameters (DreamDDP's deliberate ordering, as the paper's implementation does).

Numerics relative to S-SGD: replicas are equal only right after a unit's
average and differ by one local step afterwards; every unit is averaged once
per H iterations (the same traffic as full local SGD).  With an outer step
(``algo.outer_optimizer``) each group takes it on its anchor when it syncs:
layer-wise DiLoCo (engine/pipeline.py).
"""

from __future__ import annotations

from dreamddp.algorithms.base import ALGORITHMS, Algorithm, Display
from dreamddp.checks import ConfigError
from dreamddp.schedule.delay import inplace_op
from dreamddp.schedule.partition import equal_count_groups


@ALGORITHMS.register
class PLSGDENP(Algorithm):
    name = "plsgd_enp"
    display = Display(50, periodic=True, authors_key="pipe_seq_localsgd")
    syncs = "param"

    @classmethod
    def check_model(cls, cfg, layout) -> None:
        """Every iteration of the window needs a unit of its own."""
        units, _ = layout()
        if cfg.H > len(units):
            raise ConfigError(f"algo.H={cfg.H}: must be between 1 and the model's {len(units)} units")

    def make_plan(self, layout) -> None:
        self.groups = equal_count_groups(len(layout), self.cfg.H)
        self._plans = [tuple(inplace_op(u, u, False) for u in g) for g in self.groups]

    def base_plan(self, t: int):
        return self._plans[t % self.cfg.H]

    def describe(self) -> dict:
        return {**super().describe(), "H": self.cfg.H, "groups": [list(g) for g in self.groups]}
