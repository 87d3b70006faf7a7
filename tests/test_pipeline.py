"""The sync pipeline (engine/pipeline.py): every algorithm x stage either runs or is refused in
one line naming the field; exact values on the fake communicator for what the stages do."""

from __future__ import annotations

import pytest
import torch

from dreamddp.algorithms import ALGORITHMS, build_algorithm
from dreamddp.checks import ConfigError
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.plan import Payload
from dreamddp.engine.units import enumerate_units
from engine_fixtures import algo_cfg, engine_step, make_opt, small_model

SCHEDULE = {"schedule": {"H": 2, "schedule": {"4": [0, 1], "3": [0], "2": [1], "0": [1]}}}
STAGES = {  # one setting of each stage away from the plain pipeline
    "fp16": dict(compress="fp16"), "bf16": dict(compress="bf16"), "topk": dict(compress="topk", compress_ratio=0.1),
    "topk_chunk_2bit": dict(compress="topk", compress_chunk=16, compress_ratio=0.25, compress_bits=2),
    "quant2": dict(compress="quant", compress_bits=2, compress_block=32), "e3m0": dict(compress="e3m0"),
    "dct": dict(compress="dct", compress_chunk=16, compress_ratio=0.25, error_decay=0.9),
    "senders": dict(compress="topk", compress_ratio=0.1, reduction="senders"), "delta": dict(payload="delta"),
    "sgd": dict(outer_optimizer="sgd"), "nesterov": dict(outer_optimizer="nesterov"),
    "adam": dict(outer_optimizer="adam", outer_lr=0.01), "adamw": dict(outer_optimizer="adamw", outer_lr=0.01),
    "late": dict(timing="late"), "eager": dict(timing="eager", outer_optimizer="nesterov"),
    "moments": dict(moments_every=[2, 4]),
}
# What each algorithm's plan sends (not read from the code under test): which stages it takes.
GRAD_STAGES = {"fp16", "bf16", "topk", "topk_chunk_2bit", "quant2", "e3m0", "dct", "senders"}
PARAM_STAGES = set(STAGES)
TAKES = {"ssgd": GRAD_STAGES, "ascwfbp": GRAD_STAGES, "flsgd": PARAM_STAGES, "plsgd_enp": PARAM_STAGES,
         "dreamddp": PARAM_STAGES - {"late", "eager"}, "streaming_diloco": PARAM_STAGES - {"late", "eager"},
         "dear": set(), "flsgd_timed": set(), "nosync": set(), "plain": set(), "ddp": set()}


def test_the_matrix_names_every_algorithm():
    assert sorted(TAKES) == sorted(ALGORITHMS)


@pytest.mark.parametrize("stage", sorted(STAGES))
@pytest.mark.parametrize("name", sorted(TAKES))
def test_every_algorithm_and_stage_runs_or_is_refused_in_one_line(name, stage):
    kw = STAGES[stage]
    setup = SCHEDULE if name == "dreamddp" else None
    if stage not in TAKES[name]:
        with pytest.raises(ConfigError) as refused:
            build_algorithm(algo_cfg(name, **kw), setup)
        message = str(refused.value)
        assert "\n" not in message and message.startswith("algo.") and f"algo={name}" in message
        assert any(message.startswith(f"algo.{key}=") for key in kw)
        return
    model = small_model()
    engine = PartialSyncEngine(model, enumerate_units(model), FakeCommunicator(2, 0),
                               build_algorithm(algo_cfg(name, **kw), setup))
    opt, _ = make_opt("adam" if stage == "moments" else "sgd", model)
    for t in range(5):
        engine_step(engine, model, opt, t)
    engine.land_all()
    assert torch.isfinite(engine.flat.params).all()
    payloads = {op.payload for t in range(4) for op in engine.algorithm.plan(t)}
    if kw.get("compress"):  # a codec: gathered payloads made at launch, charged at their size
        assert Payload.OUTER in payloads
        assert all(op.collective == "all_gather" for t in range(4) for op in engine.algorithm.plan(t)
                   if op.payload is Payload.OUTER)
    if stage == "moments":
        assert Payload.STATE in payloads


def test_a_topk_value_beyond_fp16_stays_finite_and_feedback_keeps_the_rest():
    """TopK(0.5) on [7e4, 1, -2, 0.5] once decoded to inf and poisoned the residual."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 2, bias=False))
    comm = FakeCommunicator(2, 0)
    engine = PartialSyncEngine(model, enumerate_units(model), comm,
                               build_algorithm(algo_cfg("ssgd", compress="topk", compress_ratio=0.5)))
    engine.begin_iteration(0)
    model[0].weight.grad = None
    engine.flat.grads.copy_(torch.tensor([7e4, 1.0, -2.0, 0.5]))
    engine.end_backward()
    sent = engine.flat.grads.clone()
    assert torch.isfinite(sent).all() and sent[0] == 65504 and sent[2] == -2
    residual = engine.algorithm.sync.residual
    torch.testing.assert_close(residual, torch.tensor([7e4 - 65504, 1.0, 0.0, 0.5]))


def test_the_senders_reduction_averages_each_index_over_the_ranks_that_sent_it():
    def peers(kind, tag, payload):  # rank 1 sends its top-k of a gradient of its own
        from dreamddp.engine.codecs import TopK

        return [payload, TopK(0.25, 0, 16).encode(torch.tensor([0.0, 0.0, 0.0, 8.0]))]

    model = torch.nn.Sequential(torch.nn.Linear(2, 2, bias=False))
    engine = PartialSyncEngine(model, enumerate_units(model), FakeCommunicator(2, 0, peers),
                               build_algorithm(algo_cfg("ssgd", compress="topk", compress_ratio=0.25,
                                                        reduction="senders", error_feedback=False)))
    engine.begin_iteration(0)
    engine.flat.grads.copy_(torch.tensor([4.0, 1.0, 2.0, 0.0]))
    engine.end_backward()
    assert engine.flat.grads.tolist() == [4.0, 0.0, 0.0, 8.0]  # each sent by one rank: its value, not half


def test_the_late_average_lands_at_the_end_of_the_run():
    """timing=late: the last window's average is still in flight when training stops; the run's
    end lands it, so replicas end synced (rank 0's own replica is not what is evaluated)."""
    def peers(kind, tag, t):
        return [t, t + 1.0]

    model = small_model()
    engine = PartialSyncEngine(model, enumerate_units(model), FakeCommunicator(2, 0, peers),
                               build_algorithm(algo_cfg("flsgd", H=2, timing="late")))
    opt, _ = make_opt("sgd", model)
    for t in range(4):
        engine_step(engine, model, opt, t)
    engine.flush()
    assert engine.in_flight()  # window 1's average launched at t=3, due at t=5
    before = engine.flat.params.clone()
    engine.land_all()
    assert not engine.in_flight()
    torch.testing.assert_close(engine.flat.params, before + 0.5)  # avg(s) + theta - s, peers at s + 1


def test_bubble_filling_syncs_take_no_second_outer_step():
    """Layer-wise DiLoCo: unit "4" syncs at both positions of the window; only its first takes
    the outer Nesterov step, so its anchor moves once per window (the second is an average)."""
    model = small_model()
    engine = PartialSyncEngine(model, enumerate_units(model), FakeCommunicator(2, 0),
                               build_algorithm(algo_cfg("dreamddp", outer_optimizer="nesterov"), SCHEDULE))
    opt, _ = make_opt("sgd", model)
    a, b = engine.flat.span(0, 0)
    moved = []
    for t in range(4):
        anchor = engine.algorithm.sync.anchor[a:b].clone()
        engine_step(engine, model, opt, t)
        moved.append(not torch.equal(anchor, engine.algorithm.sync.anchor[a:b]))
    assert moved == [False, False, True, False]  # t=0: nothing changed yet; t=1, 3: the bubble fill averages


def test_the_plan_charges_the_codecs_bytes():
    model = small_model()
    engine = PartialSyncEngine(model, enumerate_units(model), FakeCommunicator(2, 0),
                               build_algorithm(algo_cfg("flsgd", compress="quant", compress_bits=2, compress_block=64)))
    (op,) = engine.algorithm.plan(1)
    n = engine.flat.params.numel()
    codec = engine.algorithm.sync.codec
    assert op.scale == 2 * codec.nbytes(n) / (4 * n)
    stats = engine_step(engine, model, make_opt("sgd", model)[0], 0)
    stats = engine_step(engine, model, make_opt("sgd", model)[0], 1)
    assert stats.bytes == codec.nbytes(n) * 2  # the all-gather's output: every rank's payload
