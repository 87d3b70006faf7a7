"""Model registry: build a model by name and size preset, and list its units.

Three presets per model:

- ``tiny``: the topology at a size that trains in milliseconds on CPU (tests);
- ``small``: CPU-sized but in the paper's regime, where it matters for
  scheduling: the share of bytes in the embeddings and output layer (GPT-2:
  31% as in the 124M model; Llama-2: 19% as in the authors' 176M model) and,
  for ResNets, the paper network's blocks at a narrower width, so every layer
  keeps its share of the model's bytes (within 1 point; the classifier, whose
  bytes scale with the width and not its square, moves most);
- ``paper``: the models of the DreamDDP paper, whose module names match the
  authors' published profiles so their schedules apply to ours.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from dreamddp.checks import ConfigError, at_least
from dreamddp.engine.units import enumerate_units
from dreamddp.models.resnet import build_resnet
from dreamddp.models.tasks import TASKS, compute_loss, evaluate
from dreamddp.models.transformers_lm import build_gpt2, build_llama

SIZES = ("tiny", "small", "paper")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    task: str  # "image" or "lm"
    default_data: str  # "fashion_mnist" for resnets, "shakespeare" for LMs
    build: Callable[..., nn.Module]
    sizes: dict[str, dict]  # preset keyword arguments of ``build``, per size


# Key of each preset's output size (classes / vocabulary) and context length.
_OUTPUT_KEY = {"image": "num_classes", "lm": "vocab_size"}
_POSITIONS_KEY = {"gpt2": "n_positions", "llama2": "max_position_embeddings"}

MODELS: dict[str, ModelSpec] = {
    "resnet18": ModelSpec(
        "resnet18", "image", "fashion_mnist", build_resnet,
        {
            "tiny": dict(block="basic", num_blocks=(1, 1, 1, 1), base_width=8, num_classes=10),
            "small": dict(block="basic", num_blocks=(2, 2, 2, 2), base_width=16, num_classes=10),  # 0.70M
            "paper": dict(block="basic", num_blocks=(2, 2, 2, 2), base_width=64, num_classes=10),  # 11.2M
        },
    ),
    "resnet50": ModelSpec(
        "resnet50", "image", "fashion_mnist", build_resnet,
        {
            "tiny": dict(block="bottleneck", num_blocks=(1, 1, 1, 1), base_width=8,
                         num_classes=100),
            # width 32, not 16: the classifier's share grows as the convolutions shrink
            "small": dict(block="bottleneck", num_blocks=(3, 4, 6, 3), base_width=32,
                          num_classes=100),  # 6.0M
            "paper": dict(block="bottleneck", num_blocks=(3, 4, 6, 3), base_width=64,
                          num_classes=100),  # 23.7M
        },
    ),
    "gpt2": ModelSpec(
        "gpt2", "lm", "shakespeare", build_gpt2,
        {
            # tiny keeps the 8,192 most frequent BPE tokens (the data layer remaps ids by
            # frequency, rarer ones share the last id): a full 50,257-way output layer
            # would dominate CPU time of a 2-layer model.
            "tiny": dict(n_layer=2, n_embd=64, n_head=2, n_positions=128, vocab_size=8192),
            # 12 blocks as in GPT-2 124M, 4,096 most frequent tokens: 0.87M parameters, 31.1% of
            # them in wte + wpe (the 124M model: 31.6%).  No dropout: on a CPU its random masks
            # cost as much as the rest of this narrow model's forward pass (forward / backward
            # 1.6 with dropout, 0.8 without, measured here; a GPU running the 124M model is
            # near 0.5), and the time split between forward and backward is the regime the
            # schedules depend on.
            "small": dict(n_layer=12, n_embd=64, n_head=4, n_positions=128, vocab_size=4096, dropout=0.0),
            "paper": dict(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257),  # 124.4M
        },
    ),
    "llama2": ModelSpec(
        "llama2", "lm", "shakespeare", build_llama,
        {
            "tiny": dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                         intermediate_size=172, max_position_embeddings=128, vocab_size=8192),
            # The paper model's 8 layers and MLP ratio (11008 / 512) at hidden 64, 4,096 tokens:
            # 2.77M parameters, 18.9% of them in embed_tokens + lm_head (the paper model: 18.6%).
            "small": dict(num_hidden_layers=8, hidden_size=64, num_attention_heads=4,
                          intermediate_size=1376, max_position_embeddings=128, vocab_size=4096),
            # As the DreamDDP authors build their cut-down Llama-2 ("llama2-124M" in their
            # artifact): 8 layers, hidden 512, 8 heads, Llama-2-7B's intermediate size 11008,
            # 764 positions, 32k vocabulary: 176.4M parameters (the paper's "about 175M").
            "paper": dict(num_hidden_layers=8, hidden_size=512, num_attention_heads=8,
                          intermediate_size=11008, max_position_embeddings=764,
                          vocab_size=32000),
        },
    ),
}

assert set(_POSITIONS_KEY) == {n for n, s in MODELS.items() if s.task == "lm"}
assert all(set(s.sizes) == set(SIZES) for s in MODELS.values())


def _preset(name: str, size: str) -> tuple[ModelSpec, dict]:
    if name not in MODELS:
        raise ConfigError(f"model.name={name}: unknown model; choose from {', '.join(MODELS)}")
    if size not in SIZES:
        raise ConfigError(f"model.size={size}: unknown size for {name}; choose from {', '.join(SIZES)}")
    spec = MODELS[name]
    return spec, dict(spec.sizes[size])


def check(model) -> None:
    """The ``model.*`` rules."""
    spec, _ = _preset(model.name, model.size)
    if model.vocab_size is not None:
        if spec.task != "lm":
            raise ConfigError(f"model.vocab_size={model.vocab_size}: only language models take a vocabulary size")
        at_least("model.vocab_size", model.vocab_size, 2)


def check_block_size(name: str, size: str, block_size: int) -> None:
    """A language model's context must fit its position table (the preset's size)."""
    limit = max_positions(name, size)
    if limit is not None and block_size > limit:
        raise ConfigError(f"data.block_size={block_size}: exceeds the {limit} positions of {name} {size}")


def max_positions(name: str, size: str) -> int | None:
    """Longest sequence the preset's position table covers (None for image models)."""
    spec, preset = _preset(name, size)
    return preset[_POSITIONS_KEY[name]] if spec.task == "lm" else None


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
) -> nn.Module:
    """A randomly initialised model from the torch RNG (seed torch beforehand).

    ``num_classes`` (image models) and ``vocab_size`` (LMs) override the
    preset's output size; ``block_size`` (LMs) is only checked against the
    preset's position table, which stays the preset's size.
    """
    spec, preset = _preset(name, size)
    given = {"num_classes": num_classes, "vocab_size": vocab_size}
    for key, value in given.items():
        if value is None:
            continue
        if key != _OUTPUT_KEY[spec.task]:
            raise ValueError(f"data.{key}={value}: not used by {name} (a {spec.task} model)")
        _check_positive_int(f"data.{key}", value)
        preset[key] = value
    if block_size is not None:
        if spec.task != "lm":
            raise ValueError(f"data.block_size={block_size}: not used by {name} (an image model)")
        _check_positive_int("data.block_size", block_size)
        check_block_size(name, size, block_size)
    return spec.build(**preset)


# The model's units in backward order (output side first): the engine's own
# enumeration, re-exported so callers need only the registry.
model_units = enumerate_units


__all__ = [
    "MODELS", "SIZES", "TASKS", "ModelSpec", "build_model", "check", "check_block_size", "compute_loss",
    "evaluate", "max_positions", "model_units",
]
