"""One-line refusals of bad configuration values, shared by every component's ``check``.

Each component (model, data, optimizer, trainer, link, algorithm) checks the
fields it owns with these helpers, so every message has the same shape:
``<field>=<value>: <why>``.  This module imports nothing heavier than the
standard library: checks run in the launcher before any worker starts.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable


def refuse(message: str) -> None:
    """End the process as every entry point refuses bad input: ``error: <one line>``, status 2."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


class ConfigError(ValueError):
    """A configuration the run must not start with; ``str(e)`` is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def at_least(key: str, value, low) -> None:
    if value is None or isinstance(value, bool) or value < low:
        raise ConfigError(f"{key}={value}: must be >= {low}")


def positive(key: str, value, optional: bool = False) -> None:
    if value is None and optional:
        return
    if value is None or isinstance(value, bool) or not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{key}={value}: must be > 0 (and finite)")


def between(key: str, value, low, high, *, open_low: bool = False, open_high: bool = False) -> None:
    """``low <= value <= high`` (either end may be open)."""
    ok = value is not None and (value > low if open_low else value >= low) and (value < high if open_high else value <= high)
    if not ok:
        interval = f"{'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"
        raise ConfigError(f"{key}={value}: must be in {interval}")


def choice(key: str, value, choices: Iterable[str]) -> None:
    choices = tuple(choices)
    if value not in choices:
        raise ConfigError(f"{key}={value}: unknown value; choose from {', '.join(choices)}")
