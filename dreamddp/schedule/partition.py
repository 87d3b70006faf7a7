"""Partitions of the units (backward order) that engine and simulator must agree on.

Pure functions over unit counts and byte sizes, so the algorithms build their
engine plans and their simulator plans from the very same cut.
"""

from __future__ import annotations


def equal_count_groups(n_units: int, H: int) -> list[list[int]]:
    """PLSGD-ENP: units 0..n-1 cut into H contiguous groups of equal count.

    When H does not divide n the first n % H groups (output side) take one unit more.
    """
    if not 1 <= H <= n_units:
        raise ValueError(f"algo.H={H}: must be between 1 and the model's {n_units} units")
    base, extra = divmod(n_units, H)
    groups, start = [], 0
    for g in range(H):
        size = base + (1 if g < extra else 0)
        groups.append(list(range(start, start + size)))
        start += size
    return groups


def buckets(sizes: list[int], cap: int) -> list[tuple[int, int]]:
    """Contiguous buckets (first, last) over ``sizes`` (bytes, backward order), each closed
    once it holds ``cap`` bytes, as torch DDP assigns its gradient buckets."""
    out: list[tuple[int, int]] = []
    first, acc = 0, 0
    for i, s in enumerate(sizes):
        acc += s
        if acc >= cap:
            out.append((first, i))
            first, acc = i + 1, 0
    if first < len(sizes):
        out.append((first, len(sizes) - 1))
    return out
