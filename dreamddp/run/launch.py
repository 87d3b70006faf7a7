"""Starting the workers of one run, and supervising them until they are gone.

The CLI calls ``launch_workers`` when it is not itself a worker (no torchrun or
srun identity in its environment): on a laptop, inside a one-task SLURM job
(submitit), or under a Hydra multirun.  The default way is torchrun on this
host; a link type with a launcher of its own (``bandwidth.backend=tc``: one
process per shaped network namespace) starts them instead.  Whatever the way,
the parent forwards SIGINT/SIGTERM and kills stragglers after a grace period
(dreamddp.procs), leaves no process of the run behind, and makes sure
run.json does not stay "running" when the workers died without closing it: it
is marked failed with the rank that failed first and why (dreamddp.run.failures).

torchrun runs through ``python -m dreamddp.run.failures`` (torchrun plus a file of
per-rank exit statuses) and restarts the workers ``cluster.max_restarts`` times;
restarted workers resume from the run directory's newest checkpoint.  With
``cluster.preemptible`` a SIGUSR1 to this process becomes a checkpoint-and-stop
request to the workers (dreamddp.run.preempt), and a run that stopped so exits with
``EXIT_PREEMPTED``.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import signal
import socket
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from dreamddp.run import failures, preempt
from dreamddp.checks import ConfigError
from dreamddp.comm.links import LINKS
from dreamddp.comm.links.tc import LAUNCHED_ENV
from dreamddp.run.dist_env import worker_env
from dreamddp.run.record import load_record, mark_failed
from dreamddp.procs import no_leftovers, supervise

log = logging.getLogger(__name__)

_SAFE = re.compile(r"[A-Za-z0-9_./@:+-]+")
# How long torchrun lets workers exit after its SIGTERM before SIGKILL (a frozen worker never does).
SHUTDOWN_TIMEOUT_S = 10


def in_worker(environ: Optional[dict] = None) -> bool:
    """True under torchrun (RANK/WORLD_SIZE/LOCAL_RANK) or a multi-task srun."""
    return worker_env(environ) is not None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quote_override(value: str) -> str:
    """Quote a value for Hydra's override grammar when it has special characters."""
    if _SAFE.fullmatch(value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def worker_command(argv: list[str], run_dir: str) -> list[str]:
    """The CLI again, with the same overrides and the run directory fixed."""
    return [sys.executable, "-m", "dreamddp.cli", *argv, f"hydra.run.dir={quote_override(run_dir)}"]


@functools.cache
def _torchrun_has(option: str) -> bool:
    """Whether this torch's torchrun takes ``option`` (--shutdown-timeout is newer than 2.11)."""
    from torch.distributed.run import get_args_parser

    return any(option in action.option_strings for action in get_args_parser()._actions)


def torchrun_command(cfg: DictConfig, run_dir: str, argv: list[str], port: int) -> list[str]:
    """torchrun's arguments, run through dreamddp.run.failures (which records how each rank ended).

    The c10d rendezvous (not the static one) runs a fresh round for every restart."""
    return [
        sys.executable, "-m", "dreamddp.run.failures",
        "--nnodes", "1",
        "--nproc-per-node", str(cfg.cluster.nproc),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"127.0.0.1:{port}",
        "--max-restarts", str(cfg.cluster.max_restarts),
        *(["--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S)] if _torchrun_has("--shutdown-timeout") else []),
        *worker_command(argv, run_dir)[1:],  # torchrun runs the module with its own python
    ]


def worker_environment(cfg: DictConfig, environ: Optional[dict] = None) -> dict[str, str]:
    """Our environment (HF_*_OFFLINE, WANDB_MODE, DREAMDDP_DATA... pass through) plus threads."""
    env = dict(os.environ if environ is None else environ)
    env["OMP_NUM_THREADS"] = str(cfg.cluster.threads_per_worker)
    env[LAUNCHED_ENV] = "1"
    return env


def _launch_torchrun(cfg: DictConfig, run_dir: str, argv: list[str], env: dict[str, str]) -> int:
    port = int(cfg.cluster.master_port) or free_port()
    cmd = torchrun_command(cfg, run_dir, argv, port)
    # Each restart's workers get a store of their own (rank 0 hosts it), not the agent's, which
    # still holds the addresses of the workers they replace.
    env = {**env, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    log.info("starting %d workers: %s", cfg.cluster.nproc, " ".join(cmd))
    return supervise(cmd, env)


def check_launchable(cfg: DictConfig, environ: Optional[dict] = None) -> None:
    """Launcher-only rules (a worker under torchrun/srun does not need them)."""
    env = os.environ if environ is None else environ
    if cfg.cluster.nnodes != 1:
        n, per_node = cfg.cluster.nnodes, cfg.cluster.nproc
        raise ConfigError(
            f"cluster.nnodes={n}: dreamddp-run starts workers on this host only; on each of the {n} nodes run "
            f"`torchrun --nnodes {n} --nproc-per-node {per_node} --rdzv-backend c10d --rdzv-endpoint "
            f"<first node>:29500 --rdzv-id <id> -m dreamddp.cli <overrides>`, or submit "
            f"`sbatch --nodes={n} --gpus-per-node={per_node} slurm/dreamddp.sbatch <overrides>` "
            "(README, \"On a cluster\")"
        )
    if cfg.cluster.name == "slurm" and not env.get("SLURM_JOB_ID"):
        raise ConfigError(
            "cluster=slurm: not inside a SLURM job; submit with slurm/ or -m hydra/launcher=submitit_slurm"
        )
    if cfg.cluster.max_restarts and LINKS.lookup(cfg.bandwidth.backend).launch_workers is not None:
        raise ConfigError(f"cluster.max_restarts={cfg.cluster.max_restarts}: bandwidth backend "
                          f"{cfg.bandwidth.backend} starts its workers itself and does not restart them")


def prepare_data(cfg: DictConfig) -> None:
    """Download/cache the dataset once, before N workers would race to do it."""
    from dreamddp.data import prepare

    try:
        prepare(cfg.data.name, cfg.data.root)
    except ValueError as exc:  # DataUnavailable: one line already
        raise ConfigError(f"data={cfg.data.name}: {exc}") from exc


@contextmanager
def _checkpoint_requests(cfg: DictConfig, run_dir: str):
    """cluster.preemptible: SIGUSR1 to this process asks the workers to checkpoint and stop."""
    if not cfg.cluster.preemptible:
        yield
        return
    preempt.consume(run_dir)  # an earlier job's request, never served
    previous = signal.signal(preempt.SIGNAL, lambda *_: preempt.request(run_dir))
    try:
        yield
    finally:
        signal.signal(preempt.SIGNAL, previous)


def launch_workers(cfg: DictConfig, run_dir: str, argv: list[str]) -> int:
    """Start cluster.nproc workers running ``dreamddp.cli argv`` in ``run_dir``; wait; exit status.

    On return no process of the run is left, and the run record is closed: if
    the workers left it missing or "running" (or rank 0 closed it with its own
    view of a peer's failure), it is marked failed with the first failure across
    ranks, and a zero status becomes 1.  Workers that stopped on a checkpoint
    request return ``preempt.EXIT_PREEMPTED``.
    """
    check_launchable(cfg)
    prepare_data(cfg)
    env = worker_environment(cfg)
    failures.clear(run_dir)
    env[failures.EXITS_ENV] = str(failures.exits_path(run_dir))
    own_launcher = LINKS.lookup(cfg.bandwidth.backend).launch_workers
    with no_leftovers(), _checkpoint_requests(cfg, run_dir):
        if own_launcher is not None:  # e.g. tc: one process per shaped network namespace
            rc = own_launcher(cfg, worker_command(argv, run_dir), env)
        else:
            rc = _launch_torchrun(cfg, run_dir, argv, env)
    return close_record(cfg, run_dir, rc)


def close_record(cfg: DictConfig, run_dir: str, rc: int) -> int:
    """After the workers: the run's exit status, with the record closed to match it."""
    try:
        status = load_record(run_dir).get("status")
    except (OSError, ValueError):
        status = None
    if status == "preempted":
        log.warning("workers stopped on a checkpoint request; requeue the job to continue")
        return preempt.EXIT_PREEMPTED
    if status == "completed":
        return rc
    world = int(cfg.cluster.nproc) * int(cfg.cluster.nnodes)
    cause = failures.root_cause(run_dir, world, float(cfg.cluster.timeout_s))
    if cause is not None:
        mark_failed(run_dir, cfg, cause.message, cause.as_dict())
        log.error("workers failed: %s (run record %s)", cause.message, Path(run_dir) / "run.json")
    elif status != "failed":
        why = f"workers exited with status {rc} without closing the run record"
        mark_failed(run_dir, cfg, why)
        log.error("%s: marked %s failed", why, Path(run_dir) / "run.json")
    return rc or 1
