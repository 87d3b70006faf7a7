"""Which real collectives the deferred carrier starts for the ones queued at a wait.  Pure.

Stated once, for the carrier that runs them (comm/carrier.py, on tensors) and
the simulator that times them (schedule/simulator.py, on a plan's ops): each
queued collective is a :class:`Slot` (its kind and where its bytes lie), and
:func:`carried` says which real collectives go, in the order they start:

- each stretch of consecutive all-reduces is put in memory order (buffers in
  order of first launch, then offset: gradient hooks do not always fire in the
  units' index order); a stretch whose slices overlap keeps its launch order;
- all-reduces on adjacent slices of one buffer go as one, in place;
- of the runs left, those of at most ``SMALL_BYTES`` go together through one
  packed buffer, in memory order until it holds ``PACK_BYTES`` (none unless at
  least two; for them a collective's fixed cost outweighs the copy, and the cap
  keeps the extra memory small); the packed one starts first, then the others
  alone, in place;
- other kinds (reduce-scatter, all-gather) go alone, in launch order.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

# Runs of deferred all-reduces of at most SMALL_BYTES travel packed into one buffer of at
# most PACK_BYTES (a transient copy: the only memory the carrier adds).
SMALL_BYTES = 64 * 1024
PACK_BYTES = 256 * 1024


@dataclass(frozen=True)
class Slot:
    """Where one queued collective's bytes lie."""

    kind: str  # all_reduce, reduce_scatter, all_gather
    buffer: Hashable  # the memory it works on (a storage; the simulator: a payload's buffer)
    offset: int  # bytes from the buffer's start
    nbytes: int
    family: Hashable = None  # dtype and device: only slices of one family merge or pack


@dataclass(frozen=True)
class Real:
    """One real collective: runs of indices into the slots, each run adjacent slices in memory
    order.  One run: in place (one slot alone, or a merged span); several: packed."""

    runs: tuple[tuple[int, ...], ...]

    @property
    def packed(self) -> bool:
        return len(self.runs) > 1

    def nbytes(self, slots: list[Slot]) -> int:
        return sum(slots[i].nbytes for run in self.runs for i in run)


def carried(slots: list[Slot], small_bytes: int = SMALL_BYTES) -> list[Real]:
    """The real collectives a wait starts for ``slots`` (in launch order), in start order
    (``small_bytes``: the largest run that travels packed; 0: none does)."""
    out: list[Real] = []
    for stretch in _stretches(slots):
        if slots[stretch[0]].kind != "all_reduce":
            out += [Real(((i,),)) for i in stretch]
            continue
        runs = _adjacent_runs(slots, _memory_ordered(slots, stretch))
        small = _packed(slots, runs, small_bytes)
        if small:
            out.append(Real(tuple(small)))
        out += [Real((run,)) for run in runs if run not in small]
    return out


def _stretches(slots: list[Slot]) -> list[list[int]]:
    """Consecutive all-reduces together; every other collective alone."""
    out: list[list[int]] = []
    for i, s in enumerate(slots):
        if out and s.kind == "all_reduce" and slots[out[-1][-1]].kind == "all_reduce":
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _memory_ordered(slots: list[Slot], stretch: list[int]) -> list[int]:
    buffers: dict[Hashable, int] = {}
    for i in stretch:
        buffers.setdefault(slots[i].buffer, len(buffers))
    ordered = sorted(stretch, key=lambda i: (buffers[slots[i].buffer], slots[i].offset))
    overlap = any(slots[a].buffer == slots[b].buffer and slots[a].offset + slots[a].nbytes > slots[b].offset
                  for a, b in zip(ordered, ordered[1:]))
    return stretch if overlap else ordered


def _adjacent(a: Slot, b: Slot) -> bool:
    return a.buffer == b.buffer and a.family == b.family and a.offset + a.nbytes == b.offset


def _adjacent_runs(slots: list[Slot], order: list[int]) -> list[tuple[int, ...]]:
    runs: list[list[int]] = []
    for i in order:
        if runs and _adjacent(slots[runs[-1][-1]], slots[i]):
            runs[-1].append(i)
        else:
            runs.append([i])
    return [tuple(r) for r in runs]


def _packed(slots: list[Slot], runs: list[tuple[int, ...]], small_bytes: int) -> list[tuple[int, ...]]:
    """The runs that travel packed: small ones of the first run's family, in memory order, up to
    PACK_BYTES in all (none unless at least two)."""
    family, small, total = slots[runs[0][0]].family, [], 0
    for run in runs:
        size = sum(slots[i].nbytes for i in run)
        if size <= small_bytes and total + size <= PACK_BYTES and slots[run[0]].family == family:
            small.append(run)
            total += size
    return small if len(small) >= 2 else []
