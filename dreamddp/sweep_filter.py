"""Multiruns check every job before the first starts, and skip the runs that already completed.

Every job of the sweep is composed and validated (``dreamddp.config.validate``)
before the launcher sees any: a bad value in the last job of a sweep is
refused in one line naming the job (exit 2), not after the first jobs ran.
Jobs that run on this host (Hydra's basic launcher, submitit's local one) get
every check, the host's included (data, CUDA, traffic shaping, the launcher's
own); jobs a SLURM launcher sends elsewhere get the rules that hold anywhere,
and each checks its host when it starts (``cli._task``).

``dreamddp-run -m`` installs a job filter on Hydra's
BasicSweeper (the sweeper every preset uses) before Hydra starts.  Every job's
directory ``hydra.sweep.dir/hydra.sweep.subdir`` is computed exactly as the
launcher will, and a job whose ``run.json`` says ``completed`` and holds the
same resolved config as the job would run with is left out before the
launcher sees it (so SLURM gets no job for it); missing, "running" (killed)
or "failed" runs, and runs of an edited preset, are run again into the same
directory.  An interrupted study is finished by repeating its command.

That needs deterministic directories: the experiment presets use
``multirun/<experiment.name>/<override_dirname>``.  A job whose subdir cannot
be known in advance (``${hydra.job.num}``) is always run; with ``${now:...}``
in the sweep dir nothing is ever found, so nothing is skipped.

Why a filter and not a sweeper: Hydra instantiates sweepers only from the
``hydra_plugins`` namespace package, which dreamddp does not ship, and a
callback cannot cancel a job.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Optional, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.hydra_config import HydraConfig
from hydra.core.plugins import Plugins
from omegaconf import OmegaConf

from dreamddp.checks import ConfigError, refuse
from dreamddp.config import validate
from dreamddp.config.overrides import composition_error
from dreamddp.run.record import load_record

log = logging.getLogger("dreamddp.sweep")

_EXPAND = BasicSweeper.split_arguments  # Hydra's own cartesian expansion (a staticmethod)
_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


# Launchers whose jobs run on other hosts: the sweep's host checks only what holds anywhere.
_REMOTE_LAUNCHERS = ("SlurmLauncher",)


def job_config(sweeper, overrides: Sequence[str]):
    """The job's config as the launcher will compose it; ConfigError (one line) when Hydra cannot."""
    try:
        return sweeper.hydra_context.config_loader.load_sweep_config(sweeper.config, list(overrides))
    except Exception as exc:  # noqa: BLE001  Hydra's and OmegaConf's refusals, made one line
        raise composition_error(exc, overrides) from None


@contextmanager
def as_job(cfg):
    """Hydra's runtime config set to the job's, for ``${hydra:...}`` in its directory and task."""
    previous = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(cfg)
    try:
        yield cfg
    finally:
        HydraConfig.instance().cfg = previous


def job_dir(cfg) -> tuple[Optional[Path], Optional[dict]]:
    """(output directory the launcher will give this job, its resolved task config); None when unknowable."""
    try:
        directory = Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)
        task = OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)
        return directory, task
    except Exception:  # noqa: BLE001  e.g. hydra.job.num: set by the launcher only
        return None, None


def check_job(cfg) -> None:
    """The job's config as the task will validate it; a local job also as its launcher will."""
    task = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    here = not str(cfg.hydra.launcher.get("_target_", "")).endswith(_REMOTE_LAUNCHERS)
    validate(task, host=here)
    if here:
        from dreamddp.run import launch

        launch.check_launchable(task)


def _label(job: Sequence[str], jobs: list[list[str]]) -> str:
    """The overrides that tell this job from the sweep's others (all of them for a sweep of one)."""
    varying = [i for i in range(len(job)) if len({j[i] for j in jobs}) > 1] if len(jobs) > 1 else range(len(job))
    return " ".join(job[i] for i in varying)


def completed(directory: Optional[Path], task: Optional[dict]) -> bool:
    """The run in ``directory`` completed with exactly this config (run records store it resolved)."""
    if directory is None:
        return False
    try:
        record = load_record(directory)
    except (OSError, ValueError):
        return False
    if record.get("status") != "completed":
        return False
    if record.get("config") != task:
        log.info("config changed since the completed run, running it again: %s", directory)
        return False
    return True


def split_skipping_completed(self, overrides, max_batch_size):
    """BasicSweeper.split_arguments with completed jobs removed (installed by ``main``)."""
    (jobs,) = _EXPAND(overrides, None)
    todo = []
    for n, job in enumerate(jobs):
        try:
            with as_job(job_config(self, job)) as cfg:
                directory, task = job_dir(cfg)
                if completed(directory, task):
                    log.info("skip (completed): %s", directory)
                    continue
                check_job(cfg)
        except ConfigError as exc:
            refuse(f"job #{n} of {len(jobs)} ({_label(job, jobs)}): {exc}")
        todo.append(job)
    log.info("%d of %d runs to do, %d already completed", len(todo), len(jobs), len(jobs) - len(todo))
    size = max_batch_size if max_batch_size and max_batch_size > 0 else max(1, len(todo))
    return [todo[i : i + size] for i in range(0, len(todo), size)]


def install() -> None:
    """Filter completed jobs out of every BasicSweeper multirun in this process."""
    # Hydra's plugin scan re-executes the plugin modules, so the class Hydra will
    # instantiate is the one in its registry, not the one imported above.  A plain
    # function assigned on the class becomes a bound method: the filter sees the sweeper.
    Plugins.instance().class_name_to_class[_SWEEPER].split_arguments = split_skipping_completed
