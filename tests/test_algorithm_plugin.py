"""A new algorithm is one module plus one conf/algo yaml: proven with a toy defined here only.

``EveryK`` averages all gradients after backward every k-th iteration and
takes local steps otherwise.  Everything about it lives in this file: its
Config (with its own check), its plan (stated once), its warm-up need and its
display metadata.  Nothing in dreamddp/ names it, yet Hydra composes
``algo=every_k``, validation applies its rule, the engine runs its plan, the
simulator times the same plan, warm-up prepares it and results tables order it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from dreamddp.algorithms import ALGORITHMS, AlgoConfig, Algorithm, Display, build_algorithm, register_algorithm
from dreamddp.checks import ConfigError, at_least
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.plan import Payload, SyncOp, When
from dreamddp.engine.units import enumerate_units
from engine_fixtures import engine_step, small_model

YAML = """\
# EveryK: all gradients averaged after backward every k-th iteration, local steps otherwise.
defaults:
  - /schema/algo/every_k   # the typed options: tests/test_algorithm_plugin.py
  - _self_

name: every_k
k: 3          # average every k-th iteration
"""


@dataclass
class EveryKConfig(AlgoConfig):
    # Average the gradients after backward of every k-th iteration (t % k == k - 1).
    k: int = 2


class EveryK(Algorithm):
    name = "every_k"
    Config = EveryKConfig
    display = Display(15)
    syncs = "grad"

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        at_least("algo.k", cfg.k, 1)

    @classmethod
    def prepare(cls, cfg, warmup) -> dict:
        return {"units_seen": len(warmup.engine.units)}

    def make_plan(self, layout) -> None:
        self._sync = (SyncOp(0, len(layout) - 1, Payload.GRAD, When.END_OF_BACKWARD, When.END_OF_BACKWARD),)

    def base_plan(self, t: int):
        return self._sync if t % self.cfg.k == self.cfg.k - 1 else ()

    def describe(self) -> dict:
        return {"name": self.name, "k": self.cfg.k, **self.setup}


@pytest.fixture
def every_k(tmp_path):
    """Registered for one test, with its yaml in a config directory of its own."""
    import dreamddp.config

    register_algorithm(EveryK)
    dreamddp.config.setup()  # Hydra learns its schema
    (tmp_path / "algo").mkdir()
    (tmp_path / "algo" / "every_k.yaml").write_text(YAML)
    yield f"hydra.searchpath=[file://{tmp_path}]"
    del ALGORITHMS[EveryK.name]


def test_composes_validates_and_refuses_by_its_own_rule(compose_cfg, every_k):
    from dreamddp.config import validate

    cfg = compose_cfg(["algo=every_k", every_k])
    assert (cfg.algo.name, cfg.algo.k, cfg.algo.H) == ("every_k", 3, 10)
    validate(cfg)
    with pytest.raises(ConfigError, match="^algo.k=0: must be >= 1$"):
        validate(compose_cfg(["algo=every_k", "algo.k=0", every_k]))
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):  # typed: another algorithm's option is refused
        compose_cfg(["algo=every_k", "algo.bucket_mb=1", every_k])


def test_engine_runs_its_plan(compose_cfg, every_k):
    cfg = compose_cfg(["algo=every_k", every_k]).algo
    model = small_model()
    comm = FakeCommunicator(world_size=2)
    warm = SimpleNamespace(engine=SimpleNamespace(units=enumerate_units(model)))
    algo = build_algorithm(cfg, EveryK.prepare(cfg, warm))
    engine = PartialSyncEngine(model, enumerate_units(model), comm, algo)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    synced = [engine_step(engine, model, opt, t).collectives for t in range(6)]
    assert synced == [0, 0, 1, 0, 0, 1]
    assert [c.tag for c in comm.calls] == ["grad:0-3"] * 2
    assert algo.describe() == {"name": "every_k", "k": 3, "units_seen": 4}


def test_simulated_and_shown_in_results(every_k):
    from dreamddp.prediction import simulate, simulated_algorithms
    from dreamddp.reports.records import typed
    from dreamddp.reports.tables import algo_order
    from dreamddp.schedule.profile import Profile

    p = Profile(units=["c", "b", "a"], bp={"c": 1.0, "b": 2.0, "a": 3.0}, comm={"c": 4.0, "b": 1.0, "a": 2.0},
                fwd={"a": 0.2, "b": 0.2, "c": 0.1}, step_time=0.25)
    assert "every_k" in simulated_algorithms()
    assert simulate("every_k", p, H=3, k=3).per_iter == [(6.75, 0.0), (6.75, 0.0), (13.75, 7.0)]
    run = {"config": {"algo": {"name": "every_k", "H": 10, "k": 3}}}
    assert typed(run).variant == "every_k" and typed(run).H is None
    assert algo_order("ssgd") < algo_order("every_k") < algo_order("dear")
