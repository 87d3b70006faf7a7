"""Types shared by every dataset module: the registry entry, the bundle a worker
trains on, the in-memory splits loaders hand back, and the one error class the
CLI turns into a single line for the user."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch


class DataUnavailable(ValueError):
    """A dataset cannot be used here (files missing, no network). One-line message."""


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    task: str  # "image" | "lm" | "any" (synthetic serves both)
    num_classes: int | None
    needs_network: bool
    offline_alternative: str | None


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
