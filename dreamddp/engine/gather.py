"""Payloads made of several spans of the flat buffers, and the mean of every rank's compressed
one (the sync pipeline's codec path, engine/pipeline.py)."""

from __future__ import annotations

from dreamddp.lazy import lazy

torch = lazy("torch")


def slice_of(x, spans, a: int, b: int):
    """The part of ``x`` (the spans' elements, concatenated) that holds flat elements [a, b)."""
    offset = 0
    for lo, hi in spans:
        if lo <= a and b <= hi:
            return x[offset + a - lo: offset + b - lo]
        offset += hi - lo
    raise ValueError(f"elements [{a}, {b}) outside the op's spans {spans}")


def cat(parts):
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def split(x, spans):
    return [x] if len(spans) == 1 else x.split([b - a for a, b in spans])


def gather_mean(comm, x, codec, residual, decay: float, senders: bool, tag: str):
    """Launch the all-gather of ``codec.encode(x + decay * e)`` (``residual``: e, one view per
    span of x, or None); e becomes what the payload did not carry.  Returns (handle, finish):
    ``finish()`` after the wait is the mean of every rank's decoded payload, summed in rank order
    (``senders``: each index over the ranks whose payload carried it)."""
    mine = encoded(x, codec, residual, decay)
    world, n = comm.world_size, x.numel()
    out = torch.empty(world * mine.numel(), dtype=torch.uint8, device=mine.device)
    handle = comm.all_gather(out, mine, tag=tag)
    return handle, lambda: decoded_mean(out.view(world, -1), codec, n, senders)


def encoded(x, codec, residual, decay: float):
    """This rank's payload of ``x`` with error feedback (``residual`` updated in place)."""
    if residual is not None:
        e = cat(residual)
        x = x + e * decay if decay != 1 else x + e
    mine = codec.encode(x)
    if residual is not None:
        left = x - codec.decode(mine, x.numel())
        torch._foreach_copy_(residual, list(left.split([r.numel() for r in residual])))
    return mine


def decoded_mean(parts, codec, n: int, senders: bool):
    """The mean of the ranks' payloads (``parts``: one row per rank), summed in rank order."""
    total = codec.decode(parts[0], n).clone()
    count = codec.support(parts[0], n).float() if senders else None
    for r in range(1, parts.shape[0]):  # a loop over the few ranks
        total.add_(codec.decode(parts[r], n))
        if senders:
            count.add_(codec.support(parts[r], n).float())
    return total.div_(parts.shape[0]) if not senders else total.div_(count.clamp_(min=1))
