"""The data registry: which datasets exist (one module each, registered in DATASETS),
whether one can be used here (check_available, run by the CLI before any worker
starts), fetching it once (prepare, run by the launcher), and the sharded
per-worker loader (build_data; data_args says what a run's config asks of it).

Batches: task=image -> (x float32 (B,3,32,32) normalised, y int64 (B,));
task=lm -> LongTensor (B, block_size). One thread per worker, no DataLoader."""

from __future__ import annotations

from dreamddp.checks import ConfigError, at_least, between
from dreamddp.data.base import DataBundle, Dataset, DataUnavailable, LoadOptions
from dreamddp.data.image import make_image_bundle
from dreamddp.data.registry import DATASETS
from dreamddp.data.text import apply_vocab, make_lm_bundle
from dreamddp.registry import import_all

import_all(__name__, __path__)

__all__ = ["DATASETS", "DataBundle", "Dataset", "DataUnavailable", "LoadOptions", "build_data", "check",
           "check_available", "data_args", "prepare"]


def check_available(name: str, root: str) -> None:
    """Raise DataUnavailable (one line) if `name` can neither be read from root nor
    fetched. Never downloads; probes the network for at most ~2.5 s."""
    DATASETS.lookup(name).check(root)


def prepare(name: str, root: str) -> None:
    """Download and/or tokenise into root once, before workers start, so that
    workers never race on a download or on writing a cache."""
    dataset = DATASETS.lookup(name)
    dataset.check(root)
    dataset.prepare(root)


def _check_task(dataset: type[Dataset], task: str) -> None:
    if task not in ("image", "lm"):
        raise ValueError(f"task={task}: must be 'image' or 'lm'")
    if dataset.task not in (task, "any"):
        wanted = [n for n, d in DATASETS.items() if d.task in (task, "any")]
        raise ConfigError(f"data={dataset.name}: serves task={dataset.task}, the model needs task={task}; "
                          f"use data={' or data='.join(wanted)}")


def _check_options(block_size, eval_fraction, eval_batches, synthetic_size) -> None:
    at_least("data.block_size", block_size, 2)  # a language-model sample predicts token t+1 from t
    between("data.eval_fraction", eval_fraction, 0, 1, open_low=True, open_high=True)
    at_least("data.eval_batches", eval_batches, 1)
    at_least("data.synthetic_size", synthetic_size, 1)


def check(data, task: str) -> None:
    """The ``data.*`` rules for a model of ``task`` (the launcher's check; workers repeat it
    in build_data through the same functions)."""
    _check_task(DATASETS.lookup(data.name), task)
    _check_options(data.block_size, data.eval_fraction, data.eval_batches, data.synthetic_size)


def data_args(cfg, *, task: str, rank: int, world_size: int, vocab_size: int | None = None) -> dict:
    """``build_data``'s keyword arguments for a run's config, written once for the workers
    and the launcher's shard check: the ``data.*`` section, the seed and per-worker batch,
    and what the model decides (its ``task``; an LM's ``vocab_size``, which the token ids
    are remapped into; an image model's classes, the dataset's)."""
    d = cfg.data
    return dict(
        name=d.name, task=task, rank=rank, world_size=world_size, seed=cfg.seed,
        batch_size=cfg.train.batch_size, root=d.root, block_size=d.block_size, vocab_size=vocab_size,
        eval_fraction=d.eval_fraction, eval_batches=d.eval_batches, synthetic_size=d.synthetic_size,
        num_classes=DATASETS.lookup(d.name).num_classes if task == "image" else None,
    )


def _validate(dataset, task, rank, world_size, seed, batch_size, block_size, vocab_size,
              eval_fraction, eval_batches, synthetic_size, num_classes) -> None:
    _check_task(dataset, task)
    _check_options(block_size, eval_fraction, eval_batches, synthetic_size)
    checks = (
        (world_size >= 1, f"world_size={world_size}: must be >= 1"),
        (0 <= rank < world_size, f"rank={rank}: must be in [0, world_size={world_size})"),
        (seed >= 0, f"seed={seed}: must be >= 0"),
        (batch_size >= 1, f"batch_size={batch_size}: must be >= 1"),
        (vocab_size is None or vocab_size >= 2, f"vocab_size={vocab_size}: must be >= 2"),
        (num_classes is None or num_classes >= 2, f"num_classes={num_classes}: must be >= 2"),
    )
    for ok, msg in checks:
        if not ok:
            raise ValueError(msg)
    if num_classes is not None and dataset.task == "image" and num_classes != dataset.num_classes:
        raise ValueError(f"num_classes={num_classes}: data={dataset.name} has {dataset.num_classes} classes")


def build_data(
    name: str, *, task: str, rank: int, world_size: int, seed: int, batch_size: int, root: str,
    block_size: int = 128, vocab_size: int | None = None, eval_fraction: float = 0.05,
    eval_batches: int = 8, synthetic_size: int = 4096, num_classes: int | None = None,
) -> DataBundle:
    """This worker's DataBundle: an infinite train iterator over its own shard
    and the held-out batches (identical on every rank). Never downloads."""
    dataset = DATASETS.lookup(name)
    _validate(dataset, task, rank, world_size, seed, batch_size, block_size, vocab_size,
              eval_fraction, eval_batches, synthetic_size, num_classes)
    options = LoadOptions(task=task, block_size=block_size, eval_fraction=eval_fraction,
                          num_eval=eval_batches * batch_size, synthetic_size=synthetic_size,
                          vocab_size=vocab_size, num_classes=num_classes)
    splits = dataset.load(root, options)
    common = dict(rank=rank, world_size=world_size, seed=seed, batch_size=batch_size,
                  eval_batches=eval_batches, what=name)
    if task == "image":
        return make_image_bundle(splits, **common)
    return make_lm_bundle(apply_vocab(splits, vocab_size), block_size=block_size, **common)
