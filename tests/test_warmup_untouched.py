"""Training after the warm-up passes, end to end through dreamddp-run: it starts on the batches and
random draws it would have had without them, and its recorded divergence is the replicas'."""

from __future__ import annotations

import pytest
from cli_util import train_completed

SMALL = ["model=gpt2", "data=synthetic", "train.batch_size=2", "data.block_size=32", "train.iterations=6",
         "train.progress=false", "train.eval_every=0", "data.eval_batches=1", "cluster.nproc=2", "seed=3",
         "train.divergence_every=1", "bandwidth=ideal"]


@pytest.mark.slow  # two full runs per setting; make test-all
def test_warmup_leaves_the_data_order_and_overlap_forward_divergence_is_measured_landed(tmp_path):
    """DreamDDP profiles (warm-up passes over training batches, GPT-2's dropout drawing); S-SGD and a run on
    DreamDDP's schedule file warm up not at all.  All three take the same first batch with the
    same parameters and dropout draws, so their first losses agree bit for bit.  overlap_forward
    on that schedule trains to plain DreamDDP's numbers, so the divergence it records, measured
    after its in-flight averages land, is DreamDDP's at every iteration."""
    plain = train_completed(tmp_path / "plain", [*SMALL, "algo=dreamddp", "algo.H=3", "warmup.profile_iterations=2"])
    schedule = f"algo.schedule={tmp_path / 'plain' / 'schedule.json'}"
    overlap = train_completed(tmp_path / "overlap", [*SMALL, "algo=dreamddp", "algo.H=3", schedule,
                                                     "algo.overlap_forward=true"])
    ssgd = train_completed(tmp_path / "ssgd", [*SMALL, "algo=ssgd"])
    first = [run["iterations"][0]["loss"] for run in (plain, overlap, ssgd)]
    assert first[0] == first[1] == first[2], first
    assert [r["loss"] for r in overlap["iterations"]] == [r["loss"] for r in plain["iterations"]]
    # GPT-2 clips (train.grad_clip=1.0): every row records the norm before clipping
    assert [r["grad_norm"] for r in overlap["iterations"]] == [r["grad_norm"] for r in plain["iterations"]]
    assert all(r["grad_norm"] > 0 for run in (plain, ssgd) for r in run["iterations"])
    assert len(plain["divergence"]) == 6 and overlap["divergence"] == plain["divergence"]
