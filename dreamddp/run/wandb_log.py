"""Weights & Biases mirror of the run record (rank 0 only, offline by default).

The run record stays the source of truth; W&B gets the same numbers for
browsing.  Runs are grouped by experiment and typed by algorithm so that one
experiment's algorithms line up in the UI.  Files go inside the run directory
(``<run_dir>/wandb/``), so ``wandb sync <run_dir>/wandb/offline-run-*`` uploads
later.  The API key is never read from config: wandb takes it from the
environment (WANDB_API_KEY) or its own login file.  When disabled, wandb is not
imported at all (it is slow to import and spawns a service process).

Online needs the server; a node without network must not hang the run (wandb
retries for minutes).  So online mode first probes the server (a TCP connect),
then gives ``wandb.init`` what is left of ``wandb.init_timeout_s`` (less the 10 s
wandb waits past its own timeout and the few seconds that dropping the attempt
takes); when either fails the run logs offline instead, with one warning line,
and ``wandb sync`` uploads it later.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlparse

from omegaconf import DictConfig, OmegaConf

from dreamddp.checks import choice, positive

log = logging.getLogger(__name__)

MODES = ("offline", "online", "disabled")
# wandb.init's own wait past its init_timeout (wandb/sdk/wandb_init.py), plus dropping the attempt
_WANDB_GRACE_S = 10.0 + 5.0
# Legacy WANDB_MODE spellings wandb itself still accepts.
_ALIASES = {"dryrun": "offline", "run": "online"}


def check(wandb_cfg) -> None:
    choice("wandb.mode", wandb_cfg.mode, MODES)
    positive("wandb.init_timeout_s", wandb_cfg.init_timeout_s)


def resolve_mode(cfg_mode: str, environ: Optional[dict] = None) -> str:
    """WANDB_MODE from the environment wins over wandb.mode in the config."""
    env = os.environ if environ is None else environ
    mode = env.get("WANDB_MODE") or cfg_mode
    mode = _ALIASES.get(mode, mode)
    if mode not in MODES:
        raise ValueError(f"wandb mode {mode!r}: choose from {', '.join(MODES)}")
    return mode


def reachable(url: str, timeout_s: float) -> Optional[str]:
    """None when a TCP connection to ``url``'s host opens within ``timeout_s``, else why not.

    Name resolution has no timeout of its own, so the probe runs in a daemon thread."""
    parsed = urlparse(url)
    host, port = parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80)
    if not host:
        return f"bad server address {url!r}"
    outcome: list[Optional[str]] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                outcome.append(None)
        except OSError as exc:
            outcome.append(exc.strerror or type(exc).__name__)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return outcome[0] if outcome else f"no answer within {timeout_s:g} s"


def _no_analytics() -> None:
    """wandb's own usage analytics post to the server at process exit (10 s timeouts), even
    after a failed init; with a server that does not answer, a worker would linger there."""
    try:
        from wandb.analytics.opentelemetry import opentelemetry_proxy
    except ImportError:
        return
    disable = getattr(opentelemetry_proxy, "disable", None)
    if disable is not None:
        disable()


def _server_url(wandb) -> str:
    """The server wandb.init would use: its settings files, then WANDB_BASE_URL."""
    settings = wandb.Settings()
    settings.update_from_system_settings()
    settings.update_from_env_vars(dict(os.environ))
    return settings.base_url


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
        init = dict(
            project=cfg.wandb.project,
            entity=cfg.wandb.entity,
            group=cfg.wandb.group or cfg.experiment.name,
            job_type=cfg.algo.name,
            name=wandb_dir.resolve().name,
            tags=list(cfg.wandb.tags),
            config=OmegaConf.to_container(cfg, resolve=True),
            dir=str(wandb_dir),
        )
        if self.mode == "online":
            self.run = self._init_online(wandb, init, float(cfg.wandb.init_timeout_s))
        if self.run is None:
            self.run = wandb.init(**init, mode=self.mode)

    def _init_online(self, wandb, init: dict, timeout_s: float) -> Any:
        """An online run, or None (then offline) when the server cannot be reached in time."""
        started = time.monotonic()
        url = _server_url(wandb)
        why = reachable(url, min(timeout_s, 10.0))
        if why is None:
            _no_analytics()
            left = max(1.0, timeout_s - (time.monotonic() - started) - _WANDB_GRACE_S)
            try:
                return wandb.init(**init, mode="online", settings=wandb.Settings(init_timeout=left))
            except wandb.errors.Error as exc:
                why = " ".join(str(exc).split())[:200]
                wandb.teardown()  # drop the abandoned online attempt, or process exit waits on it
        log.warning("wandb.mode=online: W&B server %s unreachable (%s); logging offline instead "
                    "(wandb sync <run dir>/wandb/offline-run-* uploads it later)", url, why)
        self.mode = "offline"
        return None

    @property
    def active(self) -> bool:
        return self.run is not None

    def log(self, step: int, metrics: dict) -> None:
        if self.run is not None:
            self.run.log(dict(metrics), step=int(step))

    def summary(self, values: dict) -> None:
        if self.run is not None:
            self.run.summary.update(dict(values))

    def finish(self, exit_code: int = 0, preempting: bool = False) -> None:
        """End the W&B run; ``preempting``: marked so first (W&B's contract for a run stopped to be
        resumed: mark_preempting, then a non-zero exit code)."""
        if self.run is not None:
            if preempting:
                self.run.mark_preempting()
            self.run.finish(exit_code=exit_code)
            self.run = None
