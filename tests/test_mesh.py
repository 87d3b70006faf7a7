"""Replicas x shards: partial sync on FSDP2's local shards, against code nobody here wrote.

One group of 4 gloo workers (one spawn for the module) runs every scenario on a tiny
GPT-2 (vocabulary 128, 16 tokens) and a tiny Llama, each worker on its own data:

- S=1 on the mesh path == the unsharded algorithm (group=None), bitwise: the mesh's
  replicate group is then every rank, and the same all-reduces run on the same bytes;
- R=1 (4 shards) == plain FSDP2 training (fully_shard per unit and root + the optimizer,
  no dreamddp), bitwise: the engine only moves the local shards into its flat buffer,
  and FSDP's reduce-scatter accumulates into a zeroed gradient (0 + g = g);
- FLSGD, PLSGD-ENP, DiLoCo (and its eager variant) and Streaming DiLoCo on 2 x 2 (a
  tiny Llama: no dropout) == the same algorithm unsharded on 2 replicas, each taking its
  two shards' micro-batches as one batch, to float tolerance (FSDP's reduce-scatter
  averages the shards' gradients: the whole batch's gradient, summed in another order);
- S-SGD on 2 x 2 == torch's HSDP (fully_shard on the 2-D mesh) to float tolerance: HSDP
  reduce-scatters and all-reduces in one pre-divided sum, ours averages the reduce-scatter
  output over replicas afterwards, so the float sums are ordered differently;
- FLSGD, DiLoCo, SparseLoCo and DES-LOC on 2 x 2: the replicas' shards agree bitwise after
  every full window; DreamDDP and its DiLoCo and SparseLoCo recipes (which apply the local
  gradient after the average or outer step) on the units each iteration synced, right
  before its local step;
- ASCWFBP on 2 x 2 == HSDP; one rank holds its share of the parameters and Adam's state;
  DreamDDP allocates no copy of the local shards; its profile sees each unit's shard bytes
  over the 2 replicas; wrap refuses what cannot run on shards, in one line.
"""

from __future__ import annotations

import pytest
import torch

from dist_util import run_workers

VOCAB, TOKENS, STEPS = 128, 16, 4


def _model(name: str):
    from dreamddp.models import build_model

    torch.manual_seed(0)
    return build_model(name, "tiny", vocab_size=VOCAB)


def _batch(source: int, t: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * t + source)
    return torch.randint(0, VOCAB, (2, TOKENS), generator=g)


def _loss(model, x):
    return model(input_ids=x, labels=x).loss


def _full(model) -> dict:
    return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
            for n, p in model.named_parameters()}


def _local(model) -> torch.Tensor:
    from dreamddp.engine.mesh import local_tensor

    return torch.cat([local_tensor(p.detach()).reshape(-1) for p in model.parameters()])


def _agree(x: torch.Tensor, group) -> bool:
    """Whether ``x`` is bitwise the same on every rank of ``group`` (a collective)."""
    import torch.distributed as dist

    top = x.clone()
    dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
    low = x.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN, group=group)
    return bool(torch.equal(top, x) and torch.equal(low, x))


def _train_wrapped(rank, name, algo, R, S, *, mesh_path=True, H=2, steps=STEPS, check=None, group=None,
                   batch=_batch, optimizer=torch.optim.SGD, **options):
    """``algo`` through dreamddp.wrap on R x S (group=None when not ``mesh_path``); returns the
    full parameters and, with ``check``, whether the replicas' shards agreed: "window" after
    each full window, "synced" each iteration on the units synced before its local step."""
    import dreamddp
    from dreamddp.config.schema import WarmupConfig
    from dreamddp.engine.mesh import replicate_group
    from dreamddp.engine.plan import Payload, When

    mesh = dreamddp.mesh(R, S) if mesh_path else None
    model = _model(name)
    if mesh is not None:
        dreamddp.shard(model, mesh)
    opt = optimizer(model.parameters(), lr=0.1 if optimizer is torch.optim.SGD else 1e-3)
    cfg = dreamddp.algo_config(algo) if algo == "ssgd" else dreamddp.algo_config(algo, H=H, **options)
    probes = iter(range(10_000))
    sync = dreamddp.wrap(model, opt, cfg, group=mesh if mesh is not None else group, loss_fn=lambda: _loss(model, _batch(99, next(probes))),
                         warmup=WarmupConfig(profile_iterations=1, predict_iterations=0))
    agree = []
    if check == "synced":  # the averages land before the local step: look at them there
        step = opt.step

        def checked_step(*a, **k):
            flat = sync.engine.flat
            for op in sync.engine.plan:
                # averaged parameters, or an outer step on the averaged change: landed in place
                if op.payload in (Payload.PARAM, Payload.OUTER) and op.complete is When.END_OF_BACKWARD and not op.lag:
                    agree.append(_agree(flat.param_slice(op.first, op.last), replicate_group(mesh)))
            return step(*a, **k)
        opt.step = checked_step
    for t in range(steps):
        sync.begin()
        _loss(model, batch(rank, t)).backward()
        sync.step()
        if check == "window" and (t + 1) % H == 0:
            sync.flush()
            agree.append(_agree(_local(model), replicate_group(mesh)))
    sync.close()
    if check == "window":  # the library's own check agrees with ours after the last full window
        agree.append(dreamddp.replica_difference(model, mesh) == 0.0)
    seen = {"profile": sync.profile and dict(sync.profile.nbytes), "world": sync.engine.layout.world}
    return _full(model), agree, seen


def _allocated(rank, algo, R=2, S=2, steps=3):
    """Bytes torch allocates on this rank during the last iteration (forward, backward, sync,
    step) under ``algo`` on R x S, and this rank's flat buffer bytes (its local shards)."""
    import dreamddp
    from dreamddp.config.schema import WarmupConfig

    mesh = dreamddp.mesh(R, S)
    model = dreamddp.shard(_model("gpt2"), mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # stateless: no optimizer buffers
    probes = iter(range(10_000))
    sync = dreamddp.wrap(model, opt, dreamddp.algo_config(algo, H=2), group=mesh,
                         loss_fn=lambda: _loss(model, _batch(99, next(probes))),
                         warmup=WarmupConfig(profile_iterations=1, predict_iterations=0))
    for t in range(steps):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
            sync.begin()
            _loss(model, _batch(rank, t)).backward()
            sync.step()
    synced = sum(1 for op in sync.engine.plan)  # the profiled iteration did sync
    sync.close()
    records = prof.profiler.kineto_results.events()  # each allocation once (tests/test_engine_memory.py)
    used = sum(r.nbytes() for r in records if r.name() == "[memory]" and r.nbytes() > 0)
    return used, sync.engine.flat.params.numel() * 4, synced


def _train_fsdp(rank, name, S, *, hsdp_R=None, steps=STEPS):
    """The references: plain FSDP2 over all ranks (R=1), or HSDP on hsdp_R x S."""
    import dreamddp
    from dreamddp.engine.mesh import hsdp, shard_model

    model = _model(name)
    if hsdp_R is None:
        shard_model(model, dreamddp.mesh(1, S))
    else:
        hsdp(model, dreamddp.mesh(hsdp_R, S))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for t in range(steps):
        opt.zero_grad()
        _loss(model, _batch(rank, t)).backward()
        opt.step()
    return _full(model)


def _replica_batch(rank, t):
    """The unsharded reference's batch: its replica's two shards' micro-batches in one."""
    rep = rank // 2
    return torch.cat([_batch(2 * rep, t), _batch(2 * rep + 1, t)])


# The parameter-averaging algorithms and recipes whose arithmetic does not depend on where
# the shards cut the model: compared with their unsharded runs.  DreamDDP's plan comes from a
# timed profile (its runs differ by what each measured), SparseLoCo picks top-k per 4096-element
# chunk of the flat buffer (of local shards here), and DES-LOC's Adam turns a float-noise
# gradient into a step of lr: those three are checked by the replicas' agreement instead.
ON_SHARDS = {"flsgd": torch.optim.SGD, "plsgd_enp": torch.optim.SGD, "diloco": torch.optim.SGD,
             "diloco_eager": torch.optim.SGD, "streaming_diloco": torch.optim.SGD}


def _sharded_vs_whole(rank, algo):
    """``algo`` on 2 x 2 (each shard its own micro-batch), and unsharded on 2 replicas each
    taking its two shards' micro-batches at once (ranks {0, 2} and {1, 3}: two copies)."""
    import torch.distributed as dist

    sharded = _train_wrapped(rank, "llama2", algo, 2, 2, H=2, optimizer=ON_SHARDS[algo])[0]
    mine, _ = dist.new_subgroups_by_enumeration([[0, 2], [1, 3]])
    whole = _train_wrapped(rank, "llama2", algo, 2, 1, mesh_path=False, H=2, group=mine, batch=_replica_batch,
                           optimizer=ON_SHARDS[algo])[0]
    return sharded, whole


def _held_bytes(rank):
    """(this rank's, the unsharded model's) parameter and Adam-state bytes on 2 x 2."""
    import dreamddp
    from dreamddp.engine.mesh import rank_bytes

    def stepped(model):
        opt = torch.optim.Adam(model.parameters())
        _loss(model, _batch(rank, 0)).backward()
        opt.step()
        return rank_bytes(model, opt)

    return stepped(dreamddp.shard(_model("llama2"), dreamddp.mesh(2, 2))), stepped(_model("llama2"))


def _refusals(rank):
    """wrap's one-line refusals on a 2 x 2 mesh: an algorithm that cannot run on shards, and a
    model not sharded before its optimizer was built."""
    import dreamddp
    from dreamddp.checks import ConfigError

    from dreamddp.engine.mesh import hsdp

    mesh, said = dreamddp.mesh(2, 2), []
    sharding = {"fsdp": lambda m: dreamddp.shard(m, mesh), "none": lambda m: m, "hsdp": lambda m: hsdp(m, mesh)}
    for algo, shard in (("dear", "fsdp"), ("flsgd", "none"), ("flsgd", "hsdp")):
        model = sharding[shard](_model("llama2"))
        try:
            dreamddp.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), algo, group=mesh)
        except ConfigError as exc:
            said.append(str(exc))
    return said


def _scenarios(rank, world):
    out = {"refusals": _refusals(rank)}
    out["s1_mesh"] = _train_wrapped(rank, "gpt2", "flsgd", 4, 1)[0]
    out["s1_plain"] = _train_wrapped(rank, "gpt2", "flsgd", 4, 1, mesh_path=False)[0]
    out["r1_ours"] = _train_wrapped(rank, "llama2", "flsgd", 1, 4)[0]
    out["r1_fsdp"] = _train_fsdp(rank, "llama2", 4)
    out["ssgd_ours"] = _train_wrapped(rank, "gpt2", "ssgd", 2, 2)[0]
    out["ssgd_hsdp"] = _train_fsdp(rank, "gpt2", 2, hsdp_R=2)
    for algo in ("flsgd", "diloco", "sparseloco", "desloc"):
        # DES-LOC with Adam, its moments (DTensors: their local shards) averaged every 2 and 4 steps
        opt, kw = (torch.optim.Adam, {"moments_every": [2, 4]}) if algo == "desloc" else (torch.optim.SGD, {})
        out[f"agree_{algo}"] = _train_wrapped(rank, "gpt2", algo, 2, 2, check="window", optimizer=opt, **kw)[1]
    _, out["agree_dreamddp"], out["seen_dreamddp"] = _train_wrapped(rank, "gpt2", "dreamddp", 2, 2, check="synced")
    for algo in ("dreamddp_diloco", "dreamddp_sparseloco"):
        out[f"agree_{algo}"] = _train_wrapped(rank, "gpt2", algo, 2, 2, check="synced")[1]
    out["mem_nosync"] = _allocated(rank, "nosync")
    out["mem_dreamddp"] = _allocated(rank, "dreamddp")
    out["ascwfbp_ours"] = _train_wrapped(rank, "gpt2", "ascwfbp", 2, 2)[0]
    out["bytes"] = _held_bytes(rank)
    for algo in ON_SHARDS:
        out[f"pair_{algo}"] = _sharded_vs_whole(rank, algo)
    return out


@pytest.fixture(scope="module")
def results():
    return run_workers(_scenarios, 4)


def _same(a: dict, b: dict, exact: bool) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if exact:
            assert torch.equal(a[k], b[k]), k
        else:
            torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=k)


def test_wrap_refuses_what_cannot_run_on_shards_in_one_line(results):
    for r in results:
        dear, unsharded, both_dims = r["refusals"]
        assert dear.startswith("algo=dear:") and "\n" not in dear
        assert unsharded.startswith("group=") and "dreamddp.shard" in unsharded
        assert both_dims.startswith("group=") and "HSDP" in both_dims


def test_one_shard_on_the_mesh_path_is_the_unsharded_trajectory_bitwise(results):
    for r in results:
        _same(r["s1_mesh"], r["s1_plain"], exact=True)


@pytest.mark.parametrize("algo", sorted(ON_SHARDS))
def test_each_algorithm_on_shards_is_its_unsharded_run_on_the_replicas_whole_batches(results, algo):
    """FSDP's reduce-scatter averages the shards' gradients: the gradient of the replica's
    whole batch (Llama tiny: no dropout; equal token counts), summed in another order, so
    to float tolerance."""
    for r in results:
        sharded, whole = r[f"pair_{algo}"]
        _same(sharded, whole, exact=False)


def test_one_replica_is_plain_fsdp2_training_bitwise(results):
    for r in results:
        _same(r["r1_ours"], r["r1_fsdp"], exact=True)


def test_ssgd_on_replicas_by_shards_is_torch_hsdp(results):
    for r in results:
        _same(r["ssgd_ours"], r["ssgd_hsdp"], exact=False)


def test_ascwfbp_on_replicas_by_shards_is_torch_hsdp(results):
    for r in results:  # its per-unit buckets launch as FSDP's reduce-scatter lands each unit's shard
        _same(r["ascwfbp_ours"], r["ssgd_hsdp"], exact=False)


def test_a_shard_holds_its_share_of_the_parameters_and_optimizer_state(results):
    for shard in ((0, 1), (2, 3)):  # the two shards of each replica hold the model once between them
        whole = results[shard[0]]["bytes"][1]
        for key in ("param_bytes", "optimizer_bytes"):
            held = [results[r]["bytes"][0][key] for r in shard]
            assert sum(held) == whole[key]
            assert max(held) <= 0.55 * whole[key]


@pytest.mark.parametrize("algo", ["flsgd", "diloco", "sparseloco", "desloc"])
def test_replicas_agree_after_every_full_window(results, algo):
    for r in results:
        assert r[f"agree_{algo}"] == [True] * (STEPS // 2 + 1)


def test_dreamddp_allocates_no_copy_of_the_local_shards(results):
    for r in results:
        base, shard_bytes, _ = r["mem_nosync"]
        used, _, synced = r["mem_dreamddp"]
        assert synced > 0
        assert used - base < 0.01 * shard_bytes, f"dreamddp allocated {used - base} extra bytes (shards: {shard_bytes})"


def test_the_profile_sees_each_units_local_shard_over_the_replicas(results):
    from dreamddp.engine.units import enumerate_units

    S = 2
    expected = {}  # fully_shard's padded dim-0 chunk: ceil(rows / S) rows of each parameter
    for u in enumerate_units(_model("gpt2")):
        expected[u.name] = sum(-(-p.shape[0] // S) * (p.numel() // p.shape[0]) * 4 for p in u.params)
    for r in results:
        assert r["seen_dreamddp"]["profile"] == expected
        assert r["seen_dreamddp"]["world"] == 2  # the replicas, not the 4 ranks


@pytest.mark.parametrize("algo", ["dreamddp", "dreamddp_diloco", "dreamddp_sparseloco"])
def test_dreamddp_units_agree_across_replicas_right_after_their_sync(results, algo):
    for r in results:
        assert r[f"agree_{algo}"] and all(r[f"agree_{algo}"])
