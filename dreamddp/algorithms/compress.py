"""Compression of what an algorithm sends: ``algo.compress=none|topk|quant``, with error feedback.

Two codecs, each encoding a flat fp32 tensor into the uint8 payload one rank contributes to an
all-gather (every rank's payload gathered, decoded and summed in rank order, so every rank
computes the same mean bitwise; quantize.gather_mean):

- ``topk`` (``algo.compress_ratio``): the k = ceil(ratio * n) entries of largest magnitude,
  their int32 indices and their values in fp16 (DeMo, SparseLoCo); 6 k bytes per rank.
- ``quant`` (``algo.compress_bits`` in 2, 4, 8): block-scaled symmetric integers, one fp32
  absmax scale per ``algo.compress_block`` elements; a value x of a block with scale s is sent
  as q = round(x / s * L) with L = 2**(bits - 1) - 1 and decoded as q * s / L (the E3M0 code's
  block scaling with uniform levels), 8 / bits codes packed per byte.

Error feedback (``algo.error_feedback``): each worker keeps, per element, what its last payloads
did not carry, ``e <- (x + e) - decode(encode(x + e))``, and adds it to the next payload of the
same elements; the residuals sum to what was not sent.  They are saved in checkpoints.

The bytes on the wire are the gathered payloads: per rank ``world * nbytes`` (what SyncOp.scale
tells the link and the simulator), against ``2 (n-1)/n * 4 n`` for an fp32 ring all-reduce.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dreamddp.algorithms.base import AlgoConfig
from dreamddp.checks import ConfigError, at_least, between, choice
from dreamddp.lazy import lazy

torch = lazy("torch")

COMPRESSORS = ("none", "topk", "quant")
BITS = (2, 4, 8)


@dataclass
class CompressConfig(AlgoConfig):
    # What a sync sends: none (fp32) | topk (the largest algo.compress_ratio of each payload,
    # fp16 values with int32 indices) | quant (algo.compress_bits integers, one scale per
    # algo.compress_block elements); all-gathered and summed (compress.py).
    compress: str = "none"
    compress_ratio: float = 0.01
    compress_bits: int = 4
    compress_block: int = 1024
    # Keep what each payload did not carry and add it to the next one of the same elements.
    error_feedback: bool = True


def check_compress(cfg) -> None:
    choice("algo.compress", cfg.compress, COMPRESSORS)
    between("algo.compress_ratio", cfg.compress_ratio, 0, 1, open_low=True)
    if cfg.compress_bits not in BITS:
        raise ConfigError(f"algo.compress_bits={cfg.compress_bits}: choose from {', '.join(map(str, BITS))}")
    at_least("algo.compress_block", cfg.compress_block, 1)


class TopK:
    """The largest-magnitude fraction ``ratio`` of a tensor: int32 indices, then fp16 values."""

    kind = "topk"

    def __init__(self, ratio: float):
        self.ratio = ratio

    def k(self, numel: int) -> int:
        return max(1, min(numel, math.ceil(self.ratio * numel)))

    def nbytes(self, numel: int) -> int:
        return 6 * self.k(numel)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(-1)
        idx = x.abs().topk(self.k(x.numel()), sorted=False).indices.to(torch.int32)
        return torch.cat([idx.view(torch.uint8), x[idx.long()].to(torch.float16).view(torch.uint8)])

    def decode(self, payload: torch.Tensor, numel: int) -> torch.Tensor:
        k = self.k(numel)
        idx = payload[: 4 * k].clone().view(torch.int32).long()  # clone: aligned for the int32 view
        vals = payload[4 * k:].clone().view(torch.float16).float()
        return torch.zeros(numel, dtype=torch.float32, device=payload.device).index_put_((idx,), vals)


class BlockQuant:
    """Block-scaled symmetric ``bits``-bit integers, packed 8 / bits per byte, then fp32 scales."""

    kind = "quant"

    def __init__(self, bits: int, block: int):
        self.bits, self.block, self.levels = bits, block, 2 ** (bits - 1) - 1
        self.per_byte = 8 // bits

    def _shape(self, numel: int) -> tuple[int, int]:
        nb = max(1, -(-numel // self.block))
        return nb, -(-nb * self.block // self.per_byte)  # blocks, packed bytes

    def nbytes(self, numel: int) -> int:
        nb, packed = self._shape(numel)
        return packed + 4 * nb

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(-1).float()
        nb, packed = self._shape(x.numel())
        blocks = x.new_zeros(packed * self.per_byte)
        blocks[: x.numel()] = x
        by_block = blocks[: nb * self.block].view(nb, self.block)
        scale = by_block.abs().amax(dim=1)
        q = torch.round(by_block / torch.where(scale > 0, scale, 1.0).unsqueeze(1) * self.levels)
        codes = torch.zeros(packed * self.per_byte, dtype=torch.int32, device=x.device)
        codes[: nb * self.block] = (q.reshape(-1).to(torch.int32) + self.levels)  # 0 .. 2 levels: unsigned
        shifts = torch.arange(self.per_byte, device=x.device, dtype=torch.int32) * self.bits
        out = (codes.view(packed, self.per_byte) << shifts).sum(dim=1).to(torch.uint8)
        return torch.cat([out, scale.contiguous().view(torch.uint8)])

    def decode(self, payload: torch.Tensor, numel: int) -> torch.Tensor:
        nb, packed = self._shape(numel)
        shifts = torch.arange(self.per_byte, device=payload.device, dtype=torch.int32) * self.bits
        codes = (payload[:packed].to(torch.int32).unsqueeze(1) >> shifts) & ((1 << self.bits) - 1)
        q = (codes.reshape(-1)[: nb * self.block] - self.levels).float().view(nb, self.block)
        scale = payload[packed:].clone().view(torch.float32)
        return (q * (scale / self.levels).unsqueeze(1)).reshape(-1)[:numel]


def make_codec(cfg):
    """The codec ``cfg`` asks for; None for ``compress=none``."""
    if cfg.compress == "topk":
        return TopK(cfg.compress_ratio)
    if cfg.compress == "quant":
        return BlockQuant(cfg.compress_bits, cfg.compress_block)
    return None


def compressed_mean(comm, x: torch.Tensor, codec, residual: torch.Tensor | None, tag: str = ""):
    """Launch the all-gather of ``codec.encode(x + residual)``; the residual becomes what that
    payload did not carry.  Returns (handle, finish): ``finish()`` after ``handle.wait()`` is the
    mean of every rank's decoded payload, summed in rank order."""
    if residual is not None:
        x = x + residual
    mine = codec.encode(x)
    if residual is not None:
        residual.copy_(x - codec.decode(mine, x.numel()))
    world, n = comm.world_size, x.numel()
    out = torch.empty(world * mine.numel(), dtype=torch.uint8, device=mine.device)
    handle = comm.all_gather(out, mine, tag=tag)

    def finish() -> torch.Tensor:
        parts = out.view(world, -1)
        total = codec.decode(parts[0], n).clone()
        for r in range(1, world):  # a loop over the few ranks, not over parameters
            total.add_(codec.decode(parts[r], n))
        return total.div_(world)

    return handle, finish
