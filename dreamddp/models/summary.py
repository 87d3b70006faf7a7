"""What a built model is, in one line at start-up and in the run record: its
dimensions, its parameter count and the share of its bytes in the input and
output layers (GPT-2: wte + wpe, the head being wte's weight; Llama:
embed_tokens + lm_head; ResNets: the first conv and the classifier).  That
share decides how much of a step's traffic is ready last and needed first,
which no schedule can hide."""

from __future__ import annotations

from torch import nn

from dreamddp.models.registry import MODELS


def summarize(name: str, size: str, model: nn.Module) -> dict:
    """Plain data for the run record: name, size, dims, parameters, bytes, and
    ``edge_share`` of the bytes in ``edge_modules``.  Runs once at start (not per step)."""
    spec = MODELS[name]
    params = list(model.parameters())  # a tied weight once
    total = sum(p.numel() * p.element_size() for p in params)
    edge = {id(p) for m in spec.edge_modules for p in model.get_submodule(m).parameters()}
    edge_bytes = sum(p.numel() * p.element_size() for p in params if id(p) in edge)
    return {
        "name": name, "size": size, "dims": spec.dims(model),
        "parameters": sum(p.numel() for p in params), "bytes": total,
        "edge_modules": list(spec.edge_modules), "edge_share": edge_bytes / total if total else 0.0,
    }


def _value(v) -> str:
    """As the command line takes it: num_blocks=[2,2,2,2]."""
    return f"[{','.join(map(str, v))}]" if isinstance(v, (list, tuple)) else str(v)


def summary_line(s: dict) -> str:
    """``model: gpt2 tiny n_layer=2 ...: 0.63M parameters, 84.3% of bytes in embeddings/head (...)``."""
    dims = " ".join(f"{k}={_value(v)}" for k, v in s["dims"].items())
    return (f"model: {s['name']} {s['size']} {dims}: {s['parameters'] / 1e6:.2f}M parameters, "
            f"{s['edge_share']:.1%} of bytes in embeddings/head ({' + '.join(s['edge_modules'])})")
