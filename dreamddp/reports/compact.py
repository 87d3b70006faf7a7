"""A run record's compact copy: what a full record keeps in results/runs/ (collect.py writes them,
records.py reads both forms)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

COMPACT_VERSION = 1
MAX_POINTS = 300  # iteration rows kept per run
_ROW_KEYS = ("iteration", "time", "forward", "backward", "wait", "bytes", "wire_bytes", "loss")
_PROFILE_FILES = ("bp", "comm", "fwd", "nbytes", "meta")
_EXTRA_KEYS = ("link", "link_calibration", "world_size", "samples_per_epoch_per_worker", "schedule", "model")
_SUFFIX = re.compile(r"_(cpu|paper)$")


def _round(value, digits: int = 6):
    """Floats to ``digits`` significant digits (JSON size), recursively; NaN/inf -> None."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _round(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [_round(v, digits) for v in value]
    return value


def study_of(experiment: str) -> tuple[str, str]:
    """``h_ablation_cpu`` -> (``h_ablation``, ``cpu``); a name without a scale suffix -> (name, "")."""
    m = _SUFFIX.search(experiment)
    return (experiment[: m.start()], m.group(1)) if m else (experiment, "")


def _thin(rows: list[dict], limit: int) -> list[dict]:
    """At most ``limit`` rows, evenly spaced, always keeping the first and the last."""
    if len(rows) <= limit:
        return rows
    step = (len(rows) - 1) / (limit - 1)
    return [rows[round(i * step)] for i in range(limit)]


def compact(record: dict, run_dir: Path | None = None, limit: int = MAX_POINTS) -> dict:
    """The compact form of a full run record (a compact record is returned unchanged)."""
    if record.get("compact"):
        return record
    if "config" not in record or "status" not in record:
        raise ValueError("not a dreamddp run record (no config/status)")
    elapsed, rows = 0.0, []
    for r in record.get("iterations", []):
        elapsed += float(r.get("time", 0.0))
        rows.append({**{k: r[k] for k in _ROW_KEYS if k in r}, "elapsed": elapsed})
    at = {r["iteration"]: r["elapsed"] for r in rows}
    evals = [{**e, "elapsed": at.get(e.get("iteration"))} for e in record.get("evals", [])]
    extra = {k: record.get("extra", {})[k] for k in _EXTRA_KEYS if k in record.get("extra", {})}
    algo = record.get("extra", {}).get("algorithm")
    if isinstance(algo, dict):
        extra["algorithm"] = {k: v for k, v in algo.items() if k != "groups"}
    profile = run_dir / "profile" if run_dir is not None else None
    if profile is not None and (profile / "bp.json").is_file():
        extra["profile_data"] = {name: json.loads((profile / f"{name}.json").read_text())
                                 for name in _PROFILE_FILES if (profile / f"{name}.json").is_file()}
    study, scale = study_of((record["config"].get("experiment") or {}).get("name", "default"))
    out = _round({
        "compact": COMPACT_VERSION, "study": study, "scale": scale,
        "name": run_dir.name if run_dir is not None else record.get("run_dir", "run"),
        "source": str(run_dir) if run_dir is not None else record.get("run_dir"),
        "status": record["status"], "error": record.get("error"), "start_time": None, "end_time": None,
        "git_sha": record.get("git_sha"), "provenance": record.get("provenance"),  # the code, as check_provenance reads it
        "versions": record.get("versions"), "hardware": record.get("hardware"),
        "config": record["config"], "extra": extra,
        "summary": {k: v for k, v in record.get("summary", {}).items() if k != "text"},
        "iterations": _thin(rows, limit), "evals": evals, "divergence": record.get("divergence", []),
    })
    # wall-clock stamps keep their full precision (6 significant digits of an epoch time is 1000 s)
    out["start_time"], out["end_time"] = record.get("start_time"), record.get("end_time")
    return out


def is_record(data) -> bool:
    """Whether a JSON document is a run record (full or compact), not some other JSON beside it."""
    return isinstance(data, dict) and bool(data.get("compact") or "schema_version" in data)
