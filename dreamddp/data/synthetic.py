"""Deterministic synthetic data that a model can actually learn, for runs that
need no files: images labelled by a fixed random linear teacher, and token
blocks from a sparse random first-order Markov chain.

The content comes from a fixed data seed, not the run seed: runs with
different seeds train on the same task and differ only in sharding and order."""

from __future__ import annotations

import numpy as np
import torch

from dreamddp.data.base import Dataset, ImageSplits, LoadOptions, TokenSplits
from dreamddp.data.registry import DATASETS
from dreamddp.data.sharding import generator

_DATA_SEED = 20240601
_SUCCESSORS = 8  # per state: entropy <= log 8 nats, far below log V, so loss can fall
_DEFAULT_VOCAB = 256
_DEFAULT_CLASSES = 10


def images(num_train: int, num_eval: int, num_classes: int | None) -> ImageSplits:
    c = num_classes or _DEFAULT_CLASSES
    g = generator(_DATA_SEED, 1, c)
    teacher = torch.randn(3 * 32 * 32, c, generator=g)
    x = torch.randn(num_train + num_eval, 3, 32, 32, generator=g)
    y = (x.flatten(1) @ teacher).argmax(1)
    return ImageSplits(x[:num_train], y[:num_train], x[num_train:], y[num_train:], num_classes=c)


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([_DATA_SEED, *key]))


def markov_chain(vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """(successors (V, k), cumulative probabilities (V, k)) of a random chain."""
    rng = _rng(2, vocab)
    succ = rng.integers(0, vocab, (vocab, _SUCCESSORS))
    w = rng.random((vocab, _SUCCESSORS)) ** 3  # skewed weights: lower entropy
    return succ, (w / w.sum(1, keepdims=True)).cumsum(1)


def sample_chains(succ: np.ndarray, cdf: np.ndarray, n: int, length: int, rng: np.random.Generator) -> np.ndarray:
    """n independent chains of `length` tokens, stepped together. numpy, not
    torch: the loop is many tiny ops, which torch's intra-op threads slow down."""
    out = np.empty((length, n), dtype=np.int64)
    out[0] = rng.integers(0, len(succ), n)
    for t in range(1, length):
        cur = out[t - 1]
        j = (cdf[cur] < rng.random((n, 1))).sum(1)  # inverse-CDF draw
        out[t] = succ[cur, np.minimum(j, _SUCCESSORS - 1)]
    return out.T


def tokens(num_train: int, num_eval: int, block_size: int, vocab_size: int | None) -> TokenSplits:
    """Streams of whole chains, one chain per block, so blocks cut at block_size
    each hold one chain from a uniformly random start state."""
    v = vocab_size or _DEFAULT_VOCAB
    succ, cdf = markov_chain(v)
    rng = _rng(3, v, block_size)
    train = sample_chains(succ, cdf, num_train, block_size, rng).reshape(-1)
    held = sample_chains(succ, cdf, num_eval, block_size, rng).reshape(-1)
    return TokenSplits(train, held, v)


@DATASETS.register
class Synthetic(Dataset):
    """Generated for the model's task: nothing to check, fetch or cache."""

    name = "synthetic"
    task = "any"
    num_classes = _DEFAULT_CLASSES  # task=image; the model's num_classes overrides it

    @classmethod
    def load(cls, root: str, options: LoadOptions) -> ImageSplits | TokenSplits:
        if options.task == "image":
            return images(options.synthetic_size, options.num_eval, options.num_classes)
        return tokens(options.synthetic_size, options.num_eval, options.block_size, options.vocab_size)
