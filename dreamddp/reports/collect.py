"""Find run records and turn each into a compact record, the results tools' only input.

A full ``run.json`` (dreamddp/run/record.py) keeps every iteration, with per-unit
timelines; the committed copy under ``results/runs/<study>/<run>.json`` keeps
what the tables and figures read: config, versions, hardware, summary, the
evaluations and divergence series in full, the iteration series (loss,
timings) thinned to at most ``MAX_POINTS`` rows, with the cumulative training
time ``elapsed`` computed from all rows before thinning, and the DreamDDP
profile (per-unit backward/all-reduce times) when the run directory has one.
Tables and figures are built from compact records only, so the committed
copies regenerate everything that full records do.

Sources: directories searched recursively for ``run.json`` and for compact
records (``"compact": 1``); a W&B offline run directory
(``<run dir>/wandb/offline-run-*``) stands for the run.json of its run dir.
Records that cannot be used (unreadable or truncated JSON, a run still
"running", failed or preempted, a record without its config) are skipped, and
``collect`` says which and why, so a half-written or crashed run never breaks
or silently thins a table.  Compact copies are written atomically.
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


def _round(value, digits: int = 6):
    """Floats to ``digits`` significant digits (JSON size), recursively; NaN/inf -> None."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return float(f"{value:.{digits}g}")
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


def _profile_data(run_dir: Optional[Path]) -> Optional[dict]:
    if run_dir is None or not (run_dir / "profile" / "bp.json").is_file():
        return None
    data = {}
    for name in _PROFILE_FILES:
        path = run_dir / "profile" / f"{name}.json"
        if path.is_file():
            data[name] = json.loads(path.read_text())
    return data


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
    profile = _profile_data(run_dir)
    if profile is not None:
        extra["profile_data"] = profile
    summary = {k: v for k, v in record.get("summary", {}).items() if k != "text"}
    experiment = (record["config"].get("experiment") or {}).get("name", "default")
    study, scale = study_of(experiment)
    out = _round({
        "compact": COMPACT_VERSION,
        "study": study,
        "scale": scale,
        "name": run_dir.name if run_dir is not None else record.get("run_dir", "run"),
        "source": str(run_dir) if run_dir is not None else record.get("run_dir"),
        "status": record["status"],
        "error": record.get("error"),
        "start_time": record.get("start_time"),
        "end_time": record.get("end_time"),
        "git_sha": record.get("git_sha"),
        "versions": record.get("versions"),
        "hardware": record.get("hardware"),
        "config": record["config"],
        "extra": extra,
        "summary": summary,
        "iterations": _thin(rows, limit),
        "evals": evals,
        "divergence": record.get("divergence", []),
    })
    # Wall-clock stamps keep their full precision (6 significant digits of an epoch time is 1000 s).
    out["start_time"], out["end_time"] = record.get("start_time"), record.get("end_time")
    return out


def _record_files(root: Path) -> Iterable[tuple[Path, Optional[Path]]]:
    """(json file, run dir or None for compact copies) under ``root``."""
    if root.is_file():
        yield root, (root.parent if root.name == RECORD_NAME else None)
        return
    if root.name.startswith("offline-run-") and root.parent.name == "wandb":
        run_dir = root.parent.parent  # W&B lives in <run dir>/wandb/ (dreamddp/run/wandb_log.py)
        if (run_dir / RECORD_NAME).is_file():
            yield run_dir / RECORD_NAME, run_dir
        return
    for path in sorted(root.rglob("*.json")):
        if any(part in ("wandb", ".submitit", "profile", ".hydra", "failures", "checkpoints")
               for part in path.relative_to(root).parts[:-1]):
            continue
        yield path, (path.parent if path.name == RECORD_NAME else None)


def collect(paths: Iterable[str | Path], statuses: tuple[str, ...] = ("completed",),
            skipped: Optional[list[tuple[Path, str]]] = None) -> list[dict]:
    """Compact records of every run under ``paths`` whose status is in ``statuses``.

    A run found twice (its run.json and a compact copy) counts once: the
    first found wins, in the order of ``paths``.  Records left out for any other
    reason are appended to ``skipped`` as (file, why).
    """
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
        folder = Path(out_dir) / (f"{run['study']}_{run['scale']}" if run["scale"] else run["study"])
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{safe_name(run['name'])}.json"
        write_json(path, run)
        written.append(path)
    return written
