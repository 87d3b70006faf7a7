"""CIFAR-10 / CIFAR-100 from the python pickle layout torchvision downloads
(cifar-10-batches-py/, cifar-100-python/ under root).

torchvision is used only to download (prepare). Loading reads the documented
pickle layout directly: torchvision's dataset classes insist on the md5 sums of
the official archive, which would reject any other file in that layout (test
fixtures, re-packed copies), and its per-sample PIL pipeline is slow."""

from __future__ import annotations

import os
import pickle

import numpy as np
import torch

from dreamddp import _compat  # noqa: F401  (torchvision import fix before torchvision)

from dreamddp.data.base import Dataset, DataUnavailable, ImageSplits, LoadOptions
from dreamddp.data.probe import reachable
from dreamddp.data.registry import DATASETS

# (folder, train files, test file, label key, classes, mean, std, pretty name)
_LAYOUT = {
    "cifar10": (
        "cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], "test_batch", "labels", 10,
        (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), "CIFAR-10",
    ),
    "cifar100": (
        "cifar-100-python", ["train"], "test", "fine_labels", 100,
        (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), "CIFAR-100",
    ),
}
_HOST = "www.cs.toronto.edu"  # where torchvision's download URL points


def _files(name: str, root: str) -> list[str]:
    folder, train, test, *_ = _LAYOUT[name]
    return [os.path.join(root, folder, f) for f in [*train, test]]


def present(name: str, root: str) -> bool:
    return all(os.path.isfile(f) for f in _files(name, root))


def _read(path: str, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    with open(path, "rb") as f:
        entry = pickle.load(f, encoding="latin1")  # python-2 pickles, as torchvision reads them
    entry = {k.decode() if isinstance(k, bytes) else k: v for k, v in entry.items()}
    data = np.asarray(entry["data"], dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DataUnavailable(f"{path}: expected 'data' of shape (N, 3072), got {data.shape}")
    return data.reshape(-1, 3, 32, 32), np.asarray(entry[label_key], dtype=np.int64)


def load(name: str, root: str) -> ImageSplits:
    if not present(name, root):
        raise DataUnavailable(
            f"data={name}: {_LAYOUT[name][7]} is not in {root}; run prepare (the launcher does) "
            "with network access first"
        )
    _, train_files, _, key, classes, mean, std, _ = _LAYOUT[name]
    paths = _files(name, root)
    parts = [_read(p, key) for p in paths[: len(train_files)]]
    ex, ey = _read(paths[-1], key)
    tx = np.concatenate([p[0] for p in parts])
    ty = np.concatenate([p[1] for p in parts])
    for y, p in ((ty, "train"), (ey, "test")):
        if len(y) and (y.min() < 0 or y.max() >= classes):
            raise DataUnavailable(f"data={name}: {p} labels outside [0, {classes}) in {root}")
    return ImageSplits(
        torch.from_numpy(tx), torch.from_numpy(ty), torch.from_numpy(ex), torch.from_numpy(ey),
        num_classes=classes, mean=mean, std=std, augment=True,
    )


class _Cifar(Dataset):
    """Both CIFARs: the paper's image data, downloaded once by torchvision."""

    task = "image"
    needs_network = True
    offline_alternative = "fashion_mnist"

    @classmethod
    def check(cls, root: str) -> None:
        if present(cls.name, root) or reachable(_HOST):
            return
        raise DataUnavailable(
            f"data={cls.name}: {_LAYOUT[cls.name][7]} is not in {root} and cannot be downloaded (offline); "
            f"use data={cls.offline_alternative} or data=synthetic"
        )

    @classmethod
    def prepare(cls, root: str) -> None:
        if present(cls.name, root):
            return
        import torchvision.datasets as tvd

        download = tvd.CIFAR10 if cls.name == "cifar10" else tvd.CIFAR100
        download(root=root, train=True, download=True)  # one archive holds both splits

    @classmethod
    def load(cls, root: str, options: LoadOptions) -> ImageSplits:
        return load(cls.name, root)  # the module's reader above


@DATASETS.register
class Cifar10(_Cifar):
    name = "cifar10"
    num_classes = _LAYOUT[name][4]


@DATASETS.register
class Cifar100(_Cifar):
    name = "cifar100"
    num_classes = _LAYOUT[name][4]
