"""Model registry: build a model by name, size preset and the ``model.*`` dimensions
set over it, list its units, and summarise it.

The models and their presets are in models/registry.py, the dimensions a run may
set and their rules in models/dims.py, the start-up summary in models/summary.py.
"""

from __future__ import annotations

from torch import nn

from dreamddp.checks import ConfigError
from dreamddp.data import DATASETS
from dreamddp.engine.units import enumerate_units
from dreamddp.models.dims import DIMENSIONS, given, resolve, takes
from dreamddp.models.registry import MODELS, SIZES, ModelSpec, preset
from dreamddp.models.summary import summarize, summary_line
from dreamddp.models.tasks import TASKS, compute_loss, evaluate

# Key of each preset's output size (classes / vocabulary).
_OUTPUT_KEY = {"image": "num_classes", "lm": "vocab_size"}


def check(model) -> None:
    """The ``model.*`` rules: a known name and size, and the dimensions set over the preset."""
    resolve(model.name, model.size, given(model))


def check_block_size(name: str, size: str, block_size: int) -> None:
    """A language model's context must fit its position table (the preset's size)."""
    limit = max_positions(name, size)
    if limit is not None and block_size > limit:
        raise ConfigError(f"data.block_size={block_size}: exceeds the {limit} positions of {name} {size}")


def max_positions(name: str, size: str) -> int | None:
    """Longest sequence the preset's position table covers (None for image models)."""
    spec, args = preset(name, size)
    return args["n_positions"] if spec.task == "lm" else None


def _check_positive_int(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{field}={value}: must be a positive integer")


def build_model(
    name: str,
    size: str,
    *,
    num_classes: int | None = None,
    vocab_size: int | None = None,
    block_size: int | None = None,
    **dims,
) -> nn.Module:
    """A randomly initialised model from the torch RNG (seed torch beforehand).

    ``num_classes`` (image models) and ``vocab_size`` (LMs) override the
    preset's output size; ``block_size`` (LMs) is only checked against the
    preset's position table, which stays the preset's size.  ``dims`` are the
    other ``model.*`` dimensions (models/dims.py), checked as the launcher does.
    """
    spec, _ = preset(name, size)
    args = resolve(name, size, dims)
    outputs = {"num_classes": num_classes, "vocab_size": vocab_size}
    for key, value in outputs.items():
        if value is None:
            continue
        if key != _OUTPUT_KEY[spec.task]:
            raise ValueError(f"data.{key}={value}: not used by {name} (a {spec.task} model)")
        _check_positive_int(f"data.{key}", value)
        args[key] = value
    if block_size is not None:
        if spec.task != "lm":
            raise ValueError(f"data.block_size={block_size}: not used by {name} (an image model)")
        _check_positive_int("data.block_size", block_size)
        check_block_size(name, size, block_size)
    return spec.build(**args)


def model_args(cfg) -> dict:
    """``build_model``'s keyword arguments for a run's config, written once for the
    workers and the launcher's checks: name, size and the dimensions set in ``model.*``,
    and what the data decides (an image model's classes; an LM's context, checked
    against its positions)."""
    m = cfg.model
    spec, _ = preset(m.name, m.size)
    dims = given(m)
    args = dict(name=m.name, size=m.size, vocab_size=dims.pop("vocab_size", None), **dims)
    if spec.task == "lm":
        args["block_size"] = cfg.data.block_size
    else:
        args["num_classes"] = DATASETS.lookup(cfg.data.name).num_classes
    return args


# The model's units in backward order (output side first): the engine's own
# enumeration, re-exported so callers need only the registry.
model_units = enumerate_units


__all__ = [
    "DIMENSIONS", "MODELS", "SIZES", "TASKS", "ModelSpec", "build_model", "check", "check_block_size",
    "compute_loss", "evaluate", "max_positions", "model_args", "model_units", "summarize", "summary_line", "takes",
]
