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


def build_gpt2(
    *, n_layer: int, n_embd: int, n_head: int, n_positions: int, vocab_size: int, dropout: float | None = None
) -> nn.Module:
    """GPT2LMHeadModel; lm_head.weight is tied to transformer.wte.weight.  ``dropout`` sets
    the embedding, attention and residual dropout (None: GPT-2's 0.1)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    drop = {} if dropout is None else {"embd_pdrop": dropout, "attn_pdrop": dropout, "resid_pdrop": dropout}
    config = GPT2Config(
        **drop,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_positions=n_positions,
        vocab_size=vocab_size,
        attn_implementation=ATTN_IMPLEMENTATION,
        **_special_ids(50256, vocab_size),
    )
    return _causal_lm_loss(GPT2LMHeadModel(config))


def build_llama(
    *,
    num_hidden_layers: int,
    hidden_size: int,
    num_attention_heads: int,
    intermediate_size: int,
    max_position_embeddings: int,
    vocab_size: int,
) -> nn.Module:
    """LlamaForCausalLM with full multi-head attention and an untied lm_head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        num_hidden_layers=num_hidden_layers,
        hidden_size=hidden_size,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_attention_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        vocab_size=vocab_size,
        attn_implementation=ATTN_IMPLEMENTATION,
    )
    return _causal_lm_loss(LlamaForCausalLM(config))
