"""Per-unit profiles: the data the schedulers and the simulator read.

On disk a profile is the DreamDDP authors' layout: a directory holding
``bp.json`` (backward seconds per unit) and ``comm.json`` (seconds of a blocking
all-reduce of the unit's parameters), both objects keyed by unit name in
FORWARD order.  Our own profiler adds ``fwd.json``, ``nbytes.json`` and
``meta.json`` (which may carry ``step_time``, ``optimizer_time``, ``world`` and ``gbps``).  In memory
the units are kept in BACKWARD order (output side first), the order in which
gradients become ready and in which every scheduler reasons.

The authors' tools count NaN (and inf) as zero; so do we.  Their LoRA profiles
key ``comm.json`` by parameter-derived names that may lack the ``.default``
suffix of the module name in ``bp.json``; such keys are renamed to the module
name, and comm keys with no module in ``bp.json`` are dropped and listed in
``meta["dropped_comm"]`` (the authors' tool skips them the same way).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from dreamddp.atomic import write_json


@dataclass
class Profile:
    units: list[str]  # BACKWARD order (output side first)
    bp: dict[str, float]
    comm: dict[str, float]  # blocking all-reduce time of the unit's parameters
    fwd: dict[str, float] = field(default_factory=dict)  # may be empty (authors' profiles)
    nbytes: dict[str, int] = field(default_factory=dict)  # may be empty
    step_time: float = 0.0  # optimizer step + the rest of an iteration's work outside forward and backward
    meta: dict = field(default_factory=dict)
    # Of step_time, the optimizer step alone (None: all of it, as in profiles made before the
    # start-up profiler kept it); a plan may move it out of the iteration's step (SyncOp.steps)
    optimizer_time: float | None = None
    # Seconds one more optimizer call costs beyond its parameters' share of the step (None: not
    # measured): what each op with SyncOp.steps adds where it completes
    optimizer_call_time: float | None = None

    @property
    def optimizer_seconds(self) -> float:
        """The optimizer step alone: ``optimizer_time``, at most ``step_time``; all of ``step_time``
        where the profile does not tell them apart."""
        return self.step_time if self.optimizer_time is None else min(self.optimizer_time, self.step_time)


def _finite(value, where: str) -> float:
    if value is None:
        return 0.0
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"{where}: expected a number, got {value!r}")
    value = float(value)
    return 0.0 if (math.isnan(value) or math.isinf(value)) else value


def _read_json(path: Path):
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None


def _read_times(path: Path) -> dict[str, float]:
    data = _read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object of unit name -> seconds")
    return {str(k): _finite(v, f"{path}[{k!r}]") for k, v in data.items()}


def _align_comm(comm: dict[str, float], bp: dict[str, float]) -> tuple[dict[str, float], list[str]]:
    aligned, dropped = {}, []
    for name, t in comm.items():
        if name in bp:
            aligned[name] = t
        elif name + ".default" in bp:  # PEFT: parameter-derived name vs module name
            aligned[name + ".default"] = t
        elif name.endswith(".default") and name[: -len(".default")] in bp:
            aligned[name[: -len(".default")]] = t
        else:
            dropped.append(name)
    return aligned, dropped


def _meta_from_path(path: Path) -> dict:
    """World size and bandwidth from the artifact layout MODEL/WORKERS/<B>gbit."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)gbit", path.name.lower())
    if m and path.parent.name.isdigit():
        return {"world": int(path.parent.name), "gbps": float(m.group(1)), "model": path.parent.parent.name}
    return {}


def load_profile(path_dir) -> Profile:
    """Read a profile directory (authors' layout, plus our optional files)."""
    d = Path(path_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"profile directory not found: {d}")
    for name in ("bp.json", "comm.json"):
        if not (d / name).is_file():
            raise FileNotFoundError(f"profile {d}: missing {name}")
    bp = _read_times(d / "bp.json")
    if not bp:
        raise ValueError(f"profile {d}: bp.json has no units")
    comm, dropped = _align_comm(_read_times(d / "comm.json"), bp)
    fwd = _read_times(d / "fwd.json") if (d / "fwd.json").is_file() else {}
    nbytes = {}
    if (d / "nbytes.json").is_file():
        raw = _read_json(d / "nbytes.json")
        if not isinstance(raw, dict) or not all(isinstance(v, int) and v >= 0 for v in raw.values()):
            raise ValueError(f"{d / 'nbytes.json'}: expected an object of unit name -> non-negative int")
        nbytes = dict(raw)
    meta = _meta_from_path(d)
    if (d / "meta.json").is_file():
        extra = _read_json(d / "meta.json")
        if not isinstance(extra, dict):
            raise ValueError(f"{d / 'meta.json'}: expected a JSON object")
        meta.update(extra)
    if dropped:
        meta["dropped_comm"] = dropped
    step_time = _finite(meta.pop("step_time", 0.0), f"{d / 'meta.json'}[step_time]")
    optimizer = meta.pop("optimizer_time", None)  # absent: all of step_time (profiles made before it was kept)
    if optimizer is not None:
        optimizer = _finite(optimizer, f"{d / 'meta.json'}[optimizer_time]")
    call = meta.pop("optimizer_call_time", None)  # absent: profiles made before it was measured
    if call is not None:
        call = _finite(call, f"{d / 'meta.json'}[optimizer_call_time]")
    return Profile(list(reversed(bp)), bp, comm, fwd, nbytes, step_time, meta, optimizer, call)


def save_profile(profile: Profile, path_dir) -> None:
    """Write ``profile`` in the layout ``load_profile`` reads (forward order)."""
    d = Path(path_dir)
    forward = list(reversed(profile.units))
    write_json(d / "bp.json", {u: profile.bp.get(u, 0.0) for u in forward})
    write_json(d / "comm.json", {u: profile.comm[u] for u in forward if u in profile.comm})
    if profile.fwd:
        write_json(d / "fwd.json", {u: profile.fwd[u] for u in forward if u in profile.fwd})
    if profile.nbytes:
        write_json(d / "nbytes.json", {u: profile.nbytes[u] for u in forward if u in profile.nbytes})
    meta = {k: v for k, v in profile.meta.items() if k != "dropped_comm"}
    if profile.optimizer_time is not None:
        meta["optimizer_time"] = profile.optimizer_time
    if profile.optimizer_call_time is not None:
        meta["optimizer_call_time"] = profile.optimizer_call_time
    if meta or profile.step_time:
        write_json(d / "meta.json", {**meta, "step_time": profile.step_time})


def scaled(profile: Profile, *, bp: float = 1.0, comm: float = 1.0, fwd: float | None = None) -> Profile:
    """A copy with backward (and forward, default same factor) and comm times multiplied."""
    for name, k in (("bp", bp), ("comm", comm), ("fwd", fwd)):
        if k is not None and not (k >= 0 and math.isfinite(k)):
            raise ValueError(f"scaled: {name} multiplier must be a finite number >= 0, got {k}")
    f = bp if fwd is None else fwd
    return replace(
        profile,
        units=list(profile.units),
        bp={u: t * bp for u, t in profile.bp.items()},
        comm={u: t * comm for u, t in profile.comm.items()},
        fwd={u: t * f for u, t in profile.fwd.items()},
        nbytes=dict(profile.nbytes),
        meta=dict(profile.meta),
    )
