"""Types shared by every dataset module: the registry entry (a Dataset), what a
loader is asked for, the bundle a worker trains on, the in-memory splits loaders
hand back, and the one error class the CLI turns into a single line for the user."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Iterator

import numpy as np
import torch


class DataUnavailable(ValueError):
    """A dataset cannot be used here (files missing, no network). One-line message."""


@dataclass(frozen=True)
class LoadOptions:
    """What a worker asks a dataset for (build_data fills it from the ``data.*`` config)."""

    task: str  # the model's: "image" or "lm" (synthetic data is generated for either)
    block_size: int  # tokens per language-model sample
    eval_fraction: float  # held-out share of a dataset without a test split
    num_eval: int  # held-out samples a generated dataset makes (eval_batches * batch_size)
    synthetic_size: int  # training samples a generated dataset makes
    vocab_size: int | None  # the model's vocabulary (None: the dataset's own)
    num_classes: int | None  # the model's classes (None: the dataset's own)


class Dataset:
    """One dataset, one module: what it is (the class attributes), whether it can be
    used on this host (``check``, run by the launcher before any worker starts),
    fetching it once (``prepare``, the launcher, so workers never race on a download
    or a cache), and reading it in a worker (``load``, never downloads).  A subclass
    decorated with ``@DATASETS.register`` (data/registry.py) is all it takes to add
    one, plus its conf/data yaml."""

    name: ClassVar[str]  # the data= option
    task: ClassVar[str]  # "image" | "lm" | "any" (synthetic serves both)
    num_classes: ClassVar[int | None] = None  # image datasets; synthetic: its task=image default
    needs_network: ClassVar[bool] = False  # the first use downloads
    offline_alternative: ClassVar[str | None] = None  # what to use instead without network

    @classmethod
    def check(cls, root: str) -> None:
        """Raise DataUnavailable (one line) if the data can neither be read from root nor
        fetched.  Never downloads; may probe the network for a few seconds.  Nothing to
        check by default (generated data)."""

    @classmethod
    def prepare(cls, root: str) -> None:
        """Download and/or tokenise into root (``check`` has passed).  Nothing by default
        (data read in place)."""

    @classmethod
    def load(cls, root: str, options: LoadOptions) -> "ImageSplits | TokenSplits":
        """The whole train and held-out splits, in memory."""
        raise NotImplementedError


@dataclass
class DataBundle:
    train: Iterator  # infinite; reshuffled per epoch from (seed, epoch, rank)
    eval: list  # held-out batches, identical on every rank
    samples_per_epoch: int  # per worker (its shard); batches per epoch = this // batch_size
    num_classes: int | None
    vocab_size: int | None


@dataclass
class ImageSplits:
    """Whole train/held-out splits in memory. uint8 images are scaled, padded to
    32x32, repeated to 3 channels and normalised per batch (keeps memory at one
    byte per pixel); float images are used as they are."""

    train_x: torch.Tensor  # (N, C, H, W) uint8 or float32
    train_y: torch.Tensor  # (N,) int64
    eval_x: torch.Tensor
    eval_y: torch.Tensor
    num_classes: int
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    augment: bool = False  # random crop (pad 4) + horizontal flip on train batches


@dataclass
class TokenSplits:
    """Token streams (1-D integer arrays) before they are cut into blocks."""

    train: np.ndarray
    eval: np.ndarray
    vocab_size: int
