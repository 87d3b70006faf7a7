"""``dreamddp-run``: compose the config, validate it, then launch or be a worker.

One entry point plays both roles so that the overrides a user types are the
ones every worker sees.  Without a launcher identity in the environment it is
the launcher: validate, prepare the data once, start N workers (torchrun, or
shaped namespaces) that re-run this same module with the same overrides and
the run directory pinned, and wait.  Under torchrun/srun it is one worker and
calls ``dreamddp.run.train.run_worker``.  Everything else (``--help``, ``--cfg``,
``--info``, ``-m``) is plain Hydra.

Errors a user can fix print ``error: <one line>`` and exit with status 2.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from dreamddp.run import dist_env, launch
from dreamddp.comm.links import LINKS
from dreamddp.checks import refuse
from dreamddp.config import CONFIG_NAME, ConfigError, conf_dir, validate
from dreamddp.config.overrides import compose_checked

# Hydra overrides that describe the launching process, not the run: never passed to workers.
_PARENT_ONLY = ("hydra.run.", "hydra.sweep.", "hydra.mode", "hydra.launcher", "hydra/launcher",
                "hydra.sweeper", "hydra/sweeper", "hydra.job.num", "hydra.job.id")
# Hydra flags whose next argv token is their value (not an override).
_VALUE_FLAGS = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd",
                "--cfg", "-c", "--package", "-p", "--experimental-rerun")


class WorkerFailure(RuntimeError):
    """A multirun job whose workers failed; Hydra records it and goes on with the sweep."""


def _user_overrides(argv: list[str]) -> list[str]:
    """The overrides on a command line: every token that is neither a flag nor a flag's value."""
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token.startswith("-"):
            skip = token in _VALUE_FLAGS
        else:
            out.append(token)
    return out


def _config_name(argv: list[str]) -> str:
    """The primary config a command line names (``--config-name``/``-cn``), else ours."""
    for i, token in enumerate(argv):
        if token.startswith("--config-name="):
            return token.split("=", 1)[1]
        if token in ("--config-name", "-cn") and i + 1 < len(argv):
            return argv[i + 1]
    return CONFIG_NAME


def check_group_options(argv: list[str], config_dir: str) -> None:
    """Refuse ``group=option`` for a conf/ group that has no such option, in one line.

    Hydra would refuse it too, but over many lines; this runs before Hydra and
    covers sweeps (``algo=ssgd,nope``).  Anything unusual is left to Hydra.
    """
    if any(a in ("--config-dir", "-cd") or a.startswith("--config-dir=") for a in argv):
        return  # extra search paths may add options we cannot see here
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for token in _user_overrides(argv):
        try:
            (override,) = parser.parse_overrides([token])
        except Exception:  # noqa: BLE001  malformed: Hydra reports it in its own words
            continue
        group = Path(config_dir) / override.key_or_group
        if override.key_or_group.startswith("hydra/"):
            continue  # Hydra's own groups also hold plugin configs (submitit_slurm) we cannot list here
        if override.is_delete() or override.package or not group.is_dir():
            continue
        options = sorted(p.stem for p in group.glob("*.yaml"))
        if override.is_sweep_override():
            values = list(override.sweep_string_iterator())
        else:
            values = [override.value()]
        for value in values:
            if isinstance(value, str) and value not in options:
                refuse(f"{override.key_or_group}={value}: unknown option; choose from {', '.join(options)}")


def check_composes(argv: list[str], config_dir: str, multirun: bool = False) -> None:
    """Compose the config before Hydra does, so that an unknown key, a value of the wrong type
    or an override Hydra cannot parse is refused in one line (exit 2) instead of Hydra's several.
    ``multirun``: the sweep's shared config (dreamddp.sweep_filter then checks every job)."""
    if any(a.startswith(("--config-dir", "-cd", "--config-path", "-cp")) for a in argv):
        return  # extra or other search paths: left to Hydra
    if any(a in ("--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc") for a in argv):
        return
    try:
        compose_checked(config_dir, _config_name(argv), _user_overrides(argv), multirun)
    except ConfigError as exc:
        refuse(str(exc))


def worker_argv(hc) -> list[str]:
    """The command-line arguments that make a worker compose exactly this job's config."""
    argv: list[str] = []
    if hc.job.config_name and hc.job.config_name != CONFIG_NAME:
        argv += ["--config-name", hc.job.config_name]
    for source in hc.runtime.config_sources:
        if source.provider == "command-line" and source.schema == "file":
            argv += ["--config-dir", source.path]
    argv += [o for o in hc.overrides.hydra if not o.lstrip("+~").startswith(_PARENT_ONLY)]
    argv += list(hc.overrides.task)
    return argv


def check_output_dir(key: str, path: str) -> None:
    """Refuse a run directory that cannot be created or written, naming ``key`` (one line)."""
    target = Path(path).absolute()
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{key}={path}: {existing} is not a directory")
    # Create and remove one directory where the run's would go, rather than trust os.access: mode
    # bits say nothing of a read-only mount, and procfs or sysfs refuse root what its bits allow.
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".dreamddp-probe-", dir=existing))
    except OSError as e:
        raise ConfigError(f"{key}={path}: cannot create or write it under {existing} ({e.strerror.lower()})") from None


class ValidateFirst(Callback):
    """Validate a single run before Hydra creates its output directory.

    Listed in conf/config.yaml under hydra.callbacks.  A refused config thus
    leaves no run directory at all.  The launching process also checks that it
    can start the run (launch.check_launchable) and write its run directory; a
    worker of a multi-node torchrun, that every node names the same run directory.
    A sweep's jobs are all checked before the first starts (dreamddp.sweep_filter), and each
    again by the task on the host it runs on (a SLURM launcher's job checks its own node).
    """

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        task_cfg = OmegaConf.masked_copy(config, [k for k in config if k != "hydra"])
        try:
            validate(task_cfg)
            if not launch.in_worker():
                launch.check_launchable(task_cfg)
                check_output_dir("hydra.run.dir", config.hydra.run.dir)
            else:
                explicit = any(o.startswith("hydra.run.dir=") for o in config.hydra.overrides.hydra)
                dist_env.check_shared_run_dir(explicit)
        except ConfigError as exc:
            refuse(str(exc))

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        try:
            check_output_dir("hydra.sweep.dir", config.hydra.sweep.dir)
        except ConfigError as exc:
            refuse(str(exc))


def _task(cfg: DictConfig) -> None:
    hc = HydraConfig.get()
    run_dir = hc.runtime.output_dir
    try:
        if hc.mode == RunMode.MULTIRUN:
            validate(cfg)
        if launch.in_worker():
            LINKS.lookup(cfg.bandwidth.backend).check_worker()
            from dreamddp.run.train import run_worker

            run_worker(cfg, run_dir)
            return
        rc = launch.launch_workers(cfg, run_dir, worker_argv(hc))
    except ConfigError as exc:
        refuse(str(exc))
    if rc == 0:
        return
    if hc.mode == RunMode.MULTIRUN:
        raise WorkerFailure(f"workers exited with status {rc}; see {run_dir}")
    sys.exit(rc)


_hydra_main = hydra.main(config_path=conf_dir(), config_name=CONFIG_NAME, version_base="1.3")(_task)


def main() -> None:
    check_group_options(sys.argv[1:], conf_dir())
    multirun = any(a in ("-m", "--multirun") for a in sys.argv[1:])
    if multirun:
        from dreamddp import sweep_filter

        sweep_filter.install()  # every job checked before the first starts; a repeated sweep skips completed runs
    if not launch.in_worker():  # a worker composes what its launcher already checked
        check_composes(sys.argv[1:], conf_dir(), multirun)
        _hydra_main()
        return
    code = 0
    try:
        _hydra_main()
    except SystemExit as stop:  # Hydra's exit after a failed task, or a refused config's
        code = stop.code
    dist_env.exit_worker(code)  # a worker ends without interpreter finalization (see exit_worker)


if __name__ == "__main__":
    main()
