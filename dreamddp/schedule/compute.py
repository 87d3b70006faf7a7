"""What the simulator's ranks compute (dreamddp/schedule/simulator.py walks it): one iteration's
seconds per unit and per op (``Compute``), each rank's measured spread over them (``Skew``), and
runs that share the workers in turns (``Interleaving``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dreamddp.engine.plan import SyncOp


@dataclass(frozen=True)
class Interleaving:
    """Runs trained in turns on the same workers: every ``turn`` iterations the ranks meet at a
    barrier outside the timed iterations, and the reported iteration is rank 0's (module
    docstring)."""
    turn: int

    def __post_init__(self) -> None:
        if not isinstance(self.turn, int) or isinstance(self.turn, bool) or self.turn < 1:
            raise ValueError(f"Interleaving.turn must be an integer >= 1, got {self.turn!r}")


@dataclass
class Compute:
    """One iteration's compute on the profile, per unit in backward order."""

    fwd: np.ndarray  # forward seconds of each unit
    bp: np.ndarray  # backward seconds of each unit
    step: float  # optimizer step (and the rest of the iteration's overhead)
    fwd_rest: float = 0.0  # forward of modules that are not units, at the start of forward
    optimizer: float = 0.0  # of ``step``, the optimizer step alone: what ops with ``steps`` move
    share: np.ndarray | None = None  # each unit's share of the optimizer step (its bytes' share)
    step_call: float = 0.0  # what an op with ``steps`` adds as an optimizer call of its own
    # the engine's host seconds per op, waits excluded: launching it (books, copies) and its
    # on_complete (merges, copies; a group's step is ``optimizer``'s, not this)
    launch_host: float = 0.0
    complete_host: float = 0.0
    # and the op's own host work on top, (launch s, completion s) by op (a codec's encode and decode)
    op_host: Callable[[SyncOp], tuple[float, float]] | None = None

    def __post_init__(self) -> None:
        n = len(self.bp)
        share = np.zeros(n) if self.share is None else np.asarray(self.share, dtype=float)
        if share.shape != (n,):
            raise ValueError(f"Compute: {share.size} step shares for {n} units")
        self.share = share
        self._shares = np.concatenate([[0.0], np.cumsum(share)])  # prefix sums: a run's share in O(1)

    def encode(self, op: SyncOp) -> float:
        """Host seconds of ``op``'s own before its collective can start (its payload encoded)."""
        return self.op_host(op)[0] if self.op_host else 0.0

    def complete_cost(self, op: SyncOp) -> float:
        """Host seconds the worker spends completing ``op`` (after its wait)."""
        return self.complete_host + (self.op_host(op)[1] if self.op_host else 0.0)

    def moved(self, op: SyncOp) -> float:
        """Seconds of the iteration's optimizer step an op with ``steps`` applies elsewhere."""
        if not op.steps:
            return 0.0
        run = sum(self._shares[b + 1] - self._shares[a] for a, b in op.runs)
        return self.optimizer * run / op.part[1]

    def stepped(self, op: SyncOp) -> float:
        """Seconds an op with ``steps`` takes where it completes: its share of the step, in a
        call of its own."""
        return self.moved(op) + self.step_call if op.steps else 0.0


@dataclass
class Skew:
    """Per rank, samples of its iteration compute time over the profile's (multiplicative
    factors, e.g. a pass's total over the mean pass of all ranks).  A rank with a
    systematic offset has factors away from 1; a noisy one, spread."""

    factors: list[np.ndarray]
    seed: int = 0
    # True: the ranks' samples are aligned (sample k of every rank is the same iteration) and
    # are drawn together, keeping how the ranks move together; False: each rank on its own
    joint: bool = False

    def __post_init__(self) -> None:
        self.factors = [np.asarray(f, dtype=float) for f in self.factors]
        if not self.factors or any(f.size == 0 or not np.all(f > 0) for f in self.factors):
            raise ValueError("Skew: every rank needs at least one positive compute factor")
        if self.joint and len({f.size for f in self.factors}) != 1:
            raise ValueError("Skew: joint samples need the same number of samples for every rank")

    @classmethod
    def of(cls, by_rank, total: float, seed: int = 0) -> "Skew | None":
        """From every rank's measured compute seconds (per pass or iteration) over ``total``,
        the profile's compute per iteration; None without two ranks' samples."""
        if not by_rank or len(by_rank) < 2 or total <= 0 or not all(by_rank):
            return None
        return cls([np.asarray(r, dtype=float) / total for r in by_rank], seed)
