"""The speedup table as a W&B Table: one run per study, job_type "summary", in the group of the
study's per-run W&B runs (dreamddp/run/wandb_log.py); offline by default (``wandb sync`` later)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from dreamddp.reports.tables import COLUMNS, by_study, speedup_rows


def log_tables(runs: list[dict], directory: Path, mode: str = "offline", project: str = "dreamddp",
               metric: str = "loss", targets: Optional[dict] = None) -> list[str]:
    """Log one table per study; returns the W&B run directories written."""
    if mode not in ("offline", "online"):
        raise ValueError(f"wandb mode {mode!r}: choose offline or online")
    import wandb

    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for experiment, members in by_study(runs):
        rows = speedup_rows(members, metric, targets)
        table = wandb.Table(columns=list(COLUMNS), data=[[r.get(c) for c in COLUMNS] for r in rows])
        run = wandb.init(project=project, group=experiment, job_type="summary", name=f"{experiment}-summary",
                         dir=str(directory), mode=mode, config={"study": members[0].study, "scale": members[0].scale,
                                                                "metric": metric, "runs": len(members)})
        run.log({"speedup_table": table})
        out.append(str(Path(run.dir).parent))
        run.finish()
    return out
