"""Run's step API: ``steps()`` trains the same iterations as ``train()``, one per ``next``,
with the link's clock stopped whenever the generator is suspended (in one worker, in process)."""

from __future__ import annotations

import itertools
import os

import pytest
import torch
import torch.distributed as dist

from dist_util import free_port
from dreamddp.run.dist_env import DistContext
from dreamddp.run.recorder import recorder_for
from dreamddp.run.train import Run

TINY = ["model=gpt2", "data=synthetic", "train.batch_size=2", "data.block_size=16", "train.iterations=5",
        "train.progress=false", "train.eval_every=2", "data.eval_batches=1", "cluster.nproc=1",
        "algo=flsgd", "algo.H=2", "bandwidth=1gbit", "warmup.predict_iterations=0"]


@pytest.fixture(scope="module")
def one_worker_group():
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _ready_run(compose_cfg, run_dir) -> Run:
    cfg = compose_cfg(TINY)
    ctx = DistContext(0, 1, 0, torch.device("cpu"), "gloo")
    run = Run(cfg, ctx, str(run_dir), recorder_for(0, cfg, str(run_dir)))
    run.build()
    run.set_up()
    return run


def _clock_log(run: Run) -> list[str]:
    """What happens to ``run`` in order: its iterations, and its link clock's pauses and resumes."""
    log: list[str] = []
    for name in ("pause", "resume"):
        real = getattr(run.comm, name)
        setattr(run.comm, name, lambda real=real, name=name: (log.append(name), real())[1])
    iteration = run._iteration
    run._iteration = lambda t: (log.append(f"iteration {t}"), iteration(t))[1]
    return log


def test_steps_trains_what_train_does_once_and_stops_the_clock_between_them(one_worker_group, compose_cfg, tmp_path):
    whole = _ready_run(compose_cfg, tmp_path / "whole")
    whole_log = _clock_log(whole)
    whole.train()
    whole.finish()
    with pytest.raises(RuntimeError, match="already started"):  # the record, data and optimizer would run twice
        whole.steps()

    stepped = _ready_run(compose_cfg, tmp_path / "stepped")
    log = _clock_log(stepped)
    steps = stepped.steps()
    assert log == ["pause"]  # asked for, not yet advanced: the clock already stands still
    assert list(itertools.islice(steps, 2)) == [0, 1]
    assert log[-1] == "pause"  # suspended after its turn
    assert list(steps) == [2, 3, 4]
    stepped.finish()

    assert "pause" not in whole_log  # dreamddp-run's loop never stops its clock
    # every iteration of the stepped run runs on a running clock, which stops after it
    iterations = [i for i, e in enumerate(log) if e.startswith("iteration")]
    assert [log[i] for i in iterations] == [f"iteration {t}" for t in range(5)]
    assert all(log[i - 1] == "resume" and log[i + 1] == "pause" for i in iterations)

    rows = lambda run: [(r["iteration"], r["loss"]) for r in run.recorder.record.data["iterations"]]  # noqa: E731
    assert rows(stepped) == rows(whole)  # same data, same numerics, same record
    evals = lambda run: run.recorder.record.data["evals"]  # noqa: E731
    assert [e["iteration"] for e in evals(stepped)] == [e["iteration"] for e in evals(whole)] == [1, 3, 4]

