"""The plan vocabulary: what an algorithm tells the engine to synchronise, and when.

A plan for iteration t is a tuple of :class:`SyncOp`.  Each op names a run of
units that are CONTIGUOUS in backward order, so its tensor is one slice of the
engine's flat parameter or gradient buffer: collectives run in place on model
memory and no algorithm needs a copy of the model.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable


class Payload(enum.Enum):
    GRAD = "grad"  # the units' gradients (averaged before the optimizer step)
    PARAM = "param"  # the units' parameters (averaged in place)


class When(enum.Enum):
    UNIT_READY = "unit_ready"  # launch: as soon as every unit of the op has its gradient
    END_OF_BACKWARD = "end_of_backward"  # launch after / complete by the end of backward
    AFTER_STEP = "after_step"  # launch after the optimizer step / complete right there
    BEFORE_FORWARD = "before_forward"  # complete in the unit's next forward pre-hook


@dataclass(frozen=True)
class SyncOp:
    """One collective: ``units`` is a contiguous run ``first..last`` in backward order."""

    first: int
    last: int
    payload: Payload
    launch: When
    complete: When
    collective: str = "all_reduce"

    def __post_init__(self) -> None:
        if self.first > self.last:
            raise ValueError(f"SyncOp: empty unit run {self.first}..{self.last}")
        if self.launch is When.BEFORE_FORWARD:
            raise ValueError("SyncOp: BEFORE_FORWARD is a completion point, not a launch point")

    @property
    def units(self) -> range:
        return range(self.first, self.last + 1)


Plan = tuple[SyncOp, ...]


def contiguous_runs(units: Iterable[int]) -> list[tuple[int, int]]:
    """Split a set of unit indices into maximal contiguous runs, in increasing order."""
    runs: list[tuple[int, int]] = []
    for u in sorted(set(units)):
        if runs and runs[-1][1] == u - 1:
            runs[-1] = (runs[-1][0], u)
        else:
            runs.append((u, u))
    return runs


def per_unit_ops(units: Iterable[int], payload: Payload, launch: When, complete: When) -> Plan:
    """One op per unit: each unit's collective launches from its own gradient-ready hook."""
    return tuple(SyncOp(u, u, payload, launch, complete) for u in sorted(set(units)))
