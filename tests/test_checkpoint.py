"""Checkpoints: a resumed run ends bitwise where the uninterrupted run ends.

End to end through dreamddp-run: run A trains 6 iterations saving at steps 3
and 6; run B resumes from A's step 3 and saves at 6.  Every tensor and value
in B's step-6 worker files (parameters, optimizer, LR schedule, algorithm
state, data position, RNG) must equal A's, for algorithms whose state lives in
different places: Streaming DiLoCo (anchor, outer momentum, a 4-bit outer
gradient still unmerged at the save), DeAR (updates pending into the next
forward), DreamDDP with overlap_forward on a calibrated emulated link (a
profiled schedule and link rate that must not be measured again), torch DDP,
and flsgd_timed (a wall-clock window's steps and time, saved mid-window).  Plus
the pieces: the data iterator's position, finding and pruning checkpoints, and
one-line refusals before any worker starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cli_util import dreamddp_run, train_completed
from dreamddp.run.checkpoint import CheckpointError, check_resume, find, save, step_dir
from dreamddp.data.sharding import ShardedBatches

SMALL = ["model=gpt2", "data=synthetic", "train.batch_size=2", "data.block_size=32", "train.iterations=6",
         "train.progress=false", "train.eval_every=0", "data.eval_batches=1", "cluster.nproc=2",
         "train.checkpoint_every=3"]


def _flatten(x, prefix=""):
    if isinstance(x, torch.Tensor):
        yield prefix, x
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from _flatten(v, f"{prefix}.{k}")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            yield from _flatten(v, f"{prefix}[{i}]")
    else:
        yield prefix, x


def _differences(a: Path, b: Path, measured: tuple[str, ...] = ()) -> list[str]:
    """Keys whose values differ, less those ending in one of ``measured`` (wall-clock readings)."""
    A = dict(_flatten(torch.load(a, weights_only=True)))
    B = dict(_flatten(torch.load(b, weights_only=True)))
    if A.keys() != B.keys():
        return sorted(set(A) ^ set(B))
    same = lambda x, y: torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y  # noqa: E731
    return [k for k in A if not same(A[k], B[k]) and not k.endswith(measured)]


def _train(run_dir: Path, *overrides: str) -> dict:
    return train_completed(run_dir, [*SMALL, *overrides])


# The algorithms of earlier waves resume in make test-all; make test keeps this wave's options.
@pytest.mark.parametrize("algo", [
    pytest.param(["algo=streaming_diloco", "algo.H=4", "algo.fragments=2", "algo.tau=1", "algo.compress=e3m0"],
                 marks=pytest.mark.slow),
    pytest.param(["algo=dear", "algo.bucket_mb=0.5"], marks=pytest.mark.slow),
    pytest.param(["algo=dreamddp", "algo.H=3", "algo.overlap_forward=true", "warmup.profile_iterations=2",
                  "bandwidth=ratio7"], marks=pytest.mark.slow),
    pytest.param(["algo=ddp"], marks=pytest.mark.slow),
    # the anchor, the outer optimizer's state and error-feedback residuals (engine/pipeline.py)
    ["algo=dreamddp", "algo.H=3", "algo.compress=topk", "algo.compress_ratio=0.1", "algo.outer_optimizer=nesterov",
     "warmup.profile_iterations=2", "bandwidth=ratio7"],
    # a recipe with its outer step in flight at the save (eager: the sent change kept too)
    ["algo=diloco_eager", "algo.H=2"],
    # a wall-clock window too short for a second step: iterations 1, 2 and 5 idle, the save at
    # step 3 mid-window (its steps and elapsed time kept; the elapsed seconds are a measurement)
    ["algo=flsgd_timed", "algo.H=4", "algo.window_s=1e-6"],
], ids=["streaming_diloco", "dear", "dreamddp_overlap", "ddp", "dreamddp_topk_nesterov", "diloco_eager",
          "flsgd_timed"])
def test_resumed_run_ends_where_the_uninterrupted_one_does(tmp_path, algo):
    a = _train(tmp_path / "a", *algo)
    assert [c["step"] for c in a["extra"]["checkpoints"]] == [3, 6]
    b = _train(tmp_path / "b", *algo, f"train.resume={tmp_path / 'a'}/checkpoints/step-0000003")
    timed = "algo=flsgd_timed" in algo
    assert [r["iteration"] for r in b["iterations"]] == ([3, 4] if timed else [3, 4, 5])
    if timed:
        assert [r["iteration"] for r in a["iterations"]] == [0, 3, 4]
        assert a["iterations"][1]["window_steps"] == b["iterations"][0]["window_steps"] == [2, 2]
    assert b["extra"]["resumed_from"]["step"] == 3
    if "algo=dreamddp" in algo:  # the saved schedule and link rate, not new measurements
        assert b["extra"]["schedule"]["schedule"] == a["extra"]["schedule"]["schedule"]
        assert "link_calibration" not in b["extra"] and b["extra"]["link"]["gbps"] == a["extra"]["link"]["gbps"]
        # and it predicts its iterations from the profile A measured, as A did
        assert b["extra"]["profile"]["measured_in"] == str(tmp_path / "a")
        assert b["summary"]["predicted"]["mean_iteration_time"] == a["summary"]["predicted"]["mean_iteration_time"]
        assert "error" in b["summary"]["predicted"]
    for rank in (0, 1):
        name = f"rank{rank:05d}.pt"
        diff = _differences(step_dir(tmp_path / "a", 6) / name, step_dir(tmp_path / "b", 6) / name, ("elapsed_s",))
        assert diff == [], f"rank {rank}: {diff[:8]}"


def test_cli_refuses_a_mismatched_checkpoint_before_any_worker(tmp_path):
    save(str(tmp_path / "a"), 3, 0, {}, {**_fake_run(), "world_size": 2, "algo.name": "dear"}, keep=0)
    out = dreamddp_run([*SMALL, "algo=ssgd", f"train.resume={tmp_path / 'a'}", f"hydra.run.dir={tmp_path / 'c'}"],
                       timeout=120)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "train.resume=" in out.stderr and "saved with algo.name=dear, this run has algo.name=ssgd" in out.stderr
    assert not (tmp_path / "c").exists()


def test_data_position_round_trips_across_an_epoch_boundary():
    def make(idx, gen):  # augmentation draws from the epoch generator, as random crops do
        return idx.clone(), torch.rand(2, generator=gen)

    def batches(it, n):
        return [next(it) for _ in range(n)]

    kw = dict(rank=1, world_size=2, seed=7, batch_size=3, make_batch=make)
    it = ShardedBatches(40, **kw)  # 20 samples per shard: 6 batches per epoch
    batches(it, 5)
    state = it.state_dict()
    expected = batches(it, 9)  # crosses into epoch 2
    fresh = ShardedBatches(40, **kw)
    fresh.load_state_dict(state)
    got = batches(fresh, 9)
    assert all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(got, expected))
    untouched = ShardedBatches(40, **kw)  # a state taken before the first batch restores too
    s0 = untouched.state_dict()
    again = ShardedBatches(40, **kw)
    again.load_state_dict(s0)
    assert all(torch.equal(x[0], y[0]) for x, y in zip(batches(again, 7), batches(ShardedBatches(40, **kw), 7)))


def _fake_run() -> dict:  # describe_run() of SMALL + algo=ssgd on one worker
    return {"model.name": "gpt2", "model.size": "tiny", "algo.name": "ssgd", "data.name": "synthetic",
            "seed": 0, "train.batch_size": 2, "world_size": 1}


def test_find_takes_newest_complete_and_save_prunes(tmp_path):
    for step in (2, 4, 6):
        save(str(tmp_path), step, 0, {"x": torch.tensor([step])}, _fake_run(), keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-0000004", "step-0000006"]  # keep=2 pruned step 2
    step_dir(tmp_path, 8).mkdir()  # a save that never completed (no meta.json)
    (step_dir(tmp_path, 8) / "rank00000.pt").write_bytes(b"")
    assert find(tmp_path) == find(tmp_path / "checkpoints") == step_dir(tmp_path, 6)
    assert find(step_dir(tmp_path, 4)) == step_dir(tmp_path, 4)
    with pytest.raises(CheckpointError, match=r"^train.resume=.*: no complete checkpoint"):
        find(tmp_path / "nothing")


@pytest.mark.parametrize("overrides, match", [
    (["seed=1"], r"saved with seed=0, this run has seed=1"),
    (["train.batch_size=4"], r"saved with train.batch_size=2"),
    (["cluster.nproc=2"], r"saved with world_size=1, this run has world_size=2"),
    (["train.iterations=6"], r"checkpoint is at step 6, nothing left of train.iterations=6"),
])
def test_resume_refuses_what_the_checkpoint_cannot_continue(tmp_path, compose_cfg, overrides, match):
    save(str(tmp_path), 6, 0, {}, _fake_run(), keep=0)
    base = ["model=gpt2", "data=synthetic", "algo=ssgd", "train.batch_size=2", "cluster.nproc=1",
            "train.iterations=10", f"train.resume={tmp_path}"]
    cfg = compose_cfg(base)
    assert check_resume(cfg, 1) == (step_dir(tmp_path, 6), 6)
    cfg = compose_cfg(base + overrides)
    with pytest.raises(CheckpointError, match=match):
        check_resume(cfg, cfg.cluster.nproc)
