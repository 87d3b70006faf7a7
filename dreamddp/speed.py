"""Unequal workers: how fast each worker computes in each iteration (``cluster.worker_speed``,
``cluster.slow_spell``).

A worker of speed s (0 < s <= 1) takes 1/s times as long for its forward and its backward: the
trainer times each pass and then waits (1/s - 1) times what it measured (run/train.py), so a
worker is made slow the same way on a CPU and a GPU, for every algorithm; the optimizer step is
not stretched.  Its speed in iteration t is its ``worker_speed`` times, during a slow spell, a
factor drawn uniformly in [speed_min, speed_max].  Iterations come in blocks of ``length``; a
block is a spell with probability p.  Both draws come from (seed, rank, block) alone, so a
resumed run draws what the uninterrupted one drew, whatever ran before.  Pure Python: the
simulator reads the same model.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

from dreamddp.checks import ConfigError, at_least, between


@dataclass(frozen=True)
class Speeds:
    worker: tuple[float, ...] = ()  # per rank; empty: every worker at 1
    p: float = 0.0  # probability that a block of iterations is a slow spell, per worker
    speed_min: float = 0.5  # a spell's speed factor, uniform in [speed_min, speed_max]
    speed_max: float = 0.5
    length: int = 1  # iterations per block (a spell lasts one block)
    seed: int = 0

    @classmethod
    def from_config(cls, cluster) -> "Speeds":
        """From the ``cluster`` node, or a run record's plain mapping (older ones lack the keys)."""
        spell = _get(cluster, "slow_spell") or {}
        spelled = {k: _get(spell, k) for k in ("p", "speed_min", "speed_max", "length", "seed")}
        return cls(tuple(float(s) for s in _get(cluster, "worker_speed") or ()),
                   **{k: type(getattr(cls, k))(v) for k, v in spelled.items() if v is not None})

    @property
    def uniform(self) -> bool:
        """Every worker at full speed in every iteration: nothing to stretch."""
        return self.p == 0 and all(s == 1 for s in self.worker)

    def base(self, rank: int) -> float:
        return self.worker[rank] if self.worker else 1.0

    def spell(self, rank: int, t: int) -> float:
        """The slow spell's factor for ``rank`` in iteration ``t`` (1: none)."""
        if self.p == 0:
            return 1.0
        # A string seed is hashed by sha512: the same draw in every process and Python run
        rng = random.Random(f"slow_spell/{self.seed}/{rank}/{t // self.length}")
        if rng.random() >= self.p:
            return 1.0
        return rng.uniform(self.speed_min, self.speed_max)

    def of(self, rank: int, t: int) -> float:
        """The speed of ``rank`` in iteration ``t``: in (0, 1]."""
        return self.base(rank) * self.spell(rank, t)

    def describe(self) -> dict:
        return {"worker_speed": list(self.worker) or None,
                "slow_spell": {"p": self.p, "speed_min": self.speed_min, "speed_max": self.speed_max,
                               "length": self.length, "seed": self.seed}}


def _get(node, key):
    return node.get(key) if isinstance(node, Mapping) else getattr(node, key, None)


def stretch(measured: float, speed: float) -> float:
    """Wait what a pass that took ``measured`` seconds adds at ``speed``; the seconds waited."""
    extra = (1.0 / speed - 1.0) * measured
    if extra > 0:
        time.sleep(extra)
        return extra
    return 0.0


def check(cluster) -> None:
    """The ``cluster.worker_speed`` and ``cluster.slow_spell`` rules (one line naming the field)."""
    world = int(cluster.nproc) * int(cluster.nnodes)
    speeds = cluster.worker_speed
    if speeds:
        if len(speeds) != world:
            raise ConfigError(f"cluster.worker_speed: {len(speeds)} speeds for {world} workers (cluster.nproc="
                              f"{cluster.nproc} x cluster.nnodes={cluster.nnodes}); one per worker")
        for i, s in enumerate(speeds):
            _speed(f"cluster.worker_speed[{i}]", s)
    spell = cluster.slow_spell
    between("cluster.slow_spell.p", spell.p, 0, 1)
    _speed("cluster.slow_spell.speed_min", spell.speed_min)
    _speed("cluster.slow_spell.speed_max", spell.speed_max)
    if spell.speed_min > spell.speed_max:
        raise ConfigError(f"cluster.slow_spell.speed_min={spell.speed_min}: above cluster.slow_spell.speed_max="
                          f"{spell.speed_max}")
    at_least("cluster.slow_spell.length", spell.length, 1)
    at_least("cluster.slow_spell.seed", spell.seed, 0)


def _speed(key: str, value) -> None:
    if value is None or isinstance(value, bool) or not (math.isfinite(value) and 0 < value <= 1):
        raise ConfigError(f"{key}={value}: must be in (0, 1] (a worker is slowed by waiting, so a speed is "
                          "relative to full speed, 1)")
