"""The plan vocabulary: what an algorithm synchronises, and when.  Stated once.

A plan for iteration t is a tuple of :class:`SyncOp`.  The engine executes it
(engine.py) and the simulator times the very same ops on a torch-free view of
the units (schedule/simulator.py), so an algorithm describes its
communication in one place.

An op names units by index in backward order.  Ops on gradients or
parameters cover ONE contiguous run, so their tensor is one slice of the
engine's flat buffer: collectives run in place on model memory.  Such an op
may also cover one ``part`` of its run, (k, n): the k-th of n near-equal
element ranges of the slice, so a run too large for the link to carry in one
iteration goes out in pieces over several (schedule/delay.py).  Ops whose
payload the algorithm derives itself at launch (``Payload.OUTER``) may cover
several runs (``more``).

Points in an iteration, in the order they happen::

    forward:  [start] pre-hook(L-1) ... pre-hook(0)     units run in reverse backward order
    backward: ready(0) ready(1) ... ready(L-1)         gradient-ready hooks
    END_OF_BACKWARD, the optimizer step, AFTER_STEP

``launch`` is one of UNIT_READY (when every unit of the op has its gradient),
END_OF_BACKWARD, AFTER_STEP, or BEFORE_FORWARD (in the forward pre-hook of
unit ``at``; ``at=None``: at the start of forward).  ``complete`` (waited for,
then ``Algorithm.on_complete``) is END_OF_BACKWARD, AFTER_STEP or
BEFORE_FORWARD (the pre-hook of ``op.last``, the input-side end of the run,
which runs first in forward), in iteration t + ``lag``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable


class Payload(enum.Enum):
    GRAD = "grad"  # the units' gradients (averaged before the optimizer step)
    PARAM = "param"  # the units' parameters (averaged in place, or a copy the algorithm makes)
    OUTER = "outer"  # made at launch by the sync pipeline (a change since the anchor, a compressed payload)
    STATE = "state"  # the inner optimizer's state (Adam's moments: DES-LOC), made at launch


class When(enum.Enum):
    UNIT_READY = "unit_ready"  # launch: as soon as every unit of the op has its gradient
    END_OF_BACKWARD = "end_of_backward"  # launch after / complete by the end of backward
    AFTER_STEP = "after_step"  # launch after the optimizer step / complete right there
    BEFORE_FORWARD = "before_forward"  # launch / complete in a unit's forward pre-hook

    @property
    def order(self) -> int:
        """Position within one iteration (forward first)."""
        return _ORDER[self]


_ORDER = {When.BEFORE_FORWARD: 0, When.UNIT_READY: 1, When.END_OF_BACKWARD: 2, When.AFTER_STEP: 3}
KINDS = ("all_reduce", "reduce_scatter", "all_gather")


@dataclass(frozen=True)
class SyncOp:
    """One collective over units ``first..last`` (plus ``more`` runs for derived payloads)."""

    first: int
    last: int
    payload: Payload
    launch: When
    complete: When
    collective: str = "all_reduce"
    # Iterations from launch to completion: the op completes at ``complete`` of iteration
    # t + lag.  None: the first such point after the launch (BEFORE_FORWARD: the next forward).
    lag: int | None = None
    at: int | None = None  # BEFORE_FORWARD launches: the unit whose pre-hook launches it (None: start)
    more: tuple[tuple[int, int], ...] = ()  # further (first, last) runs, sent as one payload made at launch
    # Payload bytes over the fp32 bytes of the units (a quantised all-gather sends less
    # per element but gathers every rank's share): what the link charges.
    scale: float = 1.0
    # (k, n): only the k-th of n near-equal element ranges of the run (part_bounds); (0, 1): all of it
    part: tuple[int, int] = (0, 1)
    # True: on completion the algorithm applies the optimizer step to the op's units, in one
    # optimizer call (DeAR steps each group in its forward pre-hook, after its all-gather, on the
    # averaged gradient; DreamDDP with overlap_forward steps the units of an average that lands
    # in forward with the local gradient it kept), so that share of the step runs there, behind
    # the wait, and not at the iteration's step; the engine calls on_complete either way, the
    # simulator charges the share, and the call's own cost, where the op completes.
    steps: bool = False

    def __post_init__(self) -> None:
        if self.first > self.last or any(a > b for a, b in self.more):
            raise ValueError(f"SyncOp: empty unit run in {self.runs}")
        if self.complete is When.UNIT_READY:
            raise ValueError("SyncOp: UNIT_READY is a launch point, not a completion point")
        if self.collective not in KINDS:
            raise ValueError(f"SyncOp: collective {self.collective!r} (expected one of {', '.join(KINDS)})")
        if self.more and self.payload not in (Payload.OUTER, Payload.PARAM):
            raise ValueError("SyncOp: several runs are parameters the pipeline sends as one payload")
        k, n = self.part
        if not 0 <= k < n:
            raise ValueError(f"SyncOp: part {self.part} (expected (k, n) with 0 <= k < n)")
        if n > 1 and (self.more or self.payload in (Payload.OUTER, Payload.STATE)):
            raise ValueError("SyncOp: a part of a run is a slice of the flat buffers: one run of gradients or parameters")
        if self.at is not None and self.launch is not When.BEFORE_FORWARD:
            raise ValueError("SyncOp: 'at' places a BEFORE_FORWARD launch only")
        if self.steps and self.payload in (Payload.OUTER, Payload.STATE):
            raise ValueError("SyncOp: 'steps' applies the optimizer step to the op's units (Payload.GRAD or PARAM)")
        lag = self.lag
        if lag is None:
            lag = 1 if self.complete is When.BEFORE_FORWARD and self.launch is not When.BEFORE_FORWARD else 0
            object.__setattr__(self, "lag", lag)
        if lag < 0 or (lag == 0 and not self._completes_after_launch()):
            raise ValueError(f"SyncOp: completion {self.complete.value} (lag {lag}) precedes launch {self.launch.value}")

    def _completes_after_launch(self) -> bool:
        if self.launch is When.BEFORE_FORWARD and self.complete is When.BEFORE_FORWARD:
            # forward runs units in decreasing index: the launching pre-hook must come first
            return self.at is None or self.at > self.last
        return self.complete.order >= self.launch.order

    @property
    def runs(self) -> tuple[tuple[int, int], ...]:
        return ((self.first, self.last), *self.more)

    @property
    def units(self) -> list[int]:
        return [u for a, b in self.runs for u in range(a, b + 1)]

    @property
    def ready_unit(self) -> int:
        """The unit whose gradient-ready hook launches a UNIT_READY op: ready last of its units
        (units become ready in index order)."""
        return max(b for _, b in self.runs)


Plan = tuple[SyncOp, ...]


def part_bounds(n: int, part: tuple[int, int]) -> tuple[int, int]:
    """Element range [lo, hi) of part (k, parts) of ``n`` elements: near-equal, in order, covering all."""
    k, parts = part
    return n * k // parts, n * (k + 1) // parts


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
