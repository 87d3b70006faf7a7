"""Streaming DiLoCo's fragments: the model cut into P groups of repeated blocks.

A BLOCK is a transformer block (``...h.<i>``, ``...layers.<i>``,
``...blocks.<i>``) or a ResNet stage (``layer<k>``), found from unit names.
Units outside every block are placed explicitly by FORWARD position:

- leading units (token/position embeddings, a ResNet stem) join the first block;
- trailing units (final norm, LM head / classifier) join the last block;
- units between two blocks join the following block.

GPT-2's tied embedding / LM head is one unit (``wte``, owned by the embedding)
and so travels with the FIRST block.  A model without any recognised block
(e.g. an ``nn.Sequential`` of layers) treats every unit as its own block.

Patterns over the ``B`` blocks in forward order (paper, section 2):

- ``sequential``: fragment p = blocks [p*B/P, (p+1)*B/P)  (contiguous);
- ``strided``: fragment p = blocks {p, p+P, p+2P, ...}   (interleaved).

A fragment is returned as unit indices in backward order; it is one or more
contiguous runs, i.e. one or more slices of the engine's flat buffers.
"""

from __future__ import annotations

import re

PATTERNS = ("sequential", "strided")
_BLOCK = re.compile(r"^((?:.*\.)?(?:(?:h|layers|blocks)\.\d+|layer\d+))(?:\.|$)")


def block_of(name: str) -> str | None:
    m = _BLOCK.match(name)
    return m.group(1) if m else None


def unit_blocks(names: list[str]) -> list[int]:
    """Block number (0 = first in forward order) of each unit (names in backward order)."""
    fwd = list(reversed(names))
    keys = [block_of(n) for n in fwd]
    if not any(keys):
        keys = fwd  # no repeated blocks: every unit is a block
    order: dict[str, int] = {}
    for k in keys:
        if k is not None and k not in order:
            order[k] = len(order)
    blocks = [None if k is None else order[k] for k in keys]  # forward order
    nxt = len(order) - 1  # trailing units (no block after them): the last block
    for i in range(len(blocks) - 1, -1, -1):  # from the end, so None takes the FOLLOWING block
        if blocks[i] is None:
            blocks[i] = nxt
        else:
            nxt = blocks[i]
    return list(reversed(blocks))


def fragments(names: list[str], P: int, pattern: str = "strided") -> list[list[int]]:
    """P fragments as sorted unit indices (backward order); fragment 0 holds block 0."""
    if pattern not in PATTERNS:
        raise ValueError(f"algo.fragment_pattern={pattern}: unknown; choose from {', '.join(PATTERNS)}")
    blocks = unit_blocks(names)
    B = max(blocks) + 1
    if not 1 <= P <= B:
        raise ValueError(f"algo.fragments={P}: must be between 1 and the model's {B} blocks")
    if pattern == "strided":
        frag_of_block = [b % P for b in range(B)]
    else:
        frag_of_block = [b * P // B for b in range(B)]
    out: list[list[int]] = [[] for _ in range(P)]
    for u, b in enumerate(blocks):
        out[frag_of_block[b]].append(u)
    return out
