"""Exact plans of every algorithm on the engine, against a fake communicator."""

from __future__ import annotations

import json

import pytest
import torch

from dreamddp.schedule.partition import buckets, equal_count_groups
from dreamddp.schedule.schedule_file import ScheduleError, read_schedule
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.units import enumerate_units
from engine_fixtures import batch, build, engine_step, loss_of, small_model

UNIT_NAMES = ["4", "3", "2", "0"]  # backward order of small_model()


def peer_zeros(kind, tag, t):
    """The other rank holds zeros: the average is exactly half the local values."""
    return [t, torch.zeros_like(t)]


def make(name: str, peer_fn=None, **kw):
    model = small_model()
    units = enumerate_units(model)
    comm = FakeCommunicator(world_size=2, peer_fn=peer_fn)
    algo = build(name, **kw)
    engine = PartialSyncEngine(model, units, comm, algo)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, engine, comm, opt


def run_iteration(model, engine, opt, t: int, before_step=None):
    return engine_step(engine, model, opt, t, before_step=before_step)


def test_units_backward_order():
    assert [u.name for u in enumerate_units(small_model())] == UNIT_NAMES


def test_ssgd_one_gradient_allreduce_after_backward_exact_values():
    model, engine, comm, opt = make("ssgd", peer_fn=peer_zeros)
    seen = {}

    def capture():
        seen["grads"] = engine.flat.grads.clone()

    stats = run_iteration(model, engine, opt, 0, capture)
    assert [(c.kind, c.tag) for c in comm.calls] == [("all_reduce", "grad:0-3")]
    assert comm.calls[0].data_ptr == engine.flat.grads.data_ptr()
    assert torch.equal(seen["grads"], comm.calls[0].values / 2)  # mean of g and 0, exact
    assert stats.collectives == 1 and stats.bytes == engine.flat.grads.numel() * 4
    assert stats.events == [] and not stats.sampled


def test_ascwfbp_buckets_launch_during_backward():
    model, engine, comm, opt = make("ascwfbp", bucket_mb=1048 / 2**20)
    assert buckets([u.nbytes for u in engine.units], 1048) == [(0, 2), (3, 3)]  # 528+256+2176 >= 1048
    stats = run_iteration(model, engine, opt, 0)
    assert [c.tag for c in comm.calls] == ["grad:0-2", "grad:0"]  # a single unit is named
    assert [c.data_ptr for c in comm.calls] == [
        engine.flat.grad_slice(a, b).data_ptr() for a, b in [(0, 2), (3, 3)]
    ]
    assert stats.collectives == 2
    assert buckets([100, 100, 100], 150) == [(0, 1), (2, 2)]


def test_flsgd_averages_all_parameters_after_every_Hth_step():
    model, engine, comm, opt = make("flsgd", H=3)
    for t in range(6):
        n_before = len(comm.calls)
        run_iteration(model, engine, opt, t)
        synced = [c.tag for c in comm.calls[n_before:]]
        assert synced == (["param:0-3"] if t in (2, 5) else [])
    assert comm.calls[0].data_ptr == engine.flat.params.data_ptr()


def test_plsgd_enp_groups_and_exact_in_place_average_before_step():
    model, engine, comm, opt = make("plsgd_enp", peer_fn=peer_zeros, H=2)
    assert equal_count_groups(4, 2) == [[0, 1], [2, 3]]
    assert equal_count_groups(5, 2) == [[0, 1, 2], [3, 4]]
    for t in range(4):
        before = engine.flat.params.clone()
        n_before = len(comm.calls)
        captured = {}
        run_iteration(model, engine, opt, t, lambda: captured.setdefault("p", engine.flat.params.clone()))
        calls = comm.calls[n_before:]
        group = [0, 1] if t % 2 == 0 else [2, 3]
        assert [c.tag for c in calls] == [f"param:{UNIT_NAMES[u]}" for u in group]
        for c, u in zip(calls, group):
            assert c.data_ptr == engine.flat.param_slice(u, u).data_ptr()
        a, b = engine.flat.span(group[0], group[-1])
        assert torch.equal(captured["p"][a:b], before[a:b] / 2)  # averaged in place before the local step
        rest = torch.ones_like(before, dtype=torch.bool)
        rest[a:b] = False
        assert torch.equal(captured["p"][rest], before[rest])


def test_partial_sync_launches_from_gradient_hooks_during_backward():
    model, engine, comm, opt = make("plsgd_enp", H=2)
    engine.begin_iteration(0)
    loss_of(model, batch(0, 0)).backward()
    assert len(comm.calls) == 2  # launched inside backward, before end_backward
    engine.end_backward()
    engine.step(opt)
    engine.after_step()


def test_dreamddp_schedule_with_extra_syncs():
    sched = {"4": [0, 1], "3": [0], "2": [1], "0": [1], "1": [0]}  # "1" is Tanh: parameter-free, ignored
    model, engine, comm, opt = make("dreamddp", H=2, sched=sched)
    assert engine.algorithm.groups == [[0, 1], [0, 2, 3]]
    run_iteration(model, engine, opt, 0)
    run_iteration(model, engine, opt, 1)
    assert [c.tag for c in comm.calls] == ["param:4", "param:3", "param:4", "param:2", "param:0"]


@pytest.mark.parametrize(
    "sched, message",
    [
        ({"4": 0, "3": 0, "2": 1, "0": 1, "nope": 0}, "unknown unit 'nope'"),
        ({"4": 0, "3": 0, "2": 1}, "unit '0' missing"),
        ({"4": 0, "3": 0, "2": 1, "0": 2}, "iteration 2, outside [0, 2)"),
    ],
)
def test_dreamddp_schedule_validation(sched, message):
    sched = {k: [v] if isinstance(v, int) else v for k, v in sched.items()}
    with pytest.raises(ScheduleError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        make("dreamddp", H=2, sched=sched)


def test_read_schedule_file(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"H": 2, "schedule": {"4": 0, "3": [0, 1]}}))
    assert read_schedule(str(p)) == (2, {"4": [0], "3": [0, 1]})
    with pytest.raises(ScheduleError, match="file not found"):
        read_schedule(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ScheduleError, match="not a schedule file"):
        read_schedule(str(tmp_path / "bad.json"))


def test_no_algorithm_copies_the_model():
    """Every collective runs on a slice of the engine's flat buffers (no model copy)."""
    for name, kw in [("ssgd", {}), ("ascwfbp", {"bucket_mb": 0.001}), ("flsgd", {"H": 1}), ("plsgd_enp", {"H": 2})]:
        model, engine, comm, opt = make(name, **kw)
        for t in range(2):
            run_iteration(model, engine, opt, t)
        bufs = [(engine.flat.params.data_ptr(), engine.flat.params.numel() * 4), (engine.flat.grads.data_ptr(), engine.flat.grads.numel() * 4)]
        for c in comm.calls:
            assert any(base <= c.data_ptr and c.data_ptr + c.nbytes <= base + n for base, n in bufs), (name, c.tag)
        assert engine.flat.grads_attached()
        assert all(p.data_ptr() >= engine.flat.params.data_ptr() for p in model.parameters())


def test_dreamddp_general_schedule_one_collective_per_run():
    sched = {"4": [0], "3": [0], "2": [1], "0": [0]}
    runs = [[("4", "3"), ("0", "0")], [("2", "2")]]
    model, engine, comm, opt = make("dreamddp", H=2, sched=sched, collectives=runs)
    assert engine.algorithm.runs == [[(0, 1), (3, 3)], [(2, 2)]]
    assert engine.algorithm.describe()["runs"] == [[[0, 1], [3, 3]], [[2, 2]]]
    engine.begin_iteration(0)
    loss_of(model, batch(0, 0)).backward()
    assert [c.tag for c in comm.calls] == ["param:0-1", "param:0"]  # launched inside backward, in place
    assert comm.calls[0].data_ptr == engine.flat.param_slice(0, 1).data_ptr()
    engine.end_backward()
    engine.step(opt)
    engine.after_step()
    run_iteration(model, engine, opt, 1)
    assert [c.tag for c in comm.calls][2:] == ["param:2"]


@pytest.mark.parametrize(
    "runs, message",
    [
        ([[("4", "4"), ("0", "0")], [("2", "2")]], "iteration 0's collectives do not cover exactly its units once"),
        ([[("4", "3"), ("3", "3"), ("0", "0")], [("2", "2")]], "do not cover exactly its units once"),
        ([[("3", "4"), ("0", "0")], [("2", "2")]], "runs against backward order"),
        ([[("4", "nope"), ("0", "0")], [("2", "2")]], "names 'nope', not a unit"),
    ],
)
def test_dreamddp_general_schedule_validation(runs, message):
    sched = {"4": [0], "3": [0], "2": [1], "0": [0]}
    with pytest.raises(ScheduleError, match=message):
        make("dreamddp", H=2, sched=sched, collectives=runs)


@pytest.mark.parametrize("name, kw, launched", [("ascwfbp", {"bucket_mb": 1048 / 2**20}, 2),
                                                 ("flsgd", {}, 1), ("nosync", {}, 0)])
def test_the_engine_times_its_host_work_per_op(name, kw, launched):
    """The books the simulator charges per op (Compute.launch_host/complete_host): every launch
    and every on_complete timed, waits excluded; nothing where nothing is launched."""
    model, engine, comm, opt = make(name, **kw)
    stats = run_iteration(model, engine, opt, 1)  # flsgd (H=2) syncs after the second step
    assert len(stats.ops) == launched and stats.completed == launched
    assert (stats.launch_host > 0) == (launched > 0) and stats.launch_host < stats.end - stats.start
    assert stats.complete_host >= 0 and (launched or stats.complete_host == 0)


def test_a_wait_or_a_step_inside_an_algorithms_launch_is_not_host_work(monkeypatch):
    """DeAR's all-gather launch waits for its reduce-scatter, overlap's runs a unit's step: the
    engine's books leave out what it times apart (the wait; the optimizer step)."""
    import time

    from dreamddp.engine import substep

    model, engine, comm, opt = make("ssgd")
    stepped = {"s": 0.0}
    monkeypatch.setattr(substep, "stepped_seconds", lambda: stepped["s"])
    launch, complete = engine.algorithm.launch, engine.algorithm.on_complete

    def waiting_launch(eng, op):
        time.sleep(0.2)
        eng.stats.wait += 0.2  # as an algorithm adds a handle's wait
        return launch(eng, op)

    def stepping_complete(eng, op):
        time.sleep(0.2)
        stepped["s"] += 0.2  # as SubsetStepper.step counts itself
        complete(eng, op)

    monkeypatch.setattr(engine.algorithm, "launch", waiting_launch)
    monkeypatch.setattr(engine.algorithm, "on_complete", stepping_complete)
    stats = run_iteration(model, engine, opt, 0)
    assert stats.wait >= 0.2 and stats.completed == 1
    assert stats.launch_host < 0.1 and stats.complete_host < 0.1


def test_a_plan_built_fresh_each_iteration_is_indexed_as_itself():
    """An algorithm may build a new plan tuple every iteration: a freed tuple's id, reused by the
    next one, must not bring back the old plan's triggers (each gradient averaged at its own unit's
    hook, after it exists)."""
    from dreamddp.algorithms.base import AlgoConfig, Algorithm
    from dreamddp.engine.plan import Payload, SyncOp, When

    class Fresh(Algorithm):
        name = "fresh"

        def plan(self, t):
            return (SyncOp(t % 4, t % 4, Payload.GRAD, When.UNIT_READY, When.END_OF_BACKWARD),)

    model = small_model()
    engine = PartialSyncEngine(model, enumerate_units(model), FakeCommunicator(world_size=2, peer_fn=peer_zeros),
                               Fresh(AlgoConfig(name="fresh", H=1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    for t in range(12):
        engine.begin_iteration(t)
        loss_of(model, batch(0, t)).backward()
        local = engine.flat.grads.clone()
        engine.end_backward()
        a, b = engine.flat.span(t % 4, t % 4)
        assert torch.equal(engine.flat.grads[a:b], local[a:b] / 2), t  # the peer's zeros: exactly half
        engine.step(opt)
        engine.after_step()
