"""Multi-worker gloo tests of the engine's algorithms against torch's own code."""

from __future__ import annotations


import pytest
import torch
import torch.distributed as dist
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
from torch.distributed.optim import PostLocalSGDOptimizer

from dist_util import run_workers
from dreamddp.comm.communicator import Communicator
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.units import enumerate_units
from engine_fixtures import batch, build, engine_step, loss_of, small_model

STEPS = 7


def _train_engine(rank, name, opt_name="sgd", steps=STEPS, on_before_step=None, norms=None, **kw):
    model = small_model()
    clip = 1.0 if opt_name == "adam" else 0.0
    engine = PartialSyncEngine(model, enumerate_units(model), Communicator(), build(name, **kw), grad_clip=clip)
    opt = _opt(opt_name, model)
    for t in range(steps):
        stats = engine_step(engine, model, opt, t, rank,
                            before_step=(lambda: on_before_step(engine, t)) if on_before_step else None)
        if norms is not None:
            norms.append(stats.grad_norm)
    engine.close()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


def _opt(name, model):
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=0.01)
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def _ssgd_vs_ddp(rank, world, opt_name):
    norms, ref_norms = [], []
    ours = _train_engine(rank, "ssgd", opt_name, norms=norms)
    ref = torch.nn.parallel.DistributedDataParallel(small_model())
    opt = _opt(opt_name, ref)
    for t in range(STEPS):
        opt.zero_grad()
        loss_of(ref, batch(rank, t)).backward()
        if opt_name == "adam":
            ref_norms.append(torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0))
        opt.step()
    return ours, torch.nn.utils.parameters_to_vector(ref.parameters()).detach(), norms, ref_norms


@pytest.mark.parametrize("world, opt_name", [(2, "sgd"), (4, "adam")])
def test_ssgd_equals_torch_ddp(world, opt_name):
    """Same parameters as torch DDP; with clipping, the norm each step reports (the one the run
    records as grad_norm) is the one torch's clip_grad_norm_ returns."""
    for ours, ref, norms, ref_norms in run_workers(_ssgd_vs_ddp, world, opt_name):
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
        if opt_name == "adam":
            torch.testing.assert_close(torch.stack(norms), torch.stack(ref_norms), rtol=1e-5, atol=1e-6)
        else:
            assert norms == [None] * STEPS


def _flsgd_vs_torch(rank, world, H):
    ours = _train_engine(rank, "flsgd", H=H)
    ref_model = small_model()
    opt = PostLocalSGDOptimizer(_opt("sgd", ref_model), PeriodicModelAverager(period=H, warmup_steps=H - 1))
    averaged = small_model()
    avg_opt = _opt("sgd", averaged)
    averager = PeriodicModelAverager(period=H, warmup_steps=H - 1)
    for t in range(STEPS):
        for m, o in ((ref_model, opt), (averaged, avg_opt)):
            o.zero_grad()
            loss_of(m, batch(rank, t)).backward()
            o.step()
        averager.average_parameters(averaged.parameters())
    vec = torch.nn.utils.parameters_to_vector
    return ours, vec(ref_model.parameters()).detach(), vec(averaged.parameters()).detach()


@pytest.mark.parametrize("world, H", [(2, 3), (4, 2)])
def test_flsgd_equals_torch_model_averagers(world, H):
    results = run_workers(_flsgd_vs_torch, world, H)
    for ours, post_local, periodic in results:
        torch.testing.assert_close(ours, post_local, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(ours, periodic, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(results[0][0], results[1][0])  # replicas differ between averages


def _ascwfbp_vs_ssgd(rank, world):
    return _train_engine(rank, "ascwfbp", bucket_mb=1048 / 2**20), _train_engine(rank, "ssgd")


def test_ascwfbp_equals_ssgd():
    for bucketed, plain in run_workers(_ascwfbp_vs_ssgd, 2):
        torch.testing.assert_close(bucketed, plain, rtol=1e-5, atol=1e-6)


def _partial_sync_consistency(rank, world, name, kw):
    snapshots = []

    def check(engine, t):
        synced = sorted({u for op in engine.plan for u in op.units})
        mine = torch.cat([engine.flat.param_slice(u, u) for u in synced]) if synced else torch.zeros(0)
        gathered = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(gathered, mine)
        snapshots.append((t, synced, all(torch.equal(g, mine) for g in gathered)))

    final = _train_engine(rank, name, on_before_step=check, steps=6, **kw)
    return snapshots, final


@pytest.mark.parametrize(
    "name, kw, extra_syncs",
    [
        ("plsgd_enp", {"H": 3}, {}),
        ("dreamddp", {"H": 2, "sched": {"4": [0, 1], "3": [0], "2": [1], "0": [1]}}, {0: 2}),
        # A general schedule: iteration 0 syncs units 0, 1 and 3 (not contiguous) as two
        # collectives, the run 0-1 in one; iteration 1 syncs unit 2.
        ("dreamddp", {"H": 2, "sched": {"4": [0], "3": [0], "2": [1], "0": [0]},
                      "collectives": [[("4", "3"), ("0", "0")], [("2", "2")]]}, {}),
        # the outer optimizer and compression (outer.py): the anchors every rank steps agree
        ("plsgd_enp", {"H": 3, "outer_optimizer": "nesterov"}, {}),
        ("plsgd_enp", {"H": 3, "compress": "topk", "compress_ratio": 0.1}, {}),
        ("dreamddp", {"H": 2, "sched": {"4": [0], "3": [0], "2": [1], "0": [1]}, "compress": "quant",
                      "compress_bits": 4, "outer_optimizer": "nesterov"}, {}),
    ],
    ids=["plsgd_enp", "dreamddp", "dreamddp-general", "plsgd_enp-nesterov", "plsgd_enp-topk", "dreamddp-quant-nesterov"],
)
def test_partial_sync_units_bitwise_equal_after_sync_and_each_once_per_window(name, kw, extra_syncs):
    results = run_workers(_partial_sync_consistency, 2, name, kw)
    snapshots, finals = zip(*results)
    H = kw["H"]
    for rank_snaps in snapshots:
        per_window = {}
        for t, synced, equal in rank_snaps:
            assert equal, f"iteration {t}: synced units differ across replicas before the local step"
            for u in synced:
                per_window.setdefault(t // H, {}).setdefault(u, 0)
                per_window[t // H][u] += 1
        for counts in per_window.values():
            assert sorted(counts) == [0, 1, 2, 3]  # every unit synced in every window
            extra = {u: c for u, c in counts.items() if c != 1}
            assert extra == extra_syncs
    assert not torch.equal(finals[0], finals[1])  # the local step after the average: replicas differ


def _ddp_bucket_counts(rank, world, one_bucket_mb):
    """How many buckets DDP all-reduced per iteration (torch's own logging data), built by our
    ddp algorithm with torch's default cap and with one above the model's size."""
    from types import SimpleNamespace

    from dreamddp.algorithms.ddp import DDP

    counts = []
    for cap in (None, float(one_bucket_mb)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(*(torch.nn.Linear(512, 512) for _ in range(3)))  # 3 MiB: above the 1 MiB first bucket
        cfg = DDP.Config(name="ddp", bucket_cap_mb=cap)
        _, ddp = DDP.make_engine(model, enumerate_units(model), None, SimpleNamespace(device=torch.device("cpu")),
                                 sample_every=1, cfg=cfg)
        for t in range(3):  # DDP rebuilds its buckets after the first iteration
            ddp(torch.randn(4, 512, generator=torch.Generator().manual_seed(1000 * rank + t))).sum().backward()
        counts.append(ddp._get_ddp_logging_data()["num_buckets_reduced"])
    return counts


def test_ddp_bucket_cap_above_the_model_gives_one_bucket():
    """algo.bucket_cap_mb reaches DDP: torch's default splits a 3 MiB model (first bucket 1 MiB),
    the benchmark's ddp+1bucket cap makes one bucket, all-reduced after backward as S-SGD's one all-reduce."""
    from dreamddp.bench.segments import ONE_BUCKET_MB

    for counts in run_workers(_ddp_bucket_counts, 2, ONE_BUCKET_MB):
        assert counts == [2, 1]


def _compressed_gradients(rank, world, name, kw):
    return _train_engine(rank, name, **kw), _train_engine(rank, name, compress="none")


@pytest.mark.parametrize("name, kw", [("ssgd", {"compress": "topk", "compress_ratio": 0.05}),
                                      ("ascwfbp", {"compress": "quant", "compress_bits": 4, "bucket_mb": 0.001}),
                                      ("ssgd", {"compress": "quant", "compress_bits": 8, "error_feedback": False})])
def test_compressed_gradients_keep_the_replicas_bitwise_equal(name, kw):
    """Every rank sums every rank's decoded payload in rank order: the same mean everywhere, so
    the replicas never drift; and the compression changes the trajectory (it is not a no-op)."""
    (a, plain_a), (b, plain_b) = run_workers(_compressed_gradients, 2, name, kw)
    assert torch.equal(a, b) and torch.equal(plain_a, plain_b)
    assert not torch.equal(a, plain_a)


def _timed_window(rank, world):
    """flsgd_timed on gloo, each rank's window clock injected: rank r spends r + 1 seconds a step."""
    from dreamddp.algorithms.flsgd_timed import FLSGDTimed
    from engine_fixtures import algo_cfg

    clock = [0.0]
    model = small_model()
    algo = FLSGDTimed(algo_cfg("flsgd_timed", H=8, window_s=4.0), clock=lambda: clock[0])
    engine = PartialSyncEngine(model, enumerate_units(model), Communicator(), algo)
    opt = _opt("sgd", model)
    computed, merges = [], []
    for t in range(16):
        if not algo.window.steps_at(t):
            continue
        engine.begin_iteration(t)
        loss_of(model, batch(rank, len(computed))).backward()
        engine.end_backward()
        engine.step(opt)
        if (t + 1) % 8 == 0:  # every replica before the merge, and its weight
            mine = engine.flat.params.clone()
            gathered = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(gathered, mine)
        engine.after_step()
        clock[0] += rank + 1.0
        computed.append(t)
        if record := algo.iteration_record():
            merges.append((gathered, record["window_steps"], engine.flat.params.clone()))
    engine.close()
    return computed, merges


def test_timed_windows_merge_the_replicas_weighted_by_their_steps():
    """Rank 0 takes 4 steps per 4 s window, rank 1 two: after each merge both hold (4 theta_0 +
    2 theta_1) / 6, bitwise the same."""
    (computed0, merges0), (computed1, merges1) = run_workers(_timed_window, 2)
    assert computed0 == [0, 1, 2, 7, 8, 9, 10, 15] and computed1 == [0, 7, 8, 15]
    for (before, steps, after0), (_, steps1, after1) in zip(merges0, merges1):
        assert steps == steps1 == [4, 2]
        assert torch.equal(after0, after1)
        torch.testing.assert_close(after0, (4 * before[0] + 2 * before[1]) / 6, rtol=1e-6, atol=1e-7)
    assert len(merges0) == 2
