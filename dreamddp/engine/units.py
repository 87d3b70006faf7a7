"""Units: the modules that own parameters, the granularity every algorithm syncs at.

On a mesh with shards (engine/mesh.py) the parameters are FSDP2's DTensors and a
unit's size is its LOCAL shard's (padded as FSDP pads it): what partial sync sends.

A unit is a module that owns parameters directly (``recurse=False``); for the
models here these are leaf modules (the paper's "layers").  Parameters shared by
several modules (GPT-2's tied embedding / LM head) belong to the module that
registers them first.

Units are returned in BACKWARD order (output side first), the order in which
gradients become ready and in which every scheduler reasons.  Registration
order is not forward order in general (HF Llama registers both RMSNorms after
the MLP but runs them first), so given a sample loss the order is MEASURED: one
backward pass records when each unit's last gradient is accumulated.  Without
one (names only, e.g. on the meta device) the reverse registration order is used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn


@dataclass(frozen=True)
class Unit:
    """One unit: its module name, the parameters it owns and their total size."""

    index: int  # position in backward order (0 = output side)
    name: str  # module name as in ``model.named_modules()``
    params: tuple[nn.Parameter, ...]
    numel: int  # elements this rank holds (a sharded parameter: its padded local shard)

    @property
    def nbytes(self) -> int:
        return self.numel * self.params[0].element_size()


def local_numel(p: torch.Tensor) -> int:
    """Elements of ``p`` on this rank: a DTensor sharded by FSDP2 on dim 0 holds
    ceil(rows / shards) rows (FSDP's padded chunk; shards: the mesh dimensions it is
    sharded over), a plain tensor all of them."""
    from torch.distributed.tensor import DTensor

    if not isinstance(p, DTensor):
        return p.numel()
    rows = p.shape[0] if p.dim() else 1
    if rows == 0:
        return 0
    shards = 1
    for dim, placement in enumerate(p.placements):
        if placement.is_shard(0):
            shards *= p.device_mesh.size(dim)
    return -(-rows // shards) * (p.numel() // rows)


def enumerate_units(model: nn.Module, sample_loss: Callable[[], torch.Tensor] | None = None) -> list[Unit]:
    """Units of ``model`` in backward order: measured on one backward of ``sample_loss()``
    when given (training state untouched: RNG forked, gradients dropped), else the
    reverse of module registration order."""
    seen: set[int] = set()
    registered: list[tuple[str, tuple[nn.Parameter, ...]]] = []
    for name, module in model.named_modules():
        owned = []
        for p in module.parameters(recurse=False):
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                owned.append(p)
        if owned:
            registered.append((name, tuple(owned)))
    order = list(reversed(range(len(registered))))
    if sample_loss is not None:
        order = _gradient_ready_order(registered, sample_loss)
    return [
        Unit(index=i, name=registered[k][0], params=registered[k][1], numel=sum(local_numel(p) for p in registered[k][1]))
        for i, k in enumerate(order)
    ]


def _gradient_ready_order(registered, sample_loss) -> list[int]:
    """Indices into ``registered`` in the order their last gradient is accumulated; units
    that get no gradient (unused in this forward) follow, in reverse registration order."""
    missing = [len(params) for _, params in registered]
    ready: list[int] = []

    def on_grad(k: int, _param) -> None:
        missing[k] -= 1
        if missing[k] == 0:
            ready.append(k)

    hooks = [p.register_post_accumulate_grad_hook(functools.partial(on_grad, k))
             for k, (_, params) in enumerate(registered) for p in params]
    try:
        with torch.random.fork_rng(devices=[]):  # dropout draws must not shift training's RNG
            sample_loss().backward()
    finally:
        for h in hooks:
            h.remove()
        for _, params in registered:
            for p in params:
                p.grad = None
    unused = [k for k in reversed(range(len(registered))) if k not in set(ready)]
    return ready + unused


def reorder_units(units: list[Unit], names: list[str]) -> list[Unit]:
    """``units`` in the order of ``names`` (re-indexed), e.g. to adopt rank 0's measured order."""
    by_name = {u.name: u for u in units}
    if sorted(by_name) != sorted(names):
        raise ValueError("reorder_units: the names are not this model's units")
    return [replace(by_name[n], index=i) for i, n in enumerate(names)]


def leaf_module_names(model: nn.Module) -> list[str]:
    """Names of all leaf modules, parameter-free ones included, in forward order.

    The authors' profiles and schedules are keyed by these names.
    """
    return [n for n, m in model.named_modules() if n and next(m.children(), None) is None]


def total_numel(units: list[Unit]) -> int:
    return sum(u.numel for u in units)


def param_dtype(units: list[Unit]) -> torch.dtype:
    dtypes = {p.dtype for u in units for p in u.params}
    if len(dtypes) != 1:
        raise ValueError(f"units mix parameter dtypes {sorted(map(str, dtypes))}")
    return dtypes.pop()
