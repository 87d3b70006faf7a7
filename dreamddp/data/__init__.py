"""The data registry: which datasets exist, whether they can be used here
(check_available, run by the CLI before any worker starts), fetching them once
(prepare, run by the launcher), and the sharded per-worker loader (build_data).

Batches: task=image -> (x float32 (B,3,32,32) normalised, y int64 (B,));
task=lm -> LongTensor (B, block_size). One thread per worker, no DataLoader."""

from __future__ import annotations

from dreamddp.checks import ConfigError, at_least, between
from dreamddp.data import cifar, fashion_mnist, shakespeare, synthetic, wikitext
from dreamddp.data.base import DataBundle, DatasetSpec, DataUnavailable
from dreamddp.data.image import make_image_bundle
from dreamddp.data.text import apply_vocab, make_lm_bundle

__all__ = ["DATASETS", "DataBundle", "DatasetSpec", "DataUnavailable", "build_data", "check_available", "prepare"]

DATASETS: dict[str, DatasetSpec] = {
    s.name: s
    for s in (
        DatasetSpec("cifar10", "image", 10, needs_network=True, offline_alternative="fashion_mnist"),
        DatasetSpec("cifar100", "image", 100, needs_network=True, offline_alternative="fashion_mnist"),
        DatasetSpec("fashion_mnist", "image", 10, needs_network=False, offline_alternative=None),
        DatasetSpec("wikitext2", "lm", None, needs_network=True, offline_alternative="shakespeare"),
        DatasetSpec("shakespeare", "lm", None, needs_network=False, offline_alternative=None),
        # num_classes is the task=image default; num_classes= overrides it
        DatasetSpec("synthetic", "any", 10, needs_network=False, offline_alternative=None),
    )
}


def _spec(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise ConfigError(f"data={name}: unknown dataset; choose one of {', '.join(DATASETS)}")
    return DATASETS[name]


def check_available(name: str, root: str) -> None:
    """Raise DataUnavailable (one line) if `name` can neither be read from root
    nor fetched. Never downloads; probes the network for at most ~2.5 s."""
    _spec(name)
    if name in ("cifar10", "cifar100"):
        cifar.check(name, root)
    elif name == "fashion_mnist":
        fashion_mnist.check(root)
    elif name == "wikitext2":
        wikitext.check(root)
    elif name == "shakespeare":
        shakespeare.check(root)


def prepare(name: str, root: str) -> None:
    """Download and/or tokenise into root once, before workers start, so that
    workers never race on a download or on writing a cache."""
    check_available(name, root)
    if name in ("cifar10", "cifar100"):
        cifar.prepare(name, root)
    elif name == "wikitext2":
        wikitext.prepare(root)
    elif name == "shakespeare":
        shakespeare.prepare(root)


def _check_task(spec: DatasetSpec, task: str) -> None:
    if task not in ("image", "lm"):
        raise ValueError(f"task={task}: must be 'image' or 'lm'")
    if spec.task not in (task, "any"):
        wanted = [n for n, s in DATASETS.items() if s.task in (task, "any")]
        raise ConfigError(f"data={spec.name}: serves task={spec.task}, the model needs task={task}; "
                          f"use data={' or data='.join(wanted)}")


def _check_options(block_size, eval_fraction, eval_batches, synthetic_size) -> None:
    at_least("data.block_size", block_size, 2)  # a language-model sample predicts token t+1 from t
    between("data.eval_fraction", eval_fraction, 0, 1, open_low=True, open_high=True)
    at_least("data.eval_batches", eval_batches, 1)
    at_least("data.synthetic_size", synthetic_size, 1)


def check(data, task: str) -> None:
    """The ``data.*`` rules for a model of ``task`` (the launcher's check; workers repeat it
    in build_data through the same functions)."""
    spec = _spec(data.name)
    _check_task(spec, task)
    _check_options(data.block_size, data.eval_fraction, data.eval_batches, data.synthetic_size)


def _validate(spec, task, rank, world_size, seed, batch_size, block_size, vocab_size,
              eval_fraction, eval_batches, synthetic_size, num_classes) -> None:
    _check_task(spec, task)
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
    if num_classes is not None and spec.task == "image" and num_classes != spec.num_classes:
        raise ValueError(f"num_classes={num_classes}: data={spec.name} has {spec.num_classes} classes")


def build_data(
    name: str, *, task: str, rank: int, world_size: int, seed: int, batch_size: int, root: str,
    block_size: int = 128, vocab_size: int | None = None, eval_fraction: float = 0.05,
    eval_batches: int = 8, synthetic_size: int = 4096, num_classes: int | None = None,
) -> DataBundle:
    """This worker's DataBundle: an infinite train iterator over its own shard
    and the held-out batches (identical on every rank). Never downloads."""
    spec = _spec(name)
    _validate(spec, task, rank, world_size, seed, batch_size, block_size, vocab_size,
              eval_fraction, eval_batches, synthetic_size, num_classes)
    common = dict(rank=rank, world_size=world_size, seed=seed, batch_size=batch_size,
                  eval_batches=eval_batches, what=name)
    if task == "image":
        if name == "synthetic":
            splits = synthetic.images(synthetic_size, eval_batches * batch_size, num_classes)
        elif name == "fashion_mnist":
            splits = fashion_mnist.load(root)
        else:
            splits = cifar.load(name, root)
        return make_image_bundle(splits, **common)
    if name == "synthetic":
        tokens = synthetic.tokens(synthetic_size, eval_batches * batch_size, block_size, vocab_size)
    elif name == "shakespeare":
        tokens = apply_vocab(shakespeare.load(root, eval_fraction), vocab_size)
    else:
        tokens = apply_vocab(wikitext.load(root), vocab_size)
    return make_lm_bundle(tokens, block_size=block_size, **common)
