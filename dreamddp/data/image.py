"""Image splits -> DataBundle: batches of (x float32 (B,3,32,32) normalised,
y int64 (B,)), built by tensor indexing with vectorised augmentation."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dreamddp.data.base import DataBundle, ImageSplits
from dreamddp.data.sharding import ShardedBatches, spread_indices

_CROP_PAD = 4  # the standard CIFAR recipe: pad 4 with zeros, random 32x32 crop


def to_model_input(x: torch.Tensor, mean, std) -> torch.Tensor:
    """uint8 (B,C,H,W) -> float (B,3,32,32): scale to [0,1], zero-pad to 32x32,
    repeat a single channel to three, normalise. Float input passes through."""
    if x.dtype != torch.uint8:
        return x.float()
    x = x.float().div_(255.0)
    pad_h, pad_w = 32 - x.shape[2], 32 - x.shape[3]
    if pad_h or pad_w:
        x = F.pad(x, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2))
    if x.shape[1] == 1:
        x = x.expand(-1, 3, -1, -1)
    m = torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1)
    return (x - m) / s


def random_crop_flip(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Per-sample random crop from a zero-padded image plus a coin-flip mirror,
    for the whole batch at once (gather with broadcast index grids)."""
    b, c, h, w = x.shape
    p = _CROP_PAD
    padded = F.pad(x, (p, p, p, p))
    oy = torch.randint(0, 2 * p + 1, (b,), generator=gen)
    ox = torch.randint(0, 2 * p + 1, (b,), generator=gen)
    flip = torch.rand(b, generator=gen) < 0.5
    rows = (oy[:, None] + torch.arange(h))[:, None, :, None]
    cols = ox[:, None] + torch.arange(w)
    cols = torch.where(flip[:, None], cols.flip(1), cols)[:, None, None, :]
    return padded[torch.arange(b)[:, None, None, None], torch.arange(c)[None, :, None, None], rows, cols]


def make_image_bundle(
    s: ImageSplits, *, rank: int, world_size: int, seed: int, batch_size: int, eval_batches: int, what: str
) -> DataBundle:
    def train_batch(idx: torch.Tensor, gen: torch.Generator):
        x = s.train_x[idx]
        if s.augment:
            # crop/flip before normalising so the padding is black, as in torchvision
            x = random_crop_flip(x, gen)
        return to_model_input(x, s.mean, s.std), s.train_y[idx]

    train = ShardedBatches(
        len(s.train_y), rank=rank, world_size=world_size, seed=seed,
        batch_size=batch_size, make_batch=train_batch, what=what,
    )
    held = spread_indices(len(s.eval_y), eval_batches * batch_size)
    evals = [
        (to_model_input(s.eval_x[i], s.mean, s.std), s.eval_y[i].clone())
        for i in held.split(batch_size)
    ]
    return DataBundle(
        train=train, eval=evals, samples_per_epoch=len(train.shard),
        num_classes=s.num_classes, vocab_size=None,
    )
