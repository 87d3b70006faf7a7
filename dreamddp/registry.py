"""Name -> class registries that find their members by importing a package's modules.

A component type (an algorithm, a link) is one module: it decorates its class
with ``@REGISTRY.register`` and the package's ``__init__`` calls
:func:`import_all` once, so adding a module is all it takes to add a member.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Generic, TypeVar

from dreamddp.checks import ConfigError

T = TypeVar("T")


class Registry(dict, Generic[T]):
    """``{name: class}``; ``kind`` and ``key`` only word the error messages."""

    def __init__(self, kind: str, key: str) -> None:
        super().__init__()
        self.kind, self.key = kind, key
        # name -> [(option, subclass)]: what a member builds when its config sets that option
        self.variants: dict[str, list[tuple[str, type]]] = {}

    def register(self, cls: type[T]) -> type[T]:
        name = cls.name
        if name in self and self[name] is not cls:
            raise ValueError(f"{self.kind} {name!r} registered twice ({self[name].__module__}, {cls.__module__})")
        self[name] = cls
        return cls

    def register_variant(self, option: str):
        """Decorator for a subclass of a member (same ``name``) that the member builds when its
        config sets ``option`` true.  The variant's module imports the member's, never the
        reverse: the registry joins the two, so there is no import circle."""
        def add(cls: type[T]) -> type[T]:
            self.variants.setdefault(cls.name, []).append((option, cls))
            return cls
        return add

    def resolve(self, cls: type[T], cfg) -> type[T]:
        """The class ``cls`` builds for ``cfg``: its first variant whose option ``cfg`` sets, else ``cls``."""
        return next((v for option, v in self.variants.get(cls.name, ()) if getattr(cfg, option, False)), cls)

    def lookup(self, name: str) -> type[T]:
        """The class for ``name``, or a one-line ConfigError naming the config key."""
        try:
            return self[name]
        except KeyError:
            raise ConfigError(f"{self.key}={name}: unknown {self.kind}; choose from {', '.join(self)}") from None


def import_all(package_name: str, package_path) -> None:
    """Import every public module of a package (names starting with ``_`` are skipped)."""
    for info in pkgutil.iter_modules(package_path):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package_name}.{info.name}")
