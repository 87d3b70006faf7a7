"""The deferred carrier (``bandwidth.carrier=deferred``) against the eager one, on real gloo workers.

Deferred, a collective's real work starts at the first ``wait()`` on any
pending one, and adjacent all-reduces go as one.  What must not change: the
numbers (the same sums; gloo's ring adds them in an order that depends on the
buffer's length, so equal up to rounding, and still bitwise identical on every
rank) and the link model's timing (every collective reserves the link at
launch).  What must change: fewer real collectives (adjacent slices merged in place,
small ones packed), none before a wait.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from dist_util import run_workers
from dreamddp.comm import communicator
from dreamddp.comm.communicator import Communicator
from dreamddp.comm.links.emulated import EmulatedLink
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.units import enumerate_units
from engine_fixtures import build, engine_step, make_opt, small_model


class _Counting:
    """Counts the real collectives started: wraps torch.distributed.all_reduce and the
    communicator's reduce-scatter (on gloo world - 1 rounds of all-to-alls, comm/communicator.py)."""

    TARGETS = ((dist, "all_reduce"), (dist, "all_to_all_single"), (communicator, "_reduce_scatter"))

    def __init__(self):
        self.calls: list[str] = []
        self._saved = [(mod, name, getattr(mod, name)) for mod, name in self.TARGETS]
        for mod, name, fn in self._saved:
            setattr(mod, name, self._wrap(name, fn))

    def _wrap(self, name, fn):
        def counted(*a, **kw):
            self.calls.append(name)
            return fn(*a, **kw)
        return counted

    def restore(self):
        for mod, name, fn in self._saved:
            setattr(mod, name, fn)


def _exchange(rank, world, carrier):
    """Launch a mix of collectives, then wait; returns results, real calls and link times."""
    gen = torch.Generator().manual_seed(rank)
    flat = torch.randn(1000, generator=gen)
    other = torch.randn(64, generator=gen)  # a separate buffer: never merged with ``flat``'s slices
    rs_in = torch.randn(16 * world, generator=gen)
    big = torch.randn(20_000, generator=gen)  # 80 KB: above SMALL_BYTES, so it goes in place
    rs_out = torch.empty(16)
    comm = Communicator(link=EmulatedLink(gbps=10.0, alpha_s=0.0), carrier=carrier)
    counting = _Counting()
    try:
        handles = [comm.all_reduce_avg(flat[0:100]), comm.all_reduce_avg(flat[100:350]),
                   comm.all_reduce_avg(flat[350:351]),
                   comm.reduce_scatter_avg(rs_in, rs_out),  # not an all-reduce: breaks the run
                   comm.all_reduce_avg(flat[351:600]),
                   comm.all_reduce_avg(flat[700:1000]),  # a gap after 600: not adjacent
                   comm.all_reduce_avg(big),
                   comm.all_reduce_avg(other)]
        before = list(counting.calls)
        done_before = [h.done() for h in handles]
        handles[-1].wait()  # the last one's wait starts them all
        for h in handles:
            h.wait()
    finally:
        counting.restore()
    records = comm.drain()
    synced = torch.cat([flat[:600], flat[700:]])  # [600:700] is never sent: each rank keeps its own
    return {"flat": synced, "other": other, "big": big, "rs": rs_out, "calls_before_wait": before, "calls": counting.calls,
            "done_before": done_before, "reserved": [r.deadline - r.start for r in records]}


def test_deferred_carrier_is_bitwise_eager_with_merged_collectives():
    eager = run_workers(_exchange, 4, "eager")
    deferred = run_workers(_exchange, 4, "deferred")
    for e, d in zip(eager, deferred):
        for key in ("flat", "other", "big", "rs"):
            torch.testing.assert_close(d[key], e[key], rtol=1e-6, atol=1e-6)
        for key in ("flat", "other", "big"):  # averaged buffers: replicas agree bitwise (rs is a shard each)
            assert torch.equal(d[key], deferred[0][key]), key
        assert d["reserved"] == pytest.approx(e["reserved"])  # the link model's time per collective
        assert len(e["calls_before_wait"]) == 10 and len(e["calls"]) == 10  # 7 all-reduces, 3 rounds
        assert d["calls_before_wait"] == [] and not any(d["done_before"])
        # [0:351] in place, the reduce-scatter, then [351:600], [700:1000] and ``other`` packed,
        # and ``big`` in place.
        assert d["calls"] == ["all_reduce"] + ["all_to_all_single"] * 3 + ["all_reduce", "all_reduce"]  # 3 rounds
    mean = torch.stack([e["flat"] for e in eager]).mean(0)
    torch.testing.assert_close(eager[0]["flat"], mean)  # the average itself, as a sanity check


def _train(rank, world, name, carrier, kw):
    torch.manual_seed(0)
    model = small_model()
    engine = PartialSyncEngine(model, enumerate_units(model), Communicator(carrier=carrier), build(name, **kw),
                               grad_clip=1.0)
    opt, _ = make_opt("adam", model)
    for t in range(6):
        engine_step(engine, model, opt, t, rank)
    engine.close()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


@pytest.mark.parametrize("name, kw", [
    ("ssgd", {}), ("ascwfbp", {"bucket_mb": 0.0001}), ("plsgd_enp", {"H": 3}), ("flsgd", {"H": 2}),
    ("dear", {"bucket_mb": 0.0001}), ("streaming_diloco", {"H": 2, "fragments": 2, "tau": 1}),
])
def test_training_is_the_same_under_either_carrier(name, kw):
    eager = run_workers(_train, 2, name, "eager", kw)
    for carrier in ("deferred", "step"):
        for e, d in zip(eager, run_workers(_train, 2, name, carrier, kw)):
            torch.testing.assert_close(d, e, rtol=1e-5, atol=1e-6)


def _queued_at_iteration_ends(rank, world, carrier):
    """Streaming DiLoCo with tau=1: a fragment's outer all-reduce launched in one iteration is
    waited for in the next.  Returns whether anything was still queued as each iteration ended."""
    torch.manual_seed(0)
    model = small_model()
    comm = Communicator(link=EmulatedLink(gbps=10.0, alpha_s=0.0), carrier=carrier)
    engine = PartialSyncEngine(model, enumerate_units(model), comm,
                               build("streaming_diloco", H=2, fragments=2, tau=1), grad_clip=1.0)
    opt, _ = make_opt("adam", model)
    queued = []
    for t in range(6):
        engine_step(engine, model, opt, t, rank)
        queued.append(bool(comm._deferred._queue))
    engine.close()
    return queued, torch.nn.utils.parameters_to_vector(model.parameters()).detach()


def test_the_step_carrier_starts_what_is_queued_when_the_iteration_ends():
    deferred = run_workers(_queued_at_iteration_ends, 2, "deferred")
    step = run_workers(_queued_at_iteration_ends, 2, "step")
    for (queued_d, params_d), (queued_s, params_s) in zip(deferred, step):
        assert any(queued_d)  # deferred: the late all-reduce waits in the queue for the next wait
        assert not any(queued_s)  # step: started as the iteration ended
        torch.testing.assert_close(params_s, params_d, rtol=1e-5, atol=1e-6)


class _Done:
    """A real collective's work that finished at once."""

    def wait(self):
        return True

    def is_completed(self):
        return True


def test_a_refused_start_fails_the_collectives_queued_behind_it():
    """The backend refuses the second of three queued collectives (a peer gone): the first
    completes, the other two raise at their wait instead of returning unaveraged buffers."""
    from dreamddp.comm.carrier import DeferredCarrier
    from dreamddp.comm.handle import CollectiveRecord, Handle

    def refuse():
        raise RuntimeError("connection reset by peer")

    carrier = DeferredCarrier(all_reduce=None)  # every buffer its own storage: nothing merged
    starts = [_Done, refuse, _Done]
    handles = []
    for i, start_op in enumerate(starts):
        record = CollectiveRecord("all_reduce", f"op{i}", 400_000, 400_000.0, 0.0, 0.0, 0.0)
        handle = Handle(record, issue=carrier.start)
        carrier.add(handle, "all_reduce", torch.zeros(100_000), start_op, None)
        handles.append(handle)
    with pytest.raises(RuntimeError, match="connection reset"):
        handles[0].wait()  # its wait starts the queue; the refusal surfaces here first
    assert handles[0].done() and handles[0].wait() >= 0.0
    for h in handles[1:]:
        assert h.done()  # a poller is sent to wait(), which says why
        with pytest.raises(RuntimeError, match=f"{h.record.tag}' never started.*connection reset"):
            h.wait()
