"""OmegaConf resolvers used by conf/config.yaml.

They exist so that every worker of one run agrees on paths without talking to
the others: the repository root (data cache default), a run id taken from the
launcher rather than from each rank's clock, and "rank 0 only" switches for
Hydra's own output files.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from omegaconf import OmegaConf

from dreamddp.checks import ConfigError
from dreamddp.run.dist_env import worker_env

_PACKAGE_DIR = Path(__file__).resolve().parents[1]


def repo_root() -> str:
    """Source checkout holding conf/ (editable install), else the user cache dir."""
    root = _PACKAGE_DIR.parent
    if (root / "conf").is_dir() and (root / "pyproject.toml").is_file():
        return str(root)
    return str(Path.home() / ".cache" / "dreamddp")


def _process_start(pid: int) -> float | None:
    """Wall-clock start time of a process from /proc (Linux), None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 (starttime) counted after "pid (comm)"
        btime = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime")
        )
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return btime + ticks / os.sysconf("SC_CLK_TCK")


def run_id(environ: dict | None = None) -> str:
    """Path fragment naming this run, identical on all workers of one launch.

    torchrun with a rendezvous id -> torchrun/<id>; srun/sbatch -> slurm/<job>[.<step>];
    torchrun without an id ("none") -> the start time of the torchrun agent, the
    common parent of all local ranks; no launcher -> this process's clock.
    """
    env = os.environ if environ is None else environ
    stamp = "%Y-%m-%d/%H-%M-%S"
    elastic = env.get("TORCHELASTIC_RUN_ID")
    if elastic and elastic != "none":
        return f"torchrun/{elastic}"
    if env.get("SLURM_JOB_ID"):
        step = env.get("SLURM_STEP_ID")
        return f"slurm/{env['SLURM_JOB_ID']}" + (f".{step}" if step else "")
    if elastic == "none":
        started = _process_start(os.getppid())
        if started is not None:
            return time.strftime(stamp, time.localtime(started))
    return time.strftime(stamp)


def rank0_only(value, other=None):
    """``value`` on rank 0 (or outside any launcher), ``other`` on the other ranks."""
    env = worker_env()
    return value if env is None or env.rank == 0 else other


def by_size(table, _root_):
    """``${ddp_by_size:{tiny: 8, small: 8, paper: 128}}``: the value for this run's
    ``model.size``, so a model yaml states its recipe per preset, each value beside its source."""
    size = _root_.model.size
    if size not in table:
        raise ConfigError(f"model.size={size}: unknown size for {_root_.model.name}; choose from {', '.join(table)}")
    return table[size]


def register_resolvers() -> None:
    """Idempotent: the CLI, tests and workers all call it before composing."""
    OmegaConf.register_new_resolver("ddp_repo", repo_root, replace=True)
    # Cached so that every resolution of hydra.run.dir in one process agrees.
    OmegaConf.register_new_resolver("ddp_run_id", run_id, use_cache=True, replace=True)
    OmegaConf.register_new_resolver("ddp_rank0_only", rank0_only, replace=True)
    OmegaConf.register_new_resolver("ddp_by_size", by_size, replace=True)
