"""GPT-2 and Llama-2 causal LMs built from transformers configs (never the hub).

The models are transformers' own classes, so their leaf-module names are the
ones the DreamDDP authors' profiles are keyed by ("transformer.h.0.attn.c_attn",
"model.layers.0.mlp.up_proj", "lm_head" ...).  Weights are randomly
initialised by transformers' ``_init_weights`` from the torch RNG, so the
caller seeds torch beforehand.  Dropout keeps each config's defaults (GPT-2
0.1, Llama 0.0) unless a preset sets it (GPT-2 small: 0, see models/__init__.py).

Attention uses "sdpa" (torch's scaled_dot_product_attention), which runs on
CPU and GPU; its leaf modules are the same as "eager"'s, and tests check that
both give the same logits.

transformers is imported inside the builders: it takes seconds to import and
image-only runs do not need it.
"""

from __future__ import annotations

from torch import nn

from dreamddp import _compat  # noqa: F401  (torchvision import fix before transformers)
from dreamddp.checks import ConfigError

ATTN_IMPLEMENTATION = "sdpa"


def _special_ids(default: int, vocab_size: int) -> dict:
    """GPT-2's bos/eos id (50256) only where the vocabulary holds it: a frequency-truncated
    vocabulary (tiny preset) has no fixed end-of-text id, and training never generates.
    (Llama's defaults, 1 and 2, always fit.)"""
    tid = default if default < vocab_size else None
    return {"bos_token_id": tid, "eos_token_id": tid}


def _causal_lm_loss(model: nn.Module) -> nn.Module:
    """Name the loss transformers already uses: it derives the name from the class name,
    which for GPT2LMHeadModel matches nothing and logs a warning in every worker."""
    model.loss_type = "ForCausalLM"
    return model


def _check_heads(dims: dict, given) -> None:
    """Each attention head gets n_embd / n_head channels; the field named is the one the
    user set (n_head when both were)."""
    e, h = dims["n_embd"], dims["n_head"]
    if e % h:
        why = "each head gets n_embd / n_head channels"
        if "n_head" in given:
            raise ConfigError(f"model.n_head={h}: must divide model.n_embd={e} ({why})")
        raise ConfigError(f"model.n_embd={e}: must be a multiple of model.n_head={h} ({why})")


def check_gpt2(dims: dict, given) -> None:
    """GPT-2's rules on its resolved dimensions (preset + ``given``, the keys set in the config)."""
    _check_heads(dims, given)


def check_llama(dims: dict, given) -> None:
    """Llama's rules: as GPT-2's, and rotary position embedding turns channel pairs, so a
    head's width must be even."""
    _check_heads(dims, given)
    width = dims["n_embd"] // dims["n_head"]
    if width % 2:
        key = "n_head" if "n_head" in given else "n_embd"
        raise ConfigError(f"model.{key}={dims[key]}: model.n_embd / model.n_head = {width} channels per head; "
                          "Llama's rotary embedding needs an even number")


def build_gpt2(
    *, n_layer: int, n_embd: int, n_head: int, n_positions: int, vocab_size: int, n_inner: int | None = None,
    dropout: float | None = None,
) -> nn.Module:
    """GPT2LMHeadModel; lm_head.weight is tied to transformer.wte.weight.  ``n_inner``: the
    MLP width (None: GPT-2's 4 * n_embd, left to GPT2Config so the paper preset's config is
    GPT-2's own).  ``dropout`` sets the embedding, attention and residual dropout (None:
    GPT-2's 0.1)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    drop = {} if dropout is None else {"embd_pdrop": dropout, "attn_pdrop": dropout, "resid_pdrop": dropout}
    config = GPT2Config(
        **drop,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_inner=n_inner,
        n_positions=n_positions,
        vocab_size=vocab_size,
        attn_implementation=ATTN_IMPLEMENTATION,
        **_special_ids(50256, vocab_size),
    )
    return _causal_lm_loss(GPT2LMHeadModel(config))


def gpt2_dims(model: nn.Module) -> dict:
    """The ``model.*`` dimensions of a built GPT-2, as the run record reports them."""
    c = model.config
    return {"n_layer": c.n_layer, "n_embd": c.n_embd, "n_head": c.n_head, "n_inner": c.n_inner or 4 * c.n_embd,
            "vocab_size": c.vocab_size}


def build_llama(
    *, n_layer: int, n_embd: int, n_head: int, n_inner: int, n_positions: int, vocab_size: int,
) -> nn.Module:
    """LlamaForCausalLM with full multi-head attention and an untied lm_head.  Arguments
    are named as GPT-2's (one set of ``model.*`` keys): n_layer = num_hidden_layers,
    n_embd = hidden_size, n_head = num_attention_heads (= num_key_value_heads),
    n_inner = intermediate_size, n_positions = max_position_embeddings."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        num_hidden_layers=n_layer,
        hidden_size=n_embd,
        num_attention_heads=n_head,
        num_key_value_heads=n_head,
        intermediate_size=n_inner,
        max_position_embeddings=n_positions,
        vocab_size=vocab_size,
        attn_implementation=ATTN_IMPLEMENTATION,
    )
    return _causal_lm_loss(LlamaForCausalLM(config))


def llama_dims(model: nn.Module) -> dict:
    """The ``model.*`` dimensions of a built Llama."""
    c = model.config
    return {"n_layer": c.num_hidden_layers, "n_embd": c.hidden_size, "n_head": c.num_attention_heads,
            "n_inner": c.intermediate_size, "vocab_size": c.vocab_size}
