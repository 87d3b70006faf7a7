"""The speedup table as a W&B Table, one W&B run per study (offline by default).

The per-run W&B runs (dreamddp/run/wandb_log.py) are grouped by experiment and
typed by algorithm; this adds one run per study, in the same group, with
job_type "summary", holding the table the CSV/Markdown files hold.  Offline
mode needs no network or account: files go under ``<dir>/wandb/offline-run-*``
and ``wandb sync <that dir>`` uploads them later.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from dreamddp.reports.records import typed
from dreamddp.reports.tables import COLUMNS, PROFILE_ONLY, speedup_rows


def log_tables(runs: list[dict], directory: Path, mode: str = "offline", project: str = "dreamddp",
               metric: str = "loss", targets: Optional[dict] = None) -> list[str]:
    """Log one table per study; returns the W&B run directories written."""
    if mode not in ("offline", "online"):
        raise ValueError(f"wandb mode {mode!r}: choose offline or online")
    import wandb

    by_study: dict[tuple, list[dict]] = {}
    for r in map(typed, runs):
        if r.study not in PROFILE_ONLY:
            by_study.setdefault((r.study, r.scale), []).append(r)
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for (study, scale), members in sorted(by_study.items()):
        experiment = f"{study}_{scale}" if scale else study
        rows = speedup_rows(members, metric, targets)
        table = wandb.Table(columns=list(COLUMNS), data=[[r.get(c) for c in COLUMNS] for r in rows])
        run = wandb.init(project=project, group=experiment, job_type="summary", name=f"{experiment}-summary",
                         dir=str(directory), mode=mode, config={"study": study, "scale": scale, "metric": metric,
                                                                "runs": len(members)})
        run.log({"speedup_table": table})
        out.append(str(Path(run.dir).parent))
        run.finish()
    return out
