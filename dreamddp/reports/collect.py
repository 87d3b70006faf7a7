"""Find run records and turn each into a compact record, the results tools' only input.

The compact copy (``results/runs/<study>/<run>.json``) keeps what tables and figures read: config,
versions, hardware, summary, evaluations and divergence in full, the iteration rows thinned to
``MAX_POINTS`` (``elapsed`` summed before thinning) and DreamDDP's profile, so the committed copies
regenerate everything.  Unusable records (torn JSON, a run not completed, no config) are skipped
and ``collect`` says why, so a crashed run never breaks or silently thins a table.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Iterable, Optional

from dreamddp.atomic import write_json
from dreamddp.run.record import RECORD_NAME

COMPACT_VERSION = 1
MAX_POINTS = 300  # iteration rows kept per run
_ROW_KEYS = ("iteration", "time", "forward", "backward", "wait", "bytes", "wire_bytes", "loss")
_PROFILE_FILES = ("bp", "comm", "fwd", "nbytes", "meta")
_EXTRA_KEYS = ("link", "link_calibration", "world_size", "samples_per_epoch_per_worker", "schedule", "model")
_SUFFIX = re.compile(r"_(cpu|paper)$")
_NOT_RUNS = ("wandb", ".submitit", "profile", ".hydra", "failures", "checkpoints")  # folders holding other JSON


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


def compact(record: dict, run_dir: Optional[Path] = None, limit: int = MAX_POINTS) -> dict:
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
        "git_sha": record.get("git_sha"), "versions": record.get("versions"), "hardware": record.get("hardware"),
        "config": record["config"], "extra": extra,
        "summary": {k: v for k, v in record.get("summary", {}).items() if k != "text"},
        "iterations": _thin(rows, limit), "evals": evals, "divergence": record.get("divergence", []),
    })
    # wall-clock stamps keep their full precision (6 significant digits of an epoch time is 1000 s)
    out["start_time"], out["end_time"] = record.get("start_time"), record.get("end_time")
    return out


def _record_files(root: Path) -> Iterable[tuple[Path, Optional[Path]]]:
    """(json file, run dir or None for compact copies) under ``root``."""
    if root.is_file():
        yield root, (root.parent if root.name == RECORD_NAME else None)
    elif root.name.startswith("offline-run-") and root.parent.name == "wandb":
        run_dir = root.parent.parent  # W&B lives in <run dir>/wandb/ (dreamddp/run/wandb_log.py)
        if (run_dir / RECORD_NAME).is_file():
            yield run_dir / RECORD_NAME, run_dir
    else:
        for path in sorted(root.rglob("*.json")):
            if not any(part in _NOT_RUNS for part in path.relative_to(root).parts[:-1]):
                yield path, (path.parent if path.name == RECORD_NAME else None)


def collect(paths: Iterable[str | Path], statuses: tuple[str, ...] = ("completed",),
            skipped: Optional[list[tuple[Path, str]]] = None) -> list[dict]:
    """Compact records of every run under ``paths`` whose status is in ``statuses``; a run found
    twice counts once (the first found, in the order of ``paths``); the others are appended to
    ``skipped`` as (file, why)."""
    runs, seen = [], set()
    skip = skipped.append if skipped is not None else (lambda item: None)
    for root in map(Path, paths):
        if not root.exists():
            raise FileNotFoundError(f"no such file or directory: {root}")
        for path, run_dir in _record_files(root):
            try:
                data = json.loads(path.read_text())
            except OSError as exc:
                skip((path, f"unreadable ({exc.strerror or exc})"))
                continue
            except ValueError:
                skip((path, "not complete JSON (torn or truncated write)"))
                continue
            if not isinstance(data, dict) or not (data.get("compact") or "schema_version" in data):
                continue  # some other JSON (hydra, schedule, profile)
            try:
                run = compact(data, run_dir)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                skip((path, f"incomplete record ({exc})"))
                continue
            if run["status"] not in statuses:
                skip((path, f"status {run['status']}"))
                continue
            key = (run["study"], run["scale"], run["name"], run.get("start_time"))
            if key not in seen:
                seen.add(key)
                runs.append(run)
    return runs


def safe_name(name: str) -> str:
    """A file name from a Hydra override dirname: ``algo=ssgd,model=gpt2`` -> ``algo-ssgd_model-gpt2``."""
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", name.replace("=", "-")).strip("_") or "run"


def write_compact(runs: Iterable[dict], out_dir: str | Path) -> list[Path]:
    """``out_dir/<study>_<scale>/<run>.json`` for each run; returns the files written."""
    written = []
    for run in runs:
        path = Path(out_dir) / (f"{run['study']}_{run['scale']}" if run["scale"] else run["study"])
        path.mkdir(parents=True, exist_ok=True)
        written.append(path / f"{safe_name(run['name'])}.json")
        write_json(written[-1], run)
    return written
