"""Token-stream caches under the data root. Several workers may start at once
and find the cache missing: each writes a private temp file and renames it into
place (atomic on POSIX), so a reader sees either nothing or a whole file."""

from __future__ import annotations

import hashlib
import os
import tempfile

import numpy as np


def fingerprint(paths: list[str], *extra: str) -> str:
    """Names and sizes of the source files plus any extra keys (tokenizer, variant)."""
    h = hashlib.sha1()
    for p in sorted(paths):
        h.update(f"{os.path.basename(p)}:{os.path.getsize(p)};".encode())
    for e in extra:
        h.update(e.encode())
    return h.hexdigest()[:16]


def load_array(path: str) -> np.ndarray | None:
    return np.load(path) if os.path.isfile(path) else None


def save_array(path: str, array: np.ndarray) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", suffix=".tmp.npy")
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, array)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
