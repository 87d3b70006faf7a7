"""Unequal workers (dreamddp/speed.py): each worker's speed per iteration, drawn from (seed, rank,
block) alone; the wait that makes a pass that slow; and a run that records both."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from cli_util import train_completed
from dreamddp.speed import Speeds, stretch


def spells(p=0.3, lo=0.2, hi=0.6, length=1, seed=7, worker=()):
    return Speeds(tuple(worker), p, lo, hi, length, seed)


def test_no_settings_is_full_speed_everywhere():
    s = Speeds()
    assert s.uniform and all(s.of(r, t) == 1.0 for r in range(4) for t in range(50))


def test_a_worker_speed_scales_every_iteration_of_that_worker():
    s = Speeds((1.0, 0.5))
    assert not s.uniform
    assert [s.of(0, t) for t in range(3)] == [1.0] * 3 and [s.of(1, t) for t in range(3)] == [0.5] * 3


def test_spells_are_a_function_of_seed_rank_and_block_only():
    a, b = spells(), spells()
    draws = [a.of(r, t) for r in range(3) for t in range(200)]
    assert draws == [b.of(r, t) for r in range(3) for t in range(200)]  # a resumed run draws the same
    assert [a.of(1, t) for t in range(150, 200)] == draws[200 + 150:400]  # whatever was drawn before
    assert draws[:200] != draws[200:400]  # the ranks' spells are their own
    assert draws != [spells(seed=8).of(r, t) for r in range(3) for t in range(200)]


def test_spells_come_with_probability_p_at_a_factor_in_range():
    s = spells(p=0.3, lo=0.2, hi=0.6)
    draws = [s.of(0, t) for t in range(20000)]
    slowed = [d for d in draws if d != 1.0]
    assert 0.28 < len(slowed) / len(draws) < 0.32
    assert min(slowed) >= 0.2 and max(slowed) <= 0.6 and max(slowed) - min(slowed) > 0.35


def test_a_spell_lasts_its_length_and_multiplies_the_worker_speed():
    s = spells(p=0.5, length=4, worker=(0.5,))
    draws = [s.of(0, t) for t in range(400)]
    assert all(len(set(draws[k:k + 4])) == 1 for k in range(0, 400, 4))
    assert {d for d in draws if d != 0.5} and max(draws) == 0.5  # 0.5 x a spell's factor, or 0.5


def test_stretch_waits_what_the_speed_adds():
    t0 = time.perf_counter()
    assert stretch(0.02, 0.5) == pytest.approx(0.02)
    assert time.perf_counter() - t0 >= 0.02
    assert stretch(0.02, 1.0) == 0.0


def test_from_config_reads_the_cluster_fields():
    cluster = SimpleNamespace(worker_speed=[1, 0.25], slow_spell=SimpleNamespace(p=0.1, speed_min=0.3, speed_max=0.9,
                                                                                length=5, seed=3))
    assert Speeds.from_config(cluster) == Speeds((1.0, 0.25), 0.1, 0.3, 0.9, 5, 3)


SMALL = ["model=gpt2", "data=synthetic", "train.batch_size=2", "data.block_size=32", "train.iterations=6",
         "train.progress=false", "train.eval_every=0", "data.eval_batches=1", "cluster.nproc=2",
         "warmup.predict_iterations=0"]


def test_a_slow_worker_waits_out_its_speed_and_the_record_says_so(tmp_path):
    record = train_completed(tmp_path / "run", [*SMALL, "cluster.worker_speed=[0.5,1]"])
    assert record["extra"]["speeds"]["worker_speed"] == [0.5, 1.0]
    assert record["config"]["cluster"]["worker_speed"] == [0.5, 1.0]
    for row in record["iterations"]:  # rank 0's rows: half speed, so half of each pass is the wait
        assert row["speed"] == 0.5
        assert 0 < row["stretched"] <= 0.5 * (row["forward"] + row["backward"])


def test_a_run_records_mapping_gives_the_same_speeds_and_an_older_one_full_speed():
    cluster = {"worker_speed": [1, 0.25], "slow_spell": {"p": 0.1, "speed_min": 0.3, "speed_max": 0.9, "length": 5,
                                                         "seed": 3}}
    assert Speeds.from_config(cluster) == Speeds((1.0, 0.25), 0.1, 0.3, 0.9, 5, 3)
    assert Speeds.from_config({}) == Speeds() and Speeds.from_config({}).uniform
