"""Tiny on-disk datasets in the real published layouts, written by the tests so
the real loading code can be exercised without the real (large, or
network-only) files."""

from __future__ import annotations

import gzip
import os
import pickle
import struct

import numpy as np


def write_cifar(root: str, name: str, per_file: int = 6, n_test: int = 5, seed: int = 0) -> dict:
    """CIFAR python layout: cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}
    or cifar-100-python/{train,test,meta}; dicts of 'data' (N,3072) uint8 + labels."""
    rng = np.random.default_rng(seed)
    if name == "cifar10":
        folder, train, test, key, classes = "cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], "test_batch", "labels", 10
        meta_file, meta = "batches.meta", {"label_names": [f"c{i}" for i in range(10)], "num_vis": 3072}
    else:
        folder, train, test, key, classes = "cifar-100-python", ["train"], "test", "fine_labels", 100
        meta_file, meta = "meta", {"fine_label_names": [f"f{i}" for i in range(100)], "coarse_label_names": [f"k{i}" for i in range(20)]}
        per_file *= 5
    d = os.path.join(root, folder)
    os.makedirs(d, exist_ok=True)
    written = {"train_x": [], "train_y": []}
    for fname, n in [(f, per_file) for f in train] + [(test, n_test)]:
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = rng.integers(0, classes, n).tolist()
        entry = {"batch_label": fname, "data": data, key: labels, "filenames": [f"{i}.png" for i in range(n)]}
        if name == "cifar100":
            entry["coarse_labels"] = [y // 5 for y in labels]
        with open(os.path.join(d, fname), "wb") as f:
            pickle.dump(entry, f, protocol=2)
        if fname == test:
            written["test_x"], written["test_y"] = data.reshape(-1, 3, 32, 32), np.array(labels)
        else:
            written["train_x"].append(data.reshape(-1, 3, 32, 32))
            written["train_y"].extend(labels)
    with open(os.path.join(d, meta_file), "wb") as f:
        pickle.dump(meta, f, protocol=2)
    written["train_x"] = np.concatenate(written["train_x"])
    written["train_y"] = np.array(written["train_y"])
    return written


def idx_bytes(array: np.ndarray) -> bytes:
    """The idx format: 0x0000, type 0x08 (ubyte), ndim, big-endian uint32 dims, data."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_fashion(directory: str, n_train: int = 40, n_test: int = 12, seed: int = 0, gz: bool = True) -> dict:
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train).astype(np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test).astype(np.uint8),
    }
    os.makedirs(directory, exist_ok=True)
    for stem, a in arrays.items():
        opener, path = (gzip.open, os.path.join(directory, stem + ".gz")) if gz else (open, os.path.join(directory, stem))
        with opener(path, "wb") as f:
            f.write(idx_bytes(a))
    return arrays


_WORDS = "the of and in to a was is for on as by with he that at from his it an were are which".split()


def wikitext_like(n_articles: int, seed: int) -> str:
    """Text in the WikiText raw style: ' = Title = ' headings, paragraphs, blank lines."""
    rng = np.random.default_rng(seed)
    lines = []
    for a in range(n_articles):
        lines += [" \n", f" = Article {a} = \n", " \n"]
        for _ in range(3):
            words = rng.choice(_WORDS, int(rng.integers(20, 60)))
            lines.append(" " + " ".join(words) + " . \n")
            lines.append(" \n")
    return "".join(lines)


def write_wikitext_raw(root: str, seed: int = 0) -> dict[str, str]:
    """The original release layout: <root>/wikitext-2-raw/wiki.{train,valid,test}.raw."""
    d = os.path.join(root, "wikitext-2-raw")
    os.makedirs(d, exist_ok=True)
    texts = {"train": wikitext_like(12, seed), "valid": wikitext_like(3, seed + 1), "test": wikitext_like(3, seed + 2)}
    for split, text in texts.items():
        with open(os.path.join(d, f"wiki.{split}.raw"), "w", encoding="utf-8") as f:
            f.write(text)
    return texts


def write_wikitext_parquet(root: str, seed: int = 0) -> dict[str, str]:
    """The hub repository layout: <root>/wikitext/wikitext-2-raw-v1/{split}-00000-of-00001.parquet,
    one row per line with its newline kept, as the hub's raw config stores it."""
    import datasets

    d = os.path.join(root, "wikitext", "wikitext-2-raw-v1")
    os.makedirs(d, exist_ok=True)
    texts = {"train": wikitext_like(12, seed), "valid": wikitext_like(3, seed + 1), "test": wikitext_like(3, seed + 2)}
    for split, hub_split in (("train", "train"), ("valid", "validation"), ("test", "test")):
        rows = texts[split].splitlines(keepends=True)
        datasets.Dataset.from_dict({"text": rows}).to_parquet(os.path.join(d, f"{hub_split}-00000-of-00001.parquet"))
    return texts
