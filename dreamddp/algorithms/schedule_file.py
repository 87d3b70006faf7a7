"""Reading a DreamDDP schedule and checking it against a model's units.

Format (the authors' schedule.json): ``{"H": H, "schedule": {module: i or [i, ...]}}``
where module names are leaf-module names and i in [0, H).  Names of modules
without parameters of their own (dropout, activations, a tied LM head) are
allowed and ignored; every unit must be listed at least once.
"""

from __future__ import annotations

import json
import os


class ScheduleError(ValueError):
    pass


def read_schedule(path: str) -> tuple[int, dict[str, list[int]]]:
    if not os.path.isfile(path):
        raise ScheduleError(f"algo.schedule={path}: file not found")
    try:
        with open(path) as f:
            data = json.load(f)
        H = int(data["H"])
        raw = data["schedule"]
    except (ValueError, KeyError, TypeError) as e:
        raise ScheduleError(f"algo.schedule={path}: not a schedule file ({e.__class__.__name__}: {e})") from None
    sched = {}
    for name, its in raw.items():
        its = [its] if isinstance(its, int) else list(its)
        if not its or not all(isinstance(i, int) for i in its):
            raise ScheduleError(f"algo.schedule={path}: unit {name!r} has no valid iteration list ({raw[name]!r})")
        sched[name] = its
    return H, sched


def assign_units(
    schedule: dict[str, list[int]], H: int, unit_names: list[str], module_names: set[str], source: str = "schedule"
) -> list[list[int]]:
    """Per iteration, the unit indices (backward order) to sync; clear errors for bad schedules."""
    index = {n: i for i, n in enumerate(unit_names)}
    groups: list[set[int]] = [set() for _ in range(H)]
    for name, its in schedule.items():
        if name not in index and name not in module_names:
            raise ScheduleError(f"algo.schedule={source}: unknown unit {name!r} (not a module of this model)")
        for i in its:
            if not 0 <= i < H:
                raise ScheduleError(f"algo.schedule={source}: unit {name!r} assigned to iteration {i}, outside [0, {H})")
        if name in index:
            for i in its:
                groups[i].add(index[name])
    missing = [n for n in unit_names if n not in schedule]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise ScheduleError(f"algo.schedule={source}: unit {missing[0]!r}{more} missing from the schedule")
    return [sorted(g) for g in groups]
