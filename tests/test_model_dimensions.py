"""model.* dimensions from the command line over the presets (GPT-2 and Llama widths and depths,
ResNet widths and blocks), the workers' refusal of bad ones, and the start-up summary's parameter
count and share of bytes in embeddings/head, counted by hand for GPT-2."""

from __future__ import annotations

import re

import pytest
import torch

from dreamddp.models import MODELS, build_model


def test_dimensions_override_the_preset():
    gpt2 = build_model("gpt2", "tiny", n_layer=3, n_embd=32, n_head=4, n_inner=48)
    c = gpt2.config
    assert (c.n_layer, c.n_embd, c.n_head, c.n_inner, c.vocab_size) == (3, 32, 4, 48, 8192)
    assert gpt2.transformer.h[0].mlp.c_fc.weight.shape == (32, 48)  # Conv1D: (in, out)
    llama = build_model("llama2", "tiny", n_layer=3, n_embd=32, n_head=4, n_inner=40)
    c = llama.config
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
            c.intermediate_size) == (3, 32, 4, 4, 40)
    resnet = build_model("resnet50", "tiny", base_width=4, num_blocks=[1, 2, 1, 3])
    assert [len(getattr(resnet, f"layer{i}")) for i in range(1, 5)] == [1, 2, 1, 3]
    assert resnet.conv1.out_channels == 4 and resnet.linear.in_features == 4 * 8 * 4  # width x 8 x expansion


@pytest.mark.parametrize("name, dims, message", [
    ("gpt2", {"base_width": 8}, "model.base_width=8: only image models (resnet18, resnet50) take it, not gpt2"),
    ("resnet18", {"n_head": 2}, "model.n_head=2: only language models (gpt2, llama2) take it, not resnet18"),
    ("gpt2", {"n_head": 3}, "model.n_head=3: must divide model.n_embd=64"),
    ("llama2", {"n_embd": 66}, "model.n_embd=66: model.n_embd / model.n_head = 33 channels per head"),
    ("llama2", {"n_layer": 2.0}, "model.n_layer=2.0: must be an integer"),
    ("resnet18", {"num_blocks": [2, 2]}, "model.num_blocks=[2, 2]: must be 4 integers >= 1"),
])
def test_workers_refuse_the_dimensions_the_launcher_does(name, dims, message):
    from dreamddp.checks import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        build_model(name, "tiny", **dims)


def test_model_args_from_a_run_config(compose_cfg):
    from dreamddp.models import model_args

    cfg = compose_cfg(["model=resnet18", "data=synthetic", "model.base_width=4", "model.num_blocks=[1,1,2,1]"])
    assert model_args(cfg) == dict(name="resnet18", size="tiny", vocab_size=None, base_width=4,
                                   num_blocks=[1, 1, 2, 1], num_classes=10)
    cfg = compose_cfg(["model=llama2", "model.size=small", "model.vocab_size=300", "model.n_layer=3"])
    assert model_args(cfg) == dict(name="llama2", size="small", vocab_size=300, n_layer=3, block_size=64)


def _expected_gpt2(layers: int, width: int, inner: int, vocab: int, positions: int) -> tuple[int, int]:
    """(parameters, of which wte + wpe) of a GPT-2 counted by hand: per block two LayerNorms,
    c_attn (3 projections), c_proj and the two MLP matrices, with biases; a final LayerNorm."""
    block = 2 * 2 * width + (width * 3 * width + 3 * width) + (width * width + width) \
        + (width * inner + inner) + (inner * width + width)
    edge = (vocab + positions) * width
    return edge + layers * block + 2 * width, edge


@pytest.mark.parametrize("size", ["tiny", "small", "compute", "paper"])
def test_summary_counts_parameters_and_the_embeddings_share(size):
    from dreamddp.models import summarize, summary_line

    with torch.device("meta"):
        model = build_model("gpt2", size)
    p = MODELS["gpt2"].sizes[size]
    total, edge = _expected_gpt2(p["n_layer"], p["n_embd"], 4 * p["n_embd"], p["vocab_size"], p["n_positions"])
    s = summarize("gpt2", size, model)
    assert (s["parameters"], s["bytes"]) == (total, 4 * total)  # float32, the tied head once
    assert s["edge_share"] == pytest.approx(edge / total)
    assert s["dims"] == {"n_layer": p["n_layer"], "n_embd": p["n_embd"], "n_head": p["n_head"],
                         "n_inner": 4 * p["n_embd"], "vocab_size": p["vocab_size"]}
    line = summary_line(s)
    assert line.startswith(f"model: gpt2 {size} n_layer={p['n_layer']} n_embd={p['n_embd']} ")
    assert f": {total / 1e6:.2f}M parameters, {edge / total:.1%} of bytes in embeddings/head" in line
    assert "\n" not in line


def test_summary_of_llama_and_resnet_counts_their_edge_layers():
    from dreamddp.models import summarize, summary_line

    llama = build_model("llama2", "tiny", vocab_size=50)
    s = summarize("llama2", "tiny", llama)
    edge = llama.model.embed_tokens.weight.numel() + llama.lm_head.weight.numel()  # untied: both
    assert s["parameters"] == sum(p.numel() for p in llama.parameters())
    assert s["edge_share"] == pytest.approx(edge / s["parameters"])
    resnet = build_model("resnet18", "tiny", base_width=4, num_blocks=[1, 2, 1, 1])
    s = summarize("resnet18", "tiny", resnet)
    edge = sum(p.numel() for m in (resnet.conv1, resnet.linear) for p in m.parameters())
    assert s["dims"] == {"base_width": 4, "num_blocks": [1, 2, 1, 1]}
    assert s["edge_share"] == pytest.approx(edge / sum(p.numel() for p in resnet.parameters()))
    assert "base_width=4 num_blocks=[1,2,1,1]:" in summary_line(s)
