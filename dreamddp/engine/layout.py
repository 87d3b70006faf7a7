"""The units as a plan sees them: names, bytes, the model's module names, the world size,
and whether the trainer clips the global gradient norm.

Torch-free, so the simulator can bind an algorithm to a profile's units
(``prediction.layout_of``) exactly as the engine binds it to a live
model's (``PartialSyncEngine.layout``): the plan an algorithm builds from a
layout is the one the engine runs and the one the simulator times.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from dreamddp.engine.plan import part_bounds


@dataclass(frozen=True)
class UnitLayout:
    names: tuple[str, ...]  # units in backward order (output side first)
    nbytes: tuple[int, ...]  # parameter bytes of each unit (0: a profile's parameter-free module)
    modules: frozenset[str]  # every module name of the model (schedule files may name any)
    world: int  # workers taking part in the collectives
    itemsize: int = 4  # bytes per parameter element (a part of a run is cut in whole elements)
    # train.grad_clip (0: none).  Clipping needs the global gradient norm at the step: a plan
    # whose gradients are sharded there (DeAR) all-reduces it, and waits for its shards first.
    grad_clip: float = 0.0

    def __post_init__(self) -> None:
        if len(self.names) != len(self.nbytes):
            raise ValueError(f"UnitLayout: {len(self.names)} names but {len(self.nbytes)} byte counts")
        if not self.names:
            raise ValueError("UnitLayout: no units")
        if self.world < 1:
            raise ValueError(f"UnitLayout: world must be >= 1, got {self.world}")

    def __len__(self) -> int:
        return len(self.names)

    def run_bytes(self, first: int, last: int) -> int:
        return self.offsets[last + 1] - self.offsets[first]

    def op_bytes(self, op) -> int:
        """The parameter bytes of every unit an op covers (all its runs, or its part), before ``op.scale``."""
        if op.part[1] > 1:
            lo, hi = self._part(op)
            return hi - lo
        return sum(self.run_bytes(a, b) for a, b in op.runs)

    def op_offset(self, op) -> int:
        """Byte offset of an op's (first run's) data in the engine's flat buffers."""
        return self.offsets[op.first] + (self._part(op)[0] if op.part[1] > 1 else 0)

    def _part(self, op) -> tuple[int, int]:
        """Byte range of an op's part within its run, cut in whole elements as the engine cuts it."""
        lo, hi = part_bounds(self.run_bytes(op.first, op.last) // self.itemsize, op.part)
        return lo * self.itemsize, hi * self.itemsize

    @functools.cached_property
    def offsets(self) -> tuple[int, ...]:
        """Each unit's byte offset in the engine's flat buffers (units in backward order), and the end."""
        return tuple(itertools.accumulate(self.nbytes, initial=0))
