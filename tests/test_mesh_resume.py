"""Replicas x shards through dreamddp-run: a resumed run ends bitwise where the
uninterrupted one does (tests/test_checkpoint.py's oracle on a 2 x 2 mesh).

Run A trains 6 iterations of a tiny GPT-2 on 4 workers (cluster.shards=2: FSDP2 inside
each of 2 replicas) with DiLoCo (an outer Nesterov step, its momentum and anchor in the
algorithm's state; the inner optimizer's Adam moments are DTensors), saving at steps 3
and 6; run B resumes from A's step 3.  Every tensor of B's step-6 worker files (local
shards of parameters and moments, algorithm state, data position, RNG) equals A's.
"""

from __future__ import annotations

import pytest

from cli_util import dreamddp_run, train_completed
from dreamddp.run.checkpoint import CheckpointError, check_resume, save, step_dir
from test_checkpoint import SMALL, _differences, _fake_run

MESH = [*SMALL, "cluster.nproc=4", "cluster.shards=2", "algo=diloco", "algo.H=2"]


def test_resumed_sharded_run_ends_where_the_uninterrupted_one_does(tmp_path):
    a = train_completed(tmp_path / "a", MESH)
    assert [c["step"] for c in a["extra"]["checkpoints"]] == [3, 6]
    b = train_completed(tmp_path / "b", [*MESH, f"train.resume={tmp_path / 'a'}/checkpoints/step-0000003"])
    assert [r["iteration"] for r in b["iterations"]] == [3, 4, 5]
    for rank in range(4):
        name = f"rank{rank:05d}.pt"
        diff = _differences(step_dir(tmp_path / "a", 6) / name, step_dir(tmp_path / "b", 6) / name)
        assert diff == [], f"rank {rank}: {diff[:8]}"


def test_cli_refuses_a_mesh_that_does_not_tile_the_world_before_any_worker(tmp_path):
    for overrides, field in ((["cluster.shards=3"], "cluster.shards=3"),
                             (["cluster.shards=2", "cluster.replicas=1"], "cluster.replicas=1"),
                             (["cluster.shards=0"], "cluster.shards=0"),
                             (["cluster.shards=2", "algo=dear"], "algo=dear")):
        out = dreamddp_run([*SMALL, "cluster.nproc=4", *overrides, f"hydra.run.dir={tmp_path / 'x'}"])
        assert out.returncode != 0
        assert field in out.stderr.strip().splitlines()[-1], out.stderr[-500:]
        assert not (tmp_path / "x" / "run.json").exists()


def test_resume_refuses_a_checkpoint_of_another_mesh(tmp_path, compose_cfg):
    for rank in (3, 2, 1, 0):  # rank 0 last: it marks the checkpoint complete
        save(str(tmp_path), 3, rank, {}, {**_fake_run(), "world_size": 4, "cluster.shards": 2}, keep=0)
    base = ["model=gpt2", "data=synthetic", "algo=ssgd", "train.batch_size=2", "cluster.nproc=4",
            "train.iterations=10", f"train.resume={tmp_path}"]
    assert check_resume(compose_cfg([*base, "cluster.shards=2"]), 4)[1] == 3
    with pytest.raises(CheckpointError, match="cluster.shards=2, this run has cluster.shards=1"):
        check_resume(compose_cfg(base), 4)
