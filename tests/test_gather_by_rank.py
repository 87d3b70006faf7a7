"""gather_by_rank: every rank's list on every rank, lists of unequal length included (a timed
window's workers compute different numbers of iterations), on the fake communicator."""

from __future__ import annotations

import torch

from dreamddp.comm.fake import FakeCommunicator
from dreamddp.comm.gather import gather_by_rank

MINE, THEIRS = [0.5, 0.25, 1.0, 2.0, 0.125], [4.0, 8.0, 0.75]  # rank 0's, rank 1's


def _rank1_holds(kind, tag, t):
    other = torch.zeros_like(t)  # rank 1 fills its own entry or row, as gather_by_rank does there
    if t.dim() == 1:
        other[1] = len(THEIRS)
    else:
        other[1, :len(THEIRS)] = torch.tensor(THEIRS, dtype=t.dtype)
    return [t, other]


def test_lists_of_unequal_length_come_back_whole_and_by_rank():
    assert gather_by_rank(FakeCommunicator(world_size=2, peer_fn=_rank1_holds), MINE) == [MINE, THEIRS]
