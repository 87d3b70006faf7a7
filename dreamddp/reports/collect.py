"""Find run records and turn each into a compact record (``compact.compact``), the results tools' only input.

The compact copy (``results/runs/<study>/<run>.json``) keeps what tables and figures read: config,
versions, hardware, summary, evaluations and divergence in full, the iteration rows thinned to
``MAX_POINTS`` (``elapsed`` summed before thinning) and DreamDDP's profile, so the committed copies
regenerate everything.  Unusable records (torn JSON, a run not completed, no config) are skipped
and ``collect`` says why, so a crashed run never breaks or silently thins a table.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable, Optional

from dreamddp.atomic import write_json
from dreamddp.reports.compact import compact, is_record
from dreamddp.reports.records import Record
from dreamddp.run.record import RECORD_NAME

_NOT_RUNS = ("wandb", ".submitit", "profile", ".hydra", "failures", "checkpoints")  # folders holding other JSON


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
            if not is_record(data):
                continue  # some other JSON (hydra, schedule, profile)
            try:
                run = compact(data, run_dir)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                skip((path, f"incomplete record ({exc})"))
                continue
            rec = Record.of(run)
            if rec.status not in statuses:
                skip((path, f"status {rec.status}"))
                continue
            key = (rec.study, rec.scale, rec.name, rec.start_time)
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
        rec = Record.of(run)
        path = Path(out_dir) / (f"{rec.study}_{rec.scale}" if rec.scale else rec.study)
        path.mkdir(parents=True, exist_ok=True)
        written.append(path / f"{safe_name(rec.name)}.json")
        write_json(written[-1], run)
    return written
