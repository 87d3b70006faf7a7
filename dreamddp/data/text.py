"""Token streams -> DataBundle: GPT-2 tokenisation of documents, the optional
frequency remap to a smaller vocabulary, and fixed-length blocks
(LongTensor (B, block_size)) sharded like any other sample set."""

from __future__ import annotations

import numpy as np
import torch

from dreamddp.data.base import DataBundle, TokenSplits
from dreamddp.data.sharding import ShardedBatches, spread_indices
from dreamddp.data.tokenizer import EOS_ID, encode

_CHUNK_CHARS = 1 << 16  # tokenise long texts in line-aligned chunks: batched, parallel in Rust


def _chunks(doc: str):
    """Line-aligned pieces of at most ~_CHUNK_CHARS characters (the last may be empty)."""
    start = 0
    while len(doc) - start > _CHUNK_CHARS:
        cut = doc.rfind("\n", start, start + _CHUNK_CHARS) + 1
        cut = cut if cut > start else start + _CHUNK_CHARS  # a line longer than a chunk
        yield doc[start:cut]
        start = cut
    yield doc[start:]


def tokenize_documents(docs: list[str], *, eos_between: bool) -> np.ndarray:
    """Concatenated GPT-2 ids of docs (uint16: every id < 65536), optionally with
    <|endoftext|> after each document."""
    pieces: list[str] = []
    ends: list[bool] = []  # this piece closes a document
    for doc in docs:
        chunks = list(_chunks(doc))
        pieces.extend(chunks)
        ends.extend([False] * (len(chunks) - 1) + [True])
    out: list[int] = []
    for ids, end in zip(encode(pieces), ends):
        out.extend(ids)
        if end and eos_between:
            out.append(EOS_ID)
    return np.asarray(out, dtype=np.uint16)


def frequency_remap(train: np.ndarray, base_vocab: int, vocab_size: int) -> np.ndarray:
    """Lookup table old id -> new id: ids ranked by descending frequency in the
    train stream (ties by ascending id); ranks past vocab_size-1 share the last id."""
    counts = np.bincount(train.astype(np.int64), minlength=base_vocab)
    order = np.argsort(-counts, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return np.minimum(rank, vocab_size - 1)


def apply_vocab(s: TokenSplits, vocab_size: int | None) -> TokenSplits:
    if vocab_size is None or vocab_size >= s.vocab_size:
        return TokenSplits(s.train, s.eval, vocab_size or s.vocab_size)
    table = frequency_remap(s.train, s.vocab_size, vocab_size)
    return TokenSplits(table[s.train.astype(np.int64)], table[s.eval.astype(np.int64)], vocab_size)


def to_blocks(stream: np.ndarray, block_size: int) -> torch.Tensor:
    n = len(stream) // block_size
    return torch.from_numpy(stream[: n * block_size].astype(np.int64)).view(n, block_size)


def make_lm_bundle(
    s: TokenSplits, *, rank: int, world_size: int, seed: int, batch_size: int,
    block_size: int, eval_batches: int, what: str,
) -> DataBundle:
    train_blocks = to_blocks(s.train, block_size)
    eval_blocks = to_blocks(s.eval, block_size)
    if len(eval_blocks) == 0 and eval_batches > 0:
        raise ValueError(
            f"data={what}: the held-out split has {len(s.eval)} tokens, fewer than block_size={block_size}"
        )
    train = ShardedBatches(
        len(train_blocks), rank=rank, world_size=world_size, seed=seed,
        batch_size=batch_size, make_batch=lambda idx, _gen: train_blocks[idx], what=what,
    )
    held = spread_indices(len(eval_blocks), eval_batches * batch_size)
    return DataBundle(
        train=train, eval=[eval_blocks[i] for i in held.split(batch_size)],
        samples_per_epoch=len(train.shard), num_classes=None, vocab_size=s.vocab_size,
    )
