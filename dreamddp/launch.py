"""Starting the workers of one run, and supervising them until they are gone.

The CLI calls ``launch_workers`` when it is not itself a worker (no torchrun or
srun identity in its environment): on a laptop, inside a one-task SLURM job
(submitit), or under a Hydra multirun.  The default way is torchrun on this
host; ``bandwidth.backend=tc`` branches off to one process per shaped network
namespace (dreamddp.netshape), because torchrun forks every worker into the
same namespace.  Whatever the way, the parent forwards SIGINT/SIGTERM, kills
stragglers after a grace period, and makes sure run.json does not stay
"running" when the workers died without closing it.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from dreamddp.config import ConfigError
from dreamddp.dist_env import worker_env
from dreamddp.record import load_record, mark_failed

log = logging.getLogger(__name__)

GRACE_S = 30.0  # after a forwarded signal, how long workers get before SIGKILL
LAUNCHED_ENV = "DREAMDDP_LAUNCHED"  # set in workers this module started
_SAFE = re.compile(r"[A-Za-z0-9_./@:+-]+")


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


def torchrun_command(cfg: DictConfig, run_dir: str, argv: list[str], port: int) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", "1",
        "--nproc-per-node", str(cfg.cluster.nproc),
        "--master-addr", "127.0.0.1",
        "--master-port", str(port),
        *worker_command(argv, run_dir)[1:],  # torchrun runs the module with its own python
    ]


def worker_environment(cfg: DictConfig, environ: Optional[dict] = None) -> dict[str, str]:
    """Our environment (HF_*_OFFLINE, WANDB_MODE, DREAMDDP_DATA... pass through) plus threads."""
    env = dict(os.environ if environ is None else environ)
    env["OMP_NUM_THREADS"] = str(cfg.cluster.threads_per_worker)
    env[LAUNCHED_ENV] = "1"
    return env


def _descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (torchrun's workers lead their own sessions)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _kill_tree(proc: subprocess.Popen) -> None:
    for pid in [*_descendants(proc.pid), proc.pid]:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()


def supervise(cmd: list[str], env: dict[str, str]) -> int:
    """Run ``cmd`` in its own session; forward SIGINT/SIGTERM; return its exit status.

    A forwarded signal gives the process tree GRACE_S to stop, then it is
    killed; either way nothing started here outlives this call.  Exit status
    after a signal is 128 + signum, as a shell reports it.
    """
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    caught: list[int] = []

    def forward(signum, _frame):
        caught.append(signum)
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    first_signal = None
    try:
        while True:
            try:
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if caught and first_signal is None:
                    first_signal = time.monotonic()
                if first_signal is not None and time.monotonic() - first_signal > GRACE_S:
                    log.warning("workers ignored the signal for %.0f s: killing them", GRACE_S)
                    _kill_tree(proc)
                    rc = proc.returncode
                    break
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if proc.poll() is None:  # an exception in this loop: leave nothing behind
            _kill_tree(proc)
    if caught:
        return 128 + caught[0]
    return 128 - rc if rc < 0 else rc


def _launch_torchrun(cfg: DictConfig, run_dir: str, argv: list[str], env: dict[str, str]) -> int:
    port = int(cfg.cluster.master_port) or free_port()
    cmd = torchrun_command(cfg, run_dir, argv, port)
    log.info("starting %d workers: %s", cfg.cluster.nproc, " ".join(cmd))
    return supervise(cmd, env)


def _launch_tc(cfg: DictConfig, run_dir: str, argv: list[str], env: dict[str, str]) -> int:
    """One worker per shaped network namespace (needs root, or re-runs under a user namespace)."""
    from dreamddp import netshape

    if netshape.needs_user_namespace():
        # Become root of a fresh user+net+mount namespace; the launcher there shapes.
        return supervise(netshape.userns_argv(worker_command(argv, run_dir)), env)
    port = int(cfg.cluster.master_port) or 29500  # private namespaces: any port is free
    per_worker = cfg.bandwidth.get("worker_gbps")  # heterogeneous uplinks, validated against nproc
    rates = [float(g) for g in per_worker] if per_worker else float(cfg.bandwidth.gbps)
    net = netshape.ShapedNetwork(int(cfg.cluster.nproc), rates)
    log.info("starting %d workers in shaped namespaces at %s Gbit/s", cfg.cluster.nproc, rates)
    return netshape.launch_shaped(net, lambda rank: worker_command(argv, run_dir), env, port)


def check_launchable(cfg: DictConfig, environ: Optional[dict] = None) -> None:
    """Launcher-only rules (a worker under torchrun/srun does not need them)."""
    env = os.environ if environ is None else environ
    if cfg.cluster.nnodes != 1:
        raise ConfigError(
            f"cluster.nnodes={cfg.cluster.nnodes}: dreamddp-run starts one node; "
            "start multi-node runs with torchrun/srun (slurm/)"
        )
    if cfg.cluster.name == "slurm" and not env.get("SLURM_JOB_ID"):
        raise ConfigError(
            "cluster=slurm: not inside a SLURM job; submit with slurm/ or -m hydra/launcher=submitit_slurm"
        )


def prepare_data(cfg: DictConfig) -> None:
    """Download/cache the dataset once, before N workers would race to do it."""
    from dreamddp.data import prepare

    try:
        prepare(cfg.data.name, cfg.data.root)
    except ValueError as exc:  # DataUnavailable: one line already
        raise ConfigError(f"data={cfg.data.name}: {exc}") from exc


def launch_workers(cfg: DictConfig, run_dir: str, argv: list[str]) -> int:
    """Start cluster.nproc workers running ``dreamddp.cli argv`` in ``run_dir``; wait; exit status.

    On return the run record is closed: if the workers left it missing or
    "running", it is marked failed, and a zero status becomes 1.
    """
    check_launchable(cfg)
    prepare_data(cfg)
    env = worker_environment(cfg)
    if cfg.bandwidth.backend == "tc":
        rc = _launch_tc(cfg, run_dir, argv, env)
    else:
        rc = _launch_torchrun(cfg, run_dir, argv, env)
    try:
        status = load_record(run_dir).get("status")
    except (OSError, ValueError):
        status = None
    if status not in ("completed", "failed"):
        why = f"workers exited with status {rc} without closing the run record"
        mark_failed(run_dir, cfg, why)
        log.error("%s: marked %s failed", why, Path(run_dir) / "run.json")
        rc = rc or 1
    return rc
