"""Fashion-MNIST from idx files: the Debian package dataset-fashion-mnist puts
them in /usr/share/datasets/fashion-mnist; <root>/fashion-mnist overrides.
Images stay 1x28x28 uint8 in memory and become 3x32x32 per batch (pad 2,
repeat channels) in image.to_model_input."""

from __future__ import annotations

import gzip
import math
import os

import numpy as np
import torch

from dreamddp.data.base import Dataset, DataUnavailable, ImageSplits, LoadOptions
from dreamddp.data.registry import DATASETS

SYSTEM_DIR = "/usr/share/datasets/fashion-mnist"
_STEMS = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")

# Published per-pixel statistics of the 28x28 train images; zero padding to
# 32x32 keeps the sum and the sum of squares, so the padded image's statistics
# follow by rescaling with the pixel fraction 784/1024.
_MEAN28, _STD28 = 0.2860, 0.3530
_FRAC = 28 * 28 / (32 * 32)
_MEAN = _MEAN28 * _FRAC
_STD = math.sqrt((_STD28**2 + _MEAN28**2) * _FRAC - _MEAN**2)


def _find(directory: str, stem: str) -> str | None:
    for path in (os.path.join(directory, stem + ".gz"), os.path.join(directory, stem)):
        if os.path.isfile(path):
            return path
    return None


def locate(root: str) -> str | None:
    """The first directory holding all four idx files: <root>/fashion-mnist, then the system one."""
    for d in (os.path.join(root, "fashion-mnist"), SYSTEM_DIR):
        if all(_find(d, s) for s in _STEMS):
            return d
    return None


def read_idx(path: str) -> np.ndarray:
    """An idx file (gzip or plain) of unsigned bytes: big-endian magic 0x0000 08 NDIM, dims, data."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] or raw[1] or raw[2] != 0x08:
        raise DataUnavailable(f"{path}: not an unsigned-byte idx file")
    ndim = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != math.prod(dims):
        raise DataUnavailable(f"{path}: header says {dims}, file holds {data.size} values")
    return data.reshape(dims)


@DATASETS.register
class FashionMnist(Dataset):
    """Read in place (the system package or data.root): nothing to prepare."""

    name = "fashion_mnist"
    task = "image"
    num_classes = 10

    @classmethod
    def check(cls, root: str) -> None:
        if locate(root) is None:
            raise DataUnavailable(
                f"data={cls.name}: the idx files are in neither {os.path.join(root, 'fashion-mnist')} "
                f"nor {SYSTEM_DIR}; install the Debian package dataset-fashion-mnist "
                "(apt-get install dataset-fashion-mnist)"
            )

    @classmethod
    def load(cls, root: str, options: LoadOptions) -> ImageSplits:
        cls.check(root)
        d = locate(root)
        tx, ty, ex, ey = (read_idx(_find(d, s)) for s in _STEMS)
        return ImageSplits(
            torch.from_numpy(tx.copy()).unsqueeze(1), torch.from_numpy(ty.astype(np.int64)),
            torch.from_numpy(ex.copy()).unsqueeze(1), torch.from_numpy(ey.astype(np.int64)),
            num_classes=cls.num_classes, mean=(_MEAN,) * 3, std=(_STD,) * 3, augment=False,
        )
