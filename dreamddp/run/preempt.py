"""Checkpoint-and-stop on request, so that a preempted or time-limited job keeps its work.

With ``cluster.preemptible=true`` a request is SIGUSR1 to a worker, or the file
``<run dir>/checkpoint-request``, which dreamddp-run writes when it receives SIGUSR1
and slurm/dreamddp.sbatch writes when SLURM signals the batch shell ahead of the
time limit or a preemption (``--signal=B:USR1@...``).  Ranks may notice a request
at different iterations, so after every iteration the workers agree on it with a
one-element all-reduce (MAX), outside the timed part of the iteration and in a
gloo group of its own, so that it never waits behind the training's collectives
still in flight (overlapped averages, DeAR's all-gathers); all ranks then save a
checkpoint at the same step and stop.  The run record says
"preempted", dreamddp-run exits with :data:`EXIT_PREEMPTED`, and a requeued job
(same run directory, ``SLURM_RESTART_COUNT`` > 0) resumes from that checkpoint
(dreamddp.run.checkpoint.auto_resume).  Without the setting nothing is installed and
no collective is added.
"""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from pathlib import Path

REQUEST_FILE = "checkpoint-request"
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: stopped on request, checkpoint saved; requeue to continue
SIGNAL = signal.SIGUSR1


class Preempted(Exception):
    """The group agreed to stop after saving the checkpoint at ``step``."""

    def __init__(self, step: int):
        super().__init__(f"preempted: checkpoint saved at step {step}; a requeued job resumes from it")
        self.step = step


class _State:
    enabled = False
    signalled = False
    run_dir: Path | None = None
    rank = 0
    group = None  # the agreement's own process group (None: a single process)


def request_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / REQUEST_FILE


def request(run_dir: str | os.PathLike) -> None:
    """Launcher side: ask the workers of ``run_dir`` to checkpoint and stop (safe in a signal handler)."""
    path = request_path(run_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError:
        pass


def install(enabled: bool, run_dir: str, rank: int, timeout_s: float) -> None:
    """Worker side, before training, on every rank: SIGUSR1 sets the local flag; rank 0 also
    watches the file.  Creates the agreement's process group (a collective) when enabled."""
    _State.enabled, _State.signalled = bool(enabled), False
    _State.run_dir, _State.rank, _State.group = Path(run_dir), rank, None
    if not enabled:
        return
    signal.signal(SIGNAL, _on_signal)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        _State.group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))


def _on_signal(_signum, _frame) -> None:
    _State.signalled = True


def requested() -> bool:
    """Whether any rank was asked to stop (a collective: every rank calls it at the same iteration)."""
    if not _State.enabled:
        return False
    import torch
    import torch.distributed as dist

    local = _State.signalled or (_State.rank == 0 and request_path(_State.run_dir).exists())
    if _State.group is None:
        return local
    flag = torch.tensor([1 if local else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=_State.group)
    return bool(flag.item())


def consume(run_dir: str | os.PathLike) -> None:
    """The request is served (rank 0, after the checkpoint): a requeued job must not stop at once."""
    request_path(run_dir).unlink(missing_ok=True)
