"""Units: the modules that own parameters, the granularity every algorithm syncs at.

A unit is a module that owns parameters directly (``recurse=False``); for the
models here these are leaf modules (the paper's "layers").  Parameters shared by
several modules (GPT-2's tied embedding / LM head) belong to the module that
registers them first in forward order, because that is the one whose backward
finishes last: the gradient is complete only then.

Units are returned in BACKWARD order (output side first), the order in which
gradients become ready and in which every scheduler reasons.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Unit:
    """One unit: its module name, the parameters it owns and their total size."""

    index: int  # position in backward order (0 = output side)
    name: str  # module name as in ``model.named_modules()``
    params: tuple[nn.Parameter, ...]
    numel: int

    @property
    def nbytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.params)


def enumerate_units(model: nn.Module) -> list[Unit]:
    """Units of ``model`` in backward order (reverse of module registration order)."""
    seen: set[int] = set()
    forward: list[tuple[str, tuple[nn.Parameter, ...]]] = []
    for name, module in model.named_modules():
        owned = []
        for p in module.parameters(recurse=False):
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                owned.append(p)
        if owned:
            forward.append((name, tuple(owned)))
    return [
        Unit(index=i, name=name, params=params, numel=sum(p.numel() for p in params))
        for i, (name, params) in enumerate(reversed(forward))
    ]


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
