"""Every rank's list of numbers on every rank, through the accounted-free control path.

Per-rank measurements (compute time per pass or iteration) are what the
simulator samples to charge the skew between workers at sync points; any
communicator (the real one or the fake) can gather them with its mean
all-reduce: each rank fills its own row of a zero table, so the mean times
the world size is the whole table.
"""

from __future__ import annotations

import torch


def gather_by_rank(comm, values: list[float]) -> list[list[float]]:
    """``values`` of every rank, indexed by rank.  The lengths may differ (a timed window's
    worker computes only the iterations that fit): one small all-reduce gathers them first."""
    lengths = torch.zeros(comm.world_size, dtype=torch.float64)
    lengths[comm.rank] = len(values)
    comm.all_reduce_mean(lengths)
    counts = [round(n) for n in (lengths * comm.world_size).tolist()]
    table = torch.zeros(comm.world_size, max(counts), dtype=torch.float64)
    table[comm.rank, :len(values)] = torch.tensor(values, dtype=torch.float64)
    comm.all_reduce_mean(table)
    return [row[:n] for row, n in zip((table * comm.world_size).tolist(), counts)]
