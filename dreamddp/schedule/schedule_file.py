"""Schedule files: the one reader, the one writer, and the check against a model's units.

Format (the DreamDDP authors' ``schedule.json``)::

    {"H": H, "schedule": {module: i or [i, ...]}}

module names are leaf-module names and every i is in [0, H).  Names of
modules without parameters of their own (dropout, activations, a tied LM
head) are allowed and ignored; every unit must be listed at least once.
Errors are ``ScheduleError``: one line, naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

from dreamddp.atomic import write_json


class ScheduleError(ValueError):
    """A schedule that cannot be used (one line)."""


def _iterations(source, name: str, its, H: int) -> list[int]:
    its = [its] if isinstance(its, int) and not isinstance(its, bool) else list(its) if isinstance(its, (list, tuple)) else its
    if not isinstance(its, list) or not its or not all(isinstance(i, int) and not isinstance(i, bool) for i in its):
        raise ScheduleError(f"{source}: unit {name!r} has no valid iteration list ({its!r})")
    for i in its:
        if not 0 <= i < H:
            raise ScheduleError(f"{source}: unit {name!r} assigned to iteration {i}, outside [0, {H})")
    return sorted(set(its))


def read_schedule(path) -> tuple[int, dict[str, list[int]]]:
    """``(H, {unit: sorted iterations})`` from a schedule file."""
    p = Path(path)
    if not p.is_file():
        raise ScheduleError(f"{path}: file not found")
    try:
        data = json.loads(p.read_text())
        H, raw = data["H"], data["schedule"]
        if not isinstance(raw, dict):
            raise TypeError("'schedule' is not an object")
    except (ValueError, KeyError, TypeError) as e:
        raise ScheduleError(f"{path}: not a schedule file ({e.__class__.__name__}: {e})") from None
    if not isinstance(H, int) or isinstance(H, bool) or H < 1:
        raise ScheduleError(f"{path}: H must be an integer >= 1, got {H!r}")
    return H, {str(name): _iterations(path, name, its, H) for name, its in raw.items()}


def save_schedule(path, H: int, schedule: dict[str, list[int]]) -> None:
    """Write a schedule in the authors' format (a bare int where a unit syncs once)."""
    body = {u: (its[0] if len(its) == 1 else sorted(its)) for u, its in schedule.items()}
    write_json(path, {"H": H, "schedule": body}, indent=2)


def assign_units(schedule: dict[str, list[int]], H: int, unit_names: list[str], module_names,
                 source: str = "schedule") -> list[list[int]]:
    """Per iteration, the unit indices (backward order) to sync; one-line errors for a bad schedule."""
    index = {n: i for i, n in enumerate(unit_names)}
    groups: list[set[int]] = [set() for _ in range(H)]
    for name, its in schedule.items():
        if name not in index and name not in module_names:
            raise ScheduleError(f"{source}: unknown unit {name!r} (not a module of this model)")
        for i in _iterations(source, name, its, H):
            if name in index:
                groups[i].add(index[name])
    missing = [n for n in unit_names if n not in schedule]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ScheduleError(f"{source}: unit {missing[0]!r}{more} missing from the schedule")
    return [sorted(g) for g in groups]
