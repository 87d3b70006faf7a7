"""Parameter divergence across workers, measured without touching training state.

Per unit: ||mean_w - w_local|| / sqrt(numel) (the DreamDDP paper's divergence metric), where mean_w
is the average over workers.  The mean is formed in a scratch copy with an
unpaced, unaccounted all-reduce: a measurement, not part of the algorithm.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from dreamddp.engine.flat import FlatModel


@torch.no_grad()
def divergence(flat: FlatModel, group=None) -> dict:
    world = dist.get_world_size(group) if dist.is_initialized() else 1
    mean = flat.params.detach().clone()
    if world > 1:
        dist.all_reduce(mean, group=group)
        mean.div_(world)
    sq = (mean - flat.params).float().pow_(2)
    spans = torch.tensor(flat.unit_spans, device=sq.device)  # the padding in them is 0 in both
    numel = torch.tensor([u.numel for u in flat.units], device=sq.device)
    per_unit = torch.segment_reduce(sq, "sum", lengths=spans).sqrt_() / numel.double().sqrt().to(sq.dtype)
    values = per_unit.tolist()
    return {
        "mean": sum(values) / len(values),
        "per_unit": {u.name: v for u, v in zip(flat.units, values)},
    }
