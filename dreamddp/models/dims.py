"""The ``model.*`` dimensions a run may set over its size preset, and their rules.

Each key is the builder argument of the same name (models/registry.py), so a
model takes exactly the keys its builder does: GPT-2 and Llama n_layer,
n_embd, n_head, n_inner and vocab_size; the ResNets base_width and
num_blocks.  Null (the default) keeps the preset's value; a key the model
does not take is refused.  The launcher checks before any worker starts and
every worker's build_model repeats the same check.
"""

from __future__ import annotations

import inspect

from dreamddp.checks import ConfigError, at_least
from dreamddp.models.registry import MODELS, preset

DIMENSIONS = ("n_layer", "n_embd", "n_head", "n_inner", "vocab_size", "base_width", "num_blocks")
_LEAST = {"vocab_size": 2}  # a vocabulary of one token predicts nothing; every other dimension: >= 1
_TASK_WORDS = {"lm": "language models", "image": "image models"}


def takes(name: str) -> tuple[str, ...]:
    """The dimensions model ``name``'s builder takes, in DIMENSIONS order."""
    params = inspect.signature(MODELS[name].build).parameters
    return tuple(k for k in DIMENSIONS if k in params)


def given(model) -> dict:
    """The dimensions a ``model`` config section sets (not null); lists as plain lists."""
    out = {}
    for key in DIMENSIONS:
        value = model.get(key)
        if value is not None:
            out[key] = value if isinstance(value, (bool, int, float, str)) else list(value)
    return out


def _refuse_foreign(name: str, key: str, value) -> None:
    owners = [n for n in MODELS if key in takes(n)]
    tasks = {MODELS[n].task for n in owners}
    who = _TASK_WORDS[tasks.pop()] if len(tasks) == 1 else "models"
    raise ConfigError(f"model.{key}={value}: only {who} ({', '.join(owners)}) take it, not {name}")


def resolve(name: str, size: str, dims: dict) -> dict:
    """The preset's builder arguments with ``dims`` (model.* keys) over them, after every
    rule: each value alone, then the model's own (heads dividing the width, four ResNet
    stages ...)."""
    spec, args = preset(name, size)
    accepted = takes(name)
    for key, value in dims.items():
        if key not in accepted:
            _refuse_foreign(name, key, value)
        if key != "num_blocks":  # a list: the ResNet's own rule
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"model.{key}={value}: must be an integer")
            at_least(f"model.{key}", value, _LEAST.get(key, 1))
        args[key] = value
    spec.check(args, set(dims))
    return args
