"""The models and their size presets (``model.name`` x ``model.size`` -> builder arguments).

Four presets per model:

- ``tiny``: the topology at a size that trains in milliseconds on CPU (tests);
- ``small``: CPU-sized but in the paper's regime, where it matters for
  scheduling: the share of bytes in the embeddings and output layer (GPT-2:
  31% as in the 124M model; Llama-2: 19% as in the authors' 176M model) and,
  for ResNets, the paper network's blocks at a narrower width, so every layer
  keeps its share of the model's bytes (within 1 point; the classifier, whose
  bytes scale with the width and not its square, moves most);
- ``compute``: CPU-sized for the benchmark's compute regime: wide enough that,
  on one CPU core per worker, backward takes about twice forward and the
  optimizer step is small next to backward, as the paper models on a GPU
  (each benchmark report's compute split line measures it: results/bench/),
  with the paper model's share of bytes in embeddings/head where it has one;
- ``paper``: the models of the DreamDDP paper, whose module names match the
  authors' published profiles so their schedules apply to ours.

Presets name the builders' arguments, which for the ``model.*`` dimensions are
the config keys themselves (GPT-2 and Llama share n_layer, n_embd, n_head,
n_inner; see models/dims.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from dreamddp.checks import ConfigError
from dreamddp.models.resnet import build_resnet, check_resnet, resnet_dims
from dreamddp.models.transformers_lm import build_gpt2, build_llama, check_gpt2, check_llama, gpt2_dims, llama_dims

SIZES = ("tiny", "small", "compute", "paper")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    task: str  # "image" or "lm"
    default_data: str  # "fashion_mnist" for resnets, "shakespeare" for LMs
    build: Callable[..., nn.Module]
    sizes: dict[str, dict]  # preset keyword arguments of ``build``, per size
    # check(dims, given): the model's rules on its resolved dimensions (preset + the keys
    # ``given`` in the config), one-line ConfigErrors naming the field.
    check: Callable[[dict, set], None]
    # dims(model): the model.* dimensions of a built model, for the run record.
    dims: Callable[[nn.Module], dict]
    # The input and output layers whose share of bytes the start-up summary reports
    # ("embeddings/head"; a tied head is counted once, with the embedding that owns it).
    edge_modules: tuple[str, ...]


MODELS: dict[str, ModelSpec] = {
    "resnet18": ModelSpec(
        "resnet18", "image", "fashion_mnist", build_resnet,
        {
            "tiny": dict(block="basic", num_blocks=(1, 1, 1, 1), base_width=8, num_classes=10),
            "small": dict(block="basic", num_blocks=(2, 2, 2, 2), base_width=16, num_classes=10),  # 0.70M
            "compute": dict(block="basic", num_blocks=(2, 2, 2, 2), base_width=40, num_classes=10),  # 4.37M
            "paper": dict(block="basic", num_blocks=(2, 2, 2, 2), base_width=64, num_classes=10),  # 11.2M
        },
        check_resnet, resnet_dims, ("conv1", "linear"),  # the stem and the classifier (torchvision's fc)
    ),
    "resnet50": ModelSpec(
        "resnet50", "image", "fashion_mnist", build_resnet,
        {
            "tiny": dict(block="bottleneck", num_blocks=(1, 1, 1, 1), base_width=8,
                         num_classes=100),
            # width 32, not 16: the classifier's share grows as the convolutions shrink
            "small": dict(block="bottleneck", num_blocks=(3, 4, 6, 3), base_width=32,
                          num_classes=100),  # 6.0M
            # The paper's width at a CPU batch: narrower widths measured backward / forward at the
            # regime's edge (1.6-2.4) on one core per worker (docs/findings.md).
            "compute": dict(block="bottleneck", num_blocks=(3, 4, 6, 3), base_width=64,
                            num_classes=100),  # 23.5M
            "paper": dict(block="bottleneck", num_blocks=(3, 4, 6, 3), base_width=64,
                          num_classes=100),  # 23.7M
        },
        check_resnet, resnet_dims, ("conv1", "linear"),
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
            # 6 blocks of width 192, 6,144 tokens: 3.9M parameters, 31% of bytes in wte + wpe
            # (the tied embedding the DreamDDP schedule cannot hide, as in the 124M model).
            "compute": dict(n_layer=6, n_embd=192, n_head=4, n_positions=128, vocab_size=6144, dropout=0.0),
            "paper": dict(n_layer=12, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257),  # 124.4M
        },
        check_gpt2, gpt2_dims, ("transformer.wte", "transformer.wpe"),  # lm_head is wte's weight
    ),
    "llama2": ModelSpec(
        "llama2", "lm", "shakespeare", build_llama,
        {
            "tiny": dict(n_layer=2, n_embd=64, n_head=2, n_inner=172, n_positions=128, vocab_size=8192),
            # The paper model's 8 layers and MLP ratio (11008 / 512) at hidden 64, 4,096 tokens:
            # 2.77M parameters, 18.9% of them in embed_tokens + lm_head (the paper model: 18.6%).
            "small": dict(n_layer=8, n_embd=64, n_head=4, n_inner=1376, n_positions=128, vocab_size=4096),
            # The paper model's 8 layers and MLP ratio (21.5) at hidden 128, 8,192 tokens: 11.1M
            # parameters, 19% of bytes in embed_tokens + lm_head (the paper model: 18.6%).
            "compute": dict(n_layer=8, n_embd=128, n_head=4, n_inner=2752, n_positions=128, vocab_size=8192),
            # As the DreamDDP authors build their cut-down Llama-2 ("llama2-124M" in their
            # artifact): 8 layers, hidden 512, 8 heads, Llama-2-7B's intermediate size 11008,
            # 764 positions, 32k vocabulary: 176.4M parameters (the paper's "about 175M").
            "paper": dict(n_layer=8, n_embd=512, n_head=8, n_inner=11008, n_positions=764, vocab_size=32000),
        },
        check_llama, llama_dims, ("model.embed_tokens", "lm_head"),
    ),
}

assert all(set(s.sizes) == set(SIZES) for s in MODELS.values())
assert all("n_positions" in p for s in MODELS.values() if s.task == "lm" for p in s.sizes.values())


def preset(name: str, size: str) -> tuple[ModelSpec, dict]:
    """The model's spec and a copy of its preset's builder arguments (one-line errors)."""
    if name not in MODELS:
        raise ConfigError(f"model.name={name}: unknown model; choose from {', '.join(MODELS)}")
    if size not in SIZES:
        raise ConfigError(f"model.size={size}: unknown size for {name}; choose from {', '.join(SIZES)}")
    spec = MODELS[name]
    return spec, dict(spec.sizes[size])
