"""Schedule files: the one reader, the one writer, and the check against a model's units.

Format (the DreamDDP authors' ``schedule.json``, plus two optional keys)::

    {"H": H, "schedule": {module: i or [i, ...]},
     "collectives": [[[first, last], ...], ...],       # optional, one list per iteration
     "delayed": [[[first, last] or [first, last, k, n], ...], ...]}  # optional (merge_delay)

module names are leaf-module names and every i is in [0, H).  Names of
modules without parameters of their own (dropout, activations, a tied LM
head) are allowed and ignored; every unit must be listed at least once.
Without ``collectives`` each synced unit is its own collective (launched at its
gradient, as the authors' engine does); with it, iteration i's units go out as
the listed runs, each one collective over the units first..last (backward
order), launched when its last unit's gradient is ready (general schedules).
``delayed`` lists, per iteration, which of its collectives are merged late
(``algo.merge_delay``, schedule/delay.py): launched after the step on a copy of
the parameters and merged at the end of a later backward.  ``[first, last, k,
n]`` is part k of n of such a collective (a near-equal slice of its
parameters): part 0 in the iteration the run is one of the collectives of,
part k in the k-th iteration after it.
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
    made = read_schedule_file(path)
    return made["H"], made["schedule"]


def _runs_per_iteration(path, key: str, value, H: int) -> list[list[tuple]]:
    parts = key == "delayed"

    def entry_ok(r) -> bool:
        if not isinstance(r, list) or len(r) not in ((2, 4) if parts else (2,)):
            return False
        names, part = r[:2], r[2:]
        return (all(isinstance(n, str) for n in names) and all(isinstance(i, int) and not isinstance(i, bool) for i in part)
                and (not part or 0 <= part[0] < part[1] <= H))

    ok = isinstance(value, list) and len(value) == H and all(isinstance(its, list) and all(map(entry_ok, its))
                                                             for its in value)
    if not ok:
        shape = "[first, last] unit names (or [first, last, k, n]: part k of n, 0 <= k < n <= H)" if parts else \
            "[first, last] unit names"
        raise ScheduleError(f"{path}: '{key}' must be {H} lists (one per iteration) of {shape}")
    return [[tuple(r) for r in its] for its in value]


def late_run(entry: tuple) -> tuple:
    """The run (first, last) of a late collective ``(first, last)`` or part ``(first, last, k, n)``."""
    return entry[0], entry[1]


def late_part(entry: tuple) -> tuple[int, int]:
    """Its part (k, n): (0, 1) for the whole run."""
    return (entry[2], entry[3]) if len(entry) == 4 else (0, 1)


def runs_as_names(runs: list[list[tuple]] | None, names) -> list[list[tuple]] | None:
    """Per-iteration runs (and parts) of unit indices as unit names, as a schedule file lists them."""
    return None if runs is None else [[(names[r[0]], names[r[1]], *r[2:]) for r in its] for its in runs]


def resyncs(runs: list[list[tuple[int, int]]], h: int, entry: tuple, delay: int) -> bool:
    """True when units of the late collective ``entry`` launched in iteration ``h`` sync again
    before it merges ``delay`` iterations later (the merge would overwrite that average), or
    share the iteration of a part away from home with another sync.  The other parts of its
    run do not count: they carry other elements."""
    H = len(runs)
    (a, b), k = late_run(entry), late_part(entry)[0]
    home = (h - k) % H
    mine = set(range(a, b + 1))
    near = [(h + j) % H for j in range(1, delay + 1)] + ([h] if k else [])
    return any(mine & {u for x, y in runs[g] for u in range(x, y + 1)} for g in near if g != home)


def read_schedule_file(path) -> dict:
    """``{"H", "schedule": {unit: sorted iterations}}``, with ``"collectives"`` and ``"delayed"``
    (per iteration, [first, last] unit names) where the file has them."""
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
    made = {"H": H, "schedule": {str(name): _iterations(path, name, its, H) for name, its in raw.items()}}
    for key in ("collectives", "delayed"):
        if data.get(key) is not None:
            made[key] = _runs_per_iteration(path, key, data[key], H)
    return made


def save_schedule(path, H: int, schedule: dict[str, list[int]],
                  collectives: list[list[tuple[str, str]]] | None = None,
                  delayed: list[list[tuple[str, str]]] | None = None) -> None:
    """Write a schedule in the authors' format (a bare int where a unit syncs once), with
    its collectives when they are not one per unit and, for a plan made with a merge delay, its
    delayed ones (listed even when none is late, so the file reads back as a delay plan)."""
    body = {u: (its[0] if len(its) == 1 else sorted(its)) for u, its in schedule.items()}
    data = {"H": H, "schedule": body}
    if collectives is not None:
        data["collectives"] = [[list(r) for r in its] for its in collectives]
    if delayed is not None:
        data["delayed"] = [[list(r) for r in its] for its in delayed]
    write_json(path, data, indent=2)


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


def assign_runs(collectives: list[list[tuple[str, str]]], groups: list[list[int]], unit_names: list[str],
                source: str = "schedule") -> list[list[tuple[int, int]]]:
    """Per iteration, its collectives as (first, last) unit indices, checked against the
    iteration's units (``assign_units``): every run contiguous, inside the iteration,
    and together covering each of its units exactly once."""
    index = {n: i for i, n in enumerate(unit_names)}
    out = []
    for g, its in enumerate(collectives):
        runs, covered = [], []
        for first, last in its:
            for name in (first, last):
                if name not in index:
                    raise ScheduleError(f"{source}: collective [{first!r}, {last!r}] names {name!r}, not a unit")
            a, b = index[first], index[last]
            if a > b:
                raise ScheduleError(f"{source}: collective [{first!r}, {last!r}] runs against backward order")
            runs.append((a, b))
            covered += range(a, b + 1)
        if sorted(covered) != sorted(groups[g]):
            raise ScheduleError(f"{source}: iteration {g}'s collectives do not cover exactly its units once")
        out.append(sorted(runs))
    return out


def assign_delayed(delayed: list[list[tuple]], runs: list[list[tuple[int, int]]], unit_names: list[str],
                   delay: int, source: str = "schedule") -> list[list[tuple]]:
    """Per iteration, the collectives merged ``delay`` iterations late as (first, last) unit
    indices, or parts (first, last, k, n): each one of its home iteration's collectives (part
    k: k iterations after home), every part of a cut run listed, none of whose units syncs
    again before its merge (the merge would overwrite that average)."""
    index = {n: i for i, n in enumerate(unit_names)}
    H = len(runs)
    out, chains = [], {}
    for h, its in enumerate(delayed):
        late = []
        for entry in its:
            (first, last), (k, n) = late_run(entry), late_part(entry)
            named = f"delayed {list(entry)!r}"
            run = (index.get(first, -1), index.get(last, -1))
            home = (h - k) % H
            if run not in runs[home]:
                raise ScheduleError(f"{source}: {named} is not one of iteration {home}'s collectives")
            if delay > 0 and resyncs(runs, h, (*run, k, n), delay):
                raise ScheduleError(f"{source}: {named} syncs again within algo.merge_delay={delay} iterations of {h}")
            chains.setdefault((home, run), []).append((k, n))
            late.append(run if n == 1 else (*run, k, n))
        out.append(sorted(late))
    for (home, run), parts in chains.items():
        n = parts[0][1]
        if sorted(parts) != [(k, n) for k in range(n)]:
            raise ScheduleError(f"{source}: the delayed collective [{unit_names[run[0]]!r}, {unit_names[run[1]]!r}] of "
                                f"iteration {home} is listed as parts {sorted(parts)}: expected each of 0..n-1 once")
    return out
