"""Disjoint per-rank shards of the train split and the infinite, per-epoch
reshuffled batch iterator every worker trains from.

All randomness comes from generators seeded by integer tuples through numpy's
SeedSequence, so (seed, epoch, rank) pins a batch sequence exactly, independent
of torch's global RNG (which the model and algorithms also draw from)."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

_SHARD_TAG = 0x5A4D  # separates the shard permutation stream from epoch streams
_EPOCH_TAG = 0xE90C


def generator(*key: int) -> torch.Generator:
    """A torch CPU generator seeded by a well-mixed hash of non-negative ints."""
    state = np.random.SeedSequence([int(k) for k in key]).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(state) & ((1 << 63) - 1))


def shard_indices(num_samples: int, rank: int, world_size: int, seed: int) -> torch.Tensor:
    """Rank `rank`'s train indices. One permutation (seeded by seed alone, so all
    ranks agree on it) is cut into world_size equal strided parts; the at most
    world_size-1 samples that do not divide evenly are dropped."""
    perm = torch.randperm(num_samples, generator=generator(_SHARD_TAG, seed))
    per_rank = num_samples // world_size
    return perm[: per_rank * world_size][rank::world_size].clone()


class ShardedBatches:
    """Infinite iterator over one rank's shard. Each epoch visits the shard in a
    fresh order drawn from (seed, epoch, rank); the incomplete last batch is
    dropped so every step of every rank sees exactly batch_size samples.

    make_batch(indices, gen) builds a batch by tensor indexing; gen is the
    epoch's generator, for augmentation that must be reproducible too."""

    def __init__(
        self,
        num_samples: int,
        *,
        rank: int,
        world_size: int,
        seed: int,
        batch_size: int,
        make_batch: Callable[[torch.Tensor, torch.Generator], object],
        what: str = "data",
    ):
        self.shard = shard_indices(num_samples, rank, world_size, seed)
        if len(self.shard) < batch_size:
            raise ValueError(
                f"batch_size={batch_size} exceeds this worker's shard of {len(self.shard)} samples "
                f"({what}: {num_samples} train samples over world_size={world_size})"
            )
        self.rank, self.seed, self.batch_size = rank, seed, batch_size
        self.batches_per_epoch = len(self.shard) // batch_size
        self._make_batch = make_batch
        self.epoch = -1
        self._pos = self.batches_per_epoch  # forces a new epoch on the first next()
        self._order = self.shard
        self._gen = torch.Generator()

    def __iter__(self) -> "ShardedBatches":
        return self

    def _start_epoch(self) -> None:
        self.epoch += 1
        self._gen = generator(_EPOCH_TAG, self.seed, self.epoch, self.rank)
        self._order = self.shard[torch.randperm(len(self.shard), generator=self._gen)]
        self._pos = 0

    def state_dict(self) -> dict:
        """Where this iterator stands: epoch, batch within it, augmentation generator."""
        return {"epoch": self.epoch, "pos": self._pos, "gen": self._gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """Continue exactly where ``state_dict()`` was taken (same shard, seed and batch size)."""
        if state["epoch"] >= 0:
            self.epoch = state["epoch"] - 1
            self._start_epoch()  # re-derives the epoch's order from (seed, epoch, rank)
        self.epoch, self._pos = state["epoch"], state["pos"]
        self._gen.set_state(state["gen"])

    def __next__(self):
        if self._pos >= self.batches_per_epoch:
            self._start_epoch()
        start = self._pos * self.batch_size
        self._pos += 1
        return self._make_batch(self._order[start : start + self.batch_size], self._gen)


def spread_indices(num_samples: int, count: int) -> torch.Tensor:
    """`count` indices spread evenly over [0, num_samples): a held-out subset that
    is the same for every rank and every seed, and covers the whole split."""
    count = min(count, num_samples)
    if count <= 0:
        return torch.zeros(0, dtype=torch.long)
    return torch.div(torch.arange(count) * num_samples, count, rounding_mode="floor")
