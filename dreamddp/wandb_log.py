"""Weights & Biases mirror of the run record (rank 0 only, offline by default).

The run record stays the source of truth; W&B gets the same numbers for
browsing.  Runs are grouped by experiment and typed by algorithm so that one
experiment's algorithms line up in the UI.  Files go inside the run directory
(``<run_dir>/wandb/``), so ``wandb sync <run_dir>/wandb/offline-run-*`` uploads
later.  The API key is never read from config: wandb takes it from the
environment (WANDB_API_KEY) or its own login file.  When disabled, wandb is not
imported at all (it is slow to import and spawns a service process).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from dreamddp.checks import choice

MODES = ("offline", "online", "disabled")
# Legacy WANDB_MODE spellings wandb itself still accepts.
_ALIASES = {"dryrun": "offline", "run": "online"}


def check(wandb_cfg) -> None:
    choice("wandb.mode", wandb_cfg.mode, MODES)


def resolve_mode(cfg_mode: str, environ: Optional[dict] = None) -> str:
    """WANDB_MODE from the environment wins over wandb.mode in the config."""
    env = os.environ if environ is None else environ
    mode = env.get("WANDB_MODE") or cfg_mode
    mode = _ALIASES.get(mode, mode)
    if mode not in MODES:
        raise ValueError(f"wandb mode {mode!r}: choose from {', '.join(MODES)}")
    return mode


class WandbLogger:
    """``enabled`` is the caller's rank-0 flag; the mode can still disable it."""

    def __init__(self, cfg: DictConfig, run_dir: str, enabled: bool) -> None:
        self.mode = resolve_mode(str(cfg.wandb.mode)) if enabled else "disabled"
        self.run: Any = None
        if self.mode == "disabled":
            return
        import wandb

        wandb_dir = Path(run_dir)
        wandb_dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=cfg.wandb.project,
            entity=cfg.wandb.entity,
            group=cfg.wandb.group or cfg.experiment.name,
            job_type=cfg.algo.name,
            name=wandb_dir.resolve().name,
            tags=list(cfg.wandb.tags),
            config=OmegaConf.to_container(cfg, resolve=True),
            dir=str(wandb_dir),
            mode=self.mode,
        )

    @property
    def active(self) -> bool:
        return self.run is not None

    def log(self, step: int, metrics: dict) -> None:
        if self.run is not None:
            self.run.log(dict(metrics), step=int(step))

    def summary(self, values: dict) -> None:
        if self.run is not None:
            self.run.summary.update(dict(values))

    def finish(self, exit_code: int = 0) -> None:
        if self.run is not None:
            self.run.finish(exit_code=exit_code)
            self.run = None
