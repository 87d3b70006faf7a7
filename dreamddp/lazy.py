"""A module imported on first use.

The planning side (``dreamddp-schedule``, the results tools) imports every
algorithm module to simulate it, and must not pay torch's two-second import;
the training side uses torch in the same modules.  ``torch = lazy("torch")``
gives a module stand-in that imports the real one at its first attribute
access and then only forwards (so, no ``@torch...`` decorators at import time).
"""

from __future__ import annotations

import importlib
from types import ModuleType


class _LazyModule:
    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str):
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)


def lazy(name: str):
    """``name`` imported at first attribute access."""
    return _LazyModule(name)
