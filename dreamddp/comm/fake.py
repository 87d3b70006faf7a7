"""An in-process stand-in for Communicator, for exact-value algorithm tests.

No processes, no sockets: the "other ranks" are whatever ``peer_fn`` says
they hold.  ``peer_fn(kind, tag, tensor)`` gets a clone of this rank's input
at launch and returns one tensor per rank (entry ``rank`` is normally the
input itself); the default makes every rank hold the same values, so AVG is
the identity and all-gather repeats the shard.  Results are computed from
launch-time values and written at ``wait()``, mirroring the real contract
that a buffer is undefined between launch and wait.  Reductions sum in rank
order (rank 0's tensor, plus rank 1's, plus rank 2's, ...) and then divide by
the world size: exactly the real reduce-scatter's order on gloo (an all-to-all,
then that local sum: comm/communicator.py).  gloo's all-reduce sums in its
ring's order instead, the same sum bitwise for 2 ranks only (tests/test_dear.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from dreamddp.comm.communicator import check_avg, check_flat, check_sizes
from dreamddp.comm.handle import CollectiveRecord, Handle, make_record
from dreamddp.comm.links.base import Link
from dreamddp.comm.links.ideal import IdealLink

PeerFn = Callable[[str, str, torch.Tensor], list]


@dataclass
class FakeCall:
    kind: str
    tag: str
    nbytes: int
    values: torch.Tensor  # a clone of the input at launch
    data_ptr: int  # of the input, so tests can check which buffer was sent
    storage: int = 0  # the input's storage and its byte offset in it: where the carrier would find it
    offset: int = 0


def _same_everywhere(world: int) -> PeerFn:
    return lambda kind, tag, t: [t.clone() for _ in range(world)]


class FakeCommunicator:
    def __init__(self, world_size: int = 2, rank: int = 0, peer_fn: PeerFn | None = None,
                 link: Link | None = None):
        if world_size < 1:
            raise ValueError(f"world_size: must be >= 1, got {world_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank: must be in [0, {world_size}), got {rank}")
        self.rank = rank
        self.world_size = world_size
        self.link = link if link is not None else IdealLink()
        self.peer_fn = peer_fn if peer_fn is not None else _same_everywhere(world_size)
        self.calls: list[FakeCall] = []
        self._records: list[CollectiveRecord] = []
        self._pending = 0

    # -- helpers -------------------------------------------------------------
    def _peers(self, kind: str, tag: str, t: torch.Tensor) -> list:
        values = t.detach().clone()
        self.calls.append(FakeCall(kind, tag, t.numel() * t.element_size(), values, t.data_ptr(),
                                   t.untyped_storage().data_ptr(), t.storage_offset() * t.element_size()))
        peers = list(self.peer_fn(kind, tag, values.clone()))
        if len(peers) != self.world_size:
            raise ValueError(f"peer_fn: returned {len(peers)} tensors for world_size {self.world_size}")
        for i, p in enumerate(peers):
            if tuple(p.shape) != tuple(t.shape) or p.dtype != t.dtype:
                raise ValueError(
                    f"peer_fn: rank {i} tensor {tuple(p.shape)}/{p.dtype} does not match"
                    f" input {tuple(t.shape)}/{t.dtype} for {kind!r}"
                )
        return peers

    def _mean(self, peers: list) -> torch.Tensor:
        """The sum in rank order, divided by the world size (Communicator._reduce_scatter_ops's)."""
        total = peers[0].clone()
        for p in peers[1:]:
            total.add_(p)
        return total.div_(self.world_size)

    def _launch(self, kind: str, tag: str, t: torch.Tensor) -> CollectiveRecord:
        # Stamped before any copying, as the real one is stamped before the op.
        record = make_record(kind, tag, t.numel() * t.element_size(), self.world_size, self.link)
        self._records.append(record)
        self._pending += 1
        return record

    def _completed(self, handle: Handle) -> None:
        self._pending -= 1

    # -- same API as Communicator -------------------------------------------
    def all_reduce_avg(self, flat: torch.Tensor, tag: str = "") -> Handle:
        check_avg("flat", flat)
        record = self._launch("all_reduce", tag, flat)
        result = self._mean(self._peers("all_reduce", tag, flat))
        return Handle(record, None, lambda: flat.copy_(result), self._completed)

    def reduce_scatter_avg(self, flat: torch.Tensor, out: torch.Tensor, tag: str = "") -> Handle:
        check_avg("flat", flat)
        check_flat("out", out)
        check_sizes("flat", flat, "out", out, self.world_size)
        record = self._launch("reduce_scatter", tag, flat)
        mean = self._mean(self._peers("reduce_scatter", tag, flat))
        n = out.numel()
        shard = mean.reshape(-1).narrow(0, self.rank * n, n)
        return Handle(record, None, lambda: out.copy_(shard.view(out.shape)), self._completed)

    def all_gather(self, out: torch.Tensor, shard: torch.Tensor, tag: str = "") -> Handle:
        check_flat("out", out)
        check_flat("shard", shard)
        check_sizes("out", out, "shard", shard, self.world_size)
        record = self._launch("all_gather", tag, out)
        gathered = torch.cat([p.reshape(-1) for p in self._peers("all_gather", tag, shard)])
        return Handle(record, None, lambda: out.copy_(gathered.view(out.shape)), self._completed)

    def broadcast(self, flat: torch.Tensor, src: int = 0) -> None:
        if not 0 <= src < self.world_size:
            raise ValueError(f"src: must be in [0, {self.world_size}), got {src}")
        flat.copy_(self._peers("broadcast", "", flat)[src])

    def all_reduce_max(self, values: torch.Tensor) -> None:
        peers = self._peers("all_reduce_max", "", values)
        values.copy_(torch.stack(peers).amax(dim=0))

    def all_reduce_mean(self, values: torch.Tensor) -> None:
        values.copy_(self._mean(self._peers("all_reduce_mean", "", values)))

    def end_iteration(self) -> None:
        """Nothing queued here: every collective completes at its wait."""

    def drain(self) -> list[CollectiveRecord]:
        records, self._records = self._records, []
        return records

    def pending(self) -> int:
        return self._pending
