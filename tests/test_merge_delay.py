"""DreamDDP's delayed merge (``algo.merge_delay``), exactly.

Against a fake communicator whose other rank holds a known function of this
rank's values: merge_delay=0 is the paper's DreamDDP (each average lands in
place before the local step) and merge_delay=1 and 2 are the update rule
written out here by hand (a snapshot after the step, averaged, merged at the
end of backward d iterations later as ``avg + (p - snapshot)``), bitwise, with
``overlap_forward`` as without it; a unit's merged value is the average the
workers' snapshots had.  End to end on gloo: a run resumed from a checkpoint taken with averages in flight ends
bitwise where the uninterrupted run does.  And the split: only what the link
cannot finish in place goes late.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from cli_util import train_completed
from dreamddp.algorithms import build_algorithm
from dreamddp.algorithms.dreamddp_overlap import DreamDDPOverlap
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.units import enumerate_units
from dreamddp.run.checkpoint import step_dir
from dreamddp.engine.plan import Payload, SyncOp, When, part_bounds
from dreamddp.schedule.delay import plan_delayed, split_delayed, window_plans
from dreamddp.schedule.profile import Profile
from dreamddp.schedule.schedule_file import resyncs
from engine_fixtures import algo_cfg, batch, engine_step, loss_of, small_model
from test_checkpoint import SMALL, _differences

UNITS = ["4", "3", "2", "0"]  # small_model's units in backward order
H = 3
SCHEDULE = {"4": [0], "3": [1], "2": [2], "0": [2]}
LATE = [[("4", "4")], [], [("2", "2"), ("0", "0")]]  # iteration 1's unit stays in place
# unit 4 cut in two parts: part 0 launched in its own iteration 0, part 1 in iteration 1
LATE_PARTS = [[("4", "4", 0, 2)], [("4", "4", 1, 2)], [("2", "2"), ("0", "0")]]



def late(algo) -> dict:
    """The late averages in flight: op -> (its all-reduce buffer, its snapshot or None)."""
    return {op: entry for (op, _), entry in algo.sync._sent.items() if algo.sync.role[op] == "copy"}

def peer(kind, tag, t):
    """The other worker holds an elementwise function of this worker's values."""
    return [t, t * 0.5 + 0.25]


def mean(x: torch.Tensor) -> torch.Tensor:
    total = x.clone()
    total.add_(x * 0.5 + 0.25)  # summed in rank order, then divided, as the communicator does
    return total.div_(2)


def algorithm(delay: int, late=LATE, overlap_forward: bool = False):
    """DreamDDP on SCHEDULE with the ``late`` runs merged ``delay`` iterations later."""
    setup = {"schedule": {"H": H, "schedule": SCHEDULE}}
    if delay:
        setup["schedule"]["delayed"] = [[list(r) for r in its] for its in late]
    return build_algorithm(algo_cfg("dreamddp", H=H, merge_delay=delay, overlap_forward=overlap_forward), setup)


def run_engine(delay: int, steps: int, late=LATE, overlap_forward: bool = False) -> nn.Module:
    model = small_model()
    algo = algorithm(delay, late, overlap_forward)
    engine = PartialSyncEngine(model, enumerate_units(model), FakeCommunicator(world_size=2, peer_fn=peer), algo)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for t in range(steps):
        engine_step(engine, model, opt, t)
    engine.flush()  # overlap_forward: the last in-place averages land and their steps apply; late ones only land
    return model


def run_reference(delay: int, steps: int, late_spec=LATE) -> nn.Module:
    """The update rule by hand, on a plain model: no engine, no flat buffers.  A part (k, n)
    of a unit is elements [numel * k // n, numel * (k + 1) // n) of its parameters laid end
    to end in registration order."""
    model = small_model()
    modules = dict(model.named_modules())
    params = lambda name: list(modules[name].parameters(recurse=False))  # noqa: E731
    flat = lambda name: torch.cat([p.detach().reshape(-1) for p in params(name)])  # noqa: E731

    def write(name: str, lo: int, values: torch.Tensor) -> None:
        whole = flat(name)
        whole[lo:lo + values.numel()] = values
        pos = 0
        for p in params(name):
            p.copy_(whole[pos:pos + p.numel()].view_as(p))
            pos += p.numel()

    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    late = {entry[0] for its in late_spec for entry in its} if delay else set()
    pending: dict[int, list] = {}  # merge iteration -> [(unit, first element, snapshot, its average)]
    for t in range(steps):
        h = t % H
        opt.zero_grad(set_to_none=False)
        loss_of(model, batch(0, t)).backward()
        with torch.no_grad():
            for name, its in SCHEDULE.items():  # in place: the average lands before the local step
                if h in its and name not in late:
                    for p in params(name):
                        p.copy_(mean(p))
            for name, lo, snapshot, avg in pending.pop(t, []):  # merged late: avg + (p - snapshot)
                write(name, lo, avg + (flat(name)[lo:lo + snapshot.numel()] - snapshot))
        opt.step()
        with torch.no_grad():
            for entry in late_spec[h] if delay else []:
                name, (k, n) = entry[0], entry[2:] or (0, 1)
                numel = flat(name).numel()
                lo, hi = numel * k // n, numel * (k + 1) // n
                snapshot = flat(name)[lo:hi].clone()
                pending.setdefault(t + delay, []).append((name, lo, snapshot, mean(snapshot)))
    return model


@pytest.mark.parametrize("delay", [0, 1, 2])
def test_engine_follows_the_update_rule_bitwise(delay):
    steps = 4 * H
    engine_model = run_engine(delay, steps)
    reference = run_reference(delay, steps)
    for (name, a), (_, b) in zip(engine_model.named_parameters(), reference.named_parameters()):
        assert torch.equal(a, b), f"merge_delay={delay}: {name}"
    if delay:  # and the delay changes the trajectory (the test can tell them apart)
        assert not all(torch.equal(a, b) for a, b in zip(engine_model.parameters(), run_reference(0, steps).parameters()))


@pytest.mark.parametrize("delay", [1, 2])
def test_with_overlap_forward_the_update_rule_is_the_same_bitwise(delay):
    # overlap_forward moves only the moment of an in-place unit's local step (into its next
    # forward); the late units merge as without it: the same trajectory, element for element
    assert isinstance(algorithm(delay, overlap_forward=True), DreamDDPOverlap)
    steps = 4 * H
    engine_model = run_engine(delay, steps, overlap_forward=True)
    reference = run_reference(delay, steps)
    for (name, a), (_, b) in zip(engine_model.named_parameters(), reference.named_parameters()):
        assert torch.equal(a, b), f"merge_delay={delay} with overlap_forward: {name}"


@pytest.mark.parametrize("delay", [1, 2])
def test_parts_of_a_cut_run_follow_the_update_rule_bitwise(delay):
    """A late run cut in parts: each part is the rule on its slice, launched in its own iteration."""
    steps = 4 * H
    engine_model = run_engine(delay, steps, LATE_PARTS)
    reference = run_reference(delay, steps, LATE_PARTS)
    for (name, a), (_, b) in zip(engine_model.named_parameters(), reference.named_parameters()):
        assert torch.equal(a, b), f"merge_delay={delay}: {name}"
    whole = run_engine(delay, steps)  # and cutting changes the trajectory
    assert not all(torch.equal(a, b) for a, b in zip(engine_model.parameters(), whole.parameters()))


def test_merged_value_is_the_average_of_the_workers_snapshots():
    """With merge_delay=1 nothing moves a unit between its snapshot and its merge, so right
    after the merge it holds exactly the mean of the snapshots the two workers sent."""
    model = small_model()
    setup = {"schedule": {"H": H, "schedule": SCHEDULE, "delayed": [[list(r) for r in its] for its in LATE]}}
    algo = build_algorithm(algo_cfg("dreamddp", H=H, merge_delay=1), setup)
    comm = FakeCommunicator(world_size=2, peer_fn=peer)
    engine = PartialSyncEngine(model, enumerate_units(model), comm, algo)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sent: dict[int, list] = {}
    checked = 0
    for t in range(2 * H + 1):
        before = len(comm.calls)
        engine.begin_iteration(t)
        loss_of(model, batch(0, t)).backward()
        engine.end_backward()  # the merges due now have landed, before the step
        for op, snapshot in sent.pop(t, []):
            assert torch.equal(engine.tensor(op), mean(snapshot))
            checked += 1
        engine.step(opt)
        engine.after_step()
        late = [op for op in engine.stats.ops if op.lag]
        calls = [c for c in comm.calls[before:] if c.tag.startswith("late:")]
        assert len(calls) == len(late)
        for op, call in zip(late, calls):  # what was sent: the parameters right after the step
            assert torch.equal(call.values, engine.tensor(op))
        sent[t + 1] = [(op, call.values) for op, call in zip(late, calls)]
    assert checked == 2 * 3  # units 4, 2 and 0 of two windows (the last launch merges past the end)


def test_memory_in_flight_is_one_copy_for_delay_one():
    setup = {"schedule": {"H": H, "schedule": SCHEDULE, "delayed": [[list(r) for r in its] for its in LATE]}}
    for delay, copies in ((1, 1), (2, 2)):
        m = small_model()
        algo = build_algorithm(algo_cfg("dreamddp", H=H, merge_delay=delay), setup)
        engine = PartialSyncEngine(m, enumerate_units(m), FakeCommunicator(world_size=2, peer_fn=peer), algo)
        opt = torch.optim.SGD(m.parameters(), lr=0.05)
        for t in range(H):
            engine_step(engine, m, opt, t)
        held = sum(sum(x.numel() for x in entry if x is not None) for entry in late(algo).values())
        in_flight = sum(engine.tensor(op).numel() for _, op in engine.in_flight())
        assert held == copies * in_flight > 0


def test_only_what_cannot_land_in_place_goes_late():
    # backward c=1, b=2, a=3 (ready 1, 3, 6; end 6), forward .5, step .5; all-reduce c=4 b=1 a=2
    p = Profile(units=["c", "b", "a"], bp={"c": 1.0, "b": 2.0, "a": 3.0}, comm={"c": 4.0, "b": 1.0, "a": 2.0},
                fwd={"a": 0.2, "b": 0.2, "c": 0.1}, step_time=0.5)
    runs = [[(0, 0), (1, 1)], [(2, 2)]]
    # Alone, iteration 0 lands c 1.5->5.5 and b 5.5->6.5 by the end of backward (6.5), while
    # iteration 1's a, ready at 6.5, cannot: late, sent after the step (7.0) until 9.0.  That
    # occupies the link 2 s into the next iteration, so there c goes 2.0->6.0 and b 6.0->7.0:
    # b goes late too (sent 7.0->8.0, so 1 s carries into iteration 1, where a is late anyway).
    assert split_delayed(p, 2, runs, 1) == [[(1, 1)], [(2, 2)]]
    assert split_delayed(p, 2, runs, 0) == [[], []]
    # with overlap_forward a may land before its next forward pre-hook: 6.5 + .5 + .0 (a runs first)
    assert split_delayed(p, 2, runs, 1, overlap_forward=True)[1] == [(2, 2)]
    with pytest.raises(ValueError, match="merge_delay=2"):
        split_delayed(p, 2, runs, 2)


@pytest.mark.slow  # two full runs; make test-all
def test_resumed_with_averages_in_flight_ends_where_the_uninterrupted_run_does(tmp_path):
    """Checkpoint at step 3 while iteration 2's late averages (H=3, merge_delay=1) are in flight,
    one of them part 0 of a run cut in two."""
    from dreamddp.models import build_model, model_units

    with torch.device("meta"):
        names = [u.name for u in model_units(build_model("gpt2", "tiny", vocab_size=8192))]
    schedule = {n: [i % 3] for i, n in enumerate(names)}
    late = [[], [], [[n, n] for i, n in enumerate(names) if i % 3 == 2]]
    cut = late[2].pop(0)[0]  # one of them in two parts: part 0 in iteration 2, part 1 in iteration 0
    late[2].append([cut, cut, 0, 2])
    late[0].append([cut, cut, 1, 2])
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps({"H": 3, "schedule": schedule, "delayed": late}))
    algo = ["algo=dreamddp", "algo.H=3", "algo.merge_delay=1", f"algo.schedule={path}"]
    a = train_completed(tmp_path / "a", [*SMALL, *algo])
    assert a["extra"]["algorithm"]["delayed"][2]
    b = train_completed(tmp_path / "b", [*SMALL, *algo, f"train.resume={tmp_path / 'a'}/checkpoints/step-0000003"])
    assert [r["iteration"] for r in b["iterations"]] == [3, 4, 5]
    state = torch.load(step_dir(tmp_path / "a", 3) / "rank00000.pt", weights_only=True)
    assert state["algorithm"]["sync"]["inflight"], "nothing was in flight at the save"
    for rank in (0, 1):
        name = f"rank{rank:05d}.pt"
        diff = _differences(step_dir(tmp_path / "a", 6) / name, step_dir(tmp_path / "b", 6) / name)
        assert diff == [], f"rank {rank}: {diff[:8]}"


def test_delay_one_copies_into_one_buffer_made_once():
    """merge_delay=1: every launch copies into one buffer, allocated at the first launch, the
    size of the largest iteration's late units (no allocation per step, none left to the
    backend's thread to free)."""
    setup = {"schedule": {"H": H, "schedule": SCHEDULE, "delayed": [[list(r) for r in its] for its in LATE]}}
    m = small_model()
    algo = build_algorithm(algo_cfg("dreamddp", H=H, merge_delay=1), setup)
    engine = PartialSyncEngine(m, enumerate_units(m), FakeCommunicator(world_size=2, peer_fn=peer), algo)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    storages = set()
    for t in range(2 * H):
        engine_step(engine, m, opt, t)
        storages |= {buf.untyped_storage().data_ptr() for buf, snapshot in late(algo).values()}
        assert all(snapshot is None for _, snapshot in late(algo).values())
    sizes = [sum(engine.tensor(op).numel() for op in algo.plan(h) if op.lag) for h in range(H)]
    assert len(storages) == 1 and algo.sync._arena.numel() == max(sizes) > min(s for s in sizes if s)


def test_payload_place_names_the_memory_the_engine_uses():
    """The simulator groups a wait's collectives by ``payload_place`` as the carrier groups the
    engine's tensors: in place, the unit's slice of the flat parameters; merged late with d = 1,
    its place in the one buffer of late copies."""
    setup = {"schedule": {"H": H, "schedule": SCHEDULE, "delayed": [[list(r) for r in its] for its in LATE]}}
    m = small_model()
    algo = build_algorithm(algo_cfg("dreamddp", H=H, merge_delay=1), setup)
    engine = PartialSyncEngine(m, enumerate_units(m), FakeCommunicator(world_size=2, peer_fn=peer), algo)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    storage = lambda x: x.untyped_storage().data_ptr()  # noqa: E731
    seen = set()
    for t in range(2 * H):
        engine_step(engine, m, opt, t)
        for op in algo.plan(t):
            buffer, offset = algo.payload_place(op, t, engine.layout)
            real = late(algo)[op][0] if op in late(algo) else engine.tensor(op)
            assert offset == real.storage_offset() * real.element_size()
            expected = algo.sync._arena if op in late(algo) else engine.flat.params
            assert storage(real) == storage(expected)
            seen.add(buffer)
    assert seen == {"params", "late copies"}


def test_a_late_run_too_long_for_its_room_is_cut_into_parts():
    # backward 1 s per unit, forward .5, step .1: a late collective has 3.5 s (one iteration's
    # compute less the step); a's all-reduce takes 6 s, so whole it overruns the next iteration
    # by 2.5 s, in two parts of 3 s it fits
    p = Profile(units=["c", "b", "a"], bp={"c": 1.0, "b": 1.0, "a": 1.0}, comm={"c": 0.1, "b": 0.1, "a": 6.0},
                fwd={"a": 0.2, "b": 0.2, "c": 0.1}, step_time=0.1)
    runs = [[(0, 0)], [(1, 1)], [(2, 2)], []]
    kept, whole = plan_delayed(p, 4, runs, 1, max_parts=1)
    assert whole[2] == [(2, 2)] and not whole[3]
    kept, cut = plan_delayed(p, 4, runs, 1, max_parts=4)
    assert cut[2] == [(2, 2, 0, 2)] and cut[3] == [(2, 2, 1, 2)]  # two parts gain all there is: no more
    plans = lambda late: window_plans(kept, late, 1, False)  # noqa: E731
    part = [op for op in plans(cut)[3] if op.lag]
    assert part == [SyncOp(2, 2, Payload.PARAM, When.AFTER_STEP, When.END_OF_BACKWARD, lag=1, part=(1, 2))]
    # a part may not go where its unit syncs again (the merge would overwrite that average) ...
    again = [[(0, 0)], [(1, 1)], [(2, 2)], [(2, 2)]]
    assert resyncs(again, 3, (2, 2, 1, 2), 1) and resyncs(again, 2, (2, 2), 1)
    assert not resyncs(again, 0, (2, 2, 2, 3), 1)  # part 2 of 3 in iteration 0 merges before iteration 2's
    # ... and whatever the search makes of such a window, no late collective of it does
    kept, late = plan_delayed(p, 4, again, 1, max_parts=4)
    assert not any(resyncs(kept, h, e, 1) for h, its in enumerate(late) for e in its)


def test_parts_split_the_run_exactly():
    for n in (1, 7, 10):
        for parts in (1, 2, 3, 4):
            bounds = [part_bounds(n, (k, parts)) for k in range(parts)]
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            assert max(hi - lo for lo, hi in bounds) - min(hi - lo for lo, hi in bounds) <= 1
    with pytest.raises(ValueError, match="part"):
        SyncOp(0, 0, Payload.PARAM, When.AFTER_STEP, When.END_OF_BACKWARD, lag=1, part=(2, 2))
    with pytest.raises(ValueError, match="one run"):
        SyncOp(0, 0, Payload.OUTER, When.AFTER_STEP, When.AFTER_STEP, part=(0, 2))


def test_the_search_keeps_a_cut_run_whole_and_never_lets_a_merge_be_overwritten():
    """Every candidate of the local search keeps each cut run's parts together at their home, and
    no late collective of it has its units synced again before its merge."""
    from dreamddp.schedule.delay import _moves

    H, delay = 5, 1
    runs = [[(0, 0), (3, 3)], [(1, 1)], [(2, 2)], [(0, 0)], [(3, 3)]]  # units 0 and 3 sync twice
    late = [[(3, 3, 0, 2)], [(3, 3, 1, 2)], [(2, 2)], [], []]
    comm = np.array([1.0, 2.0, 3.0, 4.0])
    seen = 0
    for rs, ls in _moves(runs, late, delay, comm):
        seen += 1
        chains, whole = {}, set()
        for h, its in enumerate(ls):
            for e in its:
                assert not resyncs(rs, h, e, delay), (rs, ls)
                if len(e) == 4:
                    home = (h - e[2]) % H
                    assert (e[0], e[1]) in rs[home], (rs, ls)
                    chains.setdefault((home, e[:2]), set()).add(e[2])
                else:
                    whole.add((h, e))
        assert chains == {(0, (3, 3)): {0, 1}} and (0, (3, 3)) not in whole, ls
    assert seen > 5


def test_late_averages_saved_for_other_buffers_are_a_one_line_error():
    """A checkpoint from packed buffers (the CPU's) resumed into padded ones (CUDA's): the late
    averages do not fit their runs, and the load says so before anything is adopted."""
    setup = {"schedule": {"H": H, "schedule": SCHEDULE, "delayed": [[list(r) for r in its] for its in LATE]}}

    def engine_with(align: int):
        m = small_model()
        algo = build_algorithm(algo_cfg("dreamddp", H=H, merge_delay=1), setup)
        comm = FakeCommunicator(world_size=2, peer_fn=peer)
        return PartialSyncEngine(m, enumerate_units(m), comm, algo, align_bytes=align), m

    engine, m = engine_with(0)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    for t in range(H):
        engine_step(engine, m, opt, t)
    engine.flush()
    state = engine.algorithm.state_dict()
    assert state["sync"]["inflight"]
    padded, _ = engine_with(512)
    with pytest.raises(ValueError, match="late average of units .* holds .* kind of device"):
        padded.algorithm.load_state_dict(state)
    assert not padded.in_flight()


def test_switching_algorithms_with_averages_still_to_merge_is_refused():
    """A late average belongs to the algorithm that launched it: switching before it merged
    would hand it to the new algorithm's merge.  Once merged, the switch goes through."""
    model = small_model()
    engine = PartialSyncEngine(model, enumerate_units(model), FakeCommunicator(world_size=2, peer_fn=peer),
                               algorithm(1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    engine_step(engine, model, opt, 0)  # unit 4's average launched late, merged in iteration 1
    with pytest.raises(RuntimeError, match=r"set_algorithm: 1 collective\(s\) of DreamDDP.*iteration 1"):
        engine.set_algorithm(algorithm(0))
    engine_step(engine, model, opt, 1)  # merged
    engine.set_algorithm(algorithm(0))
    engine_step(engine, model, opt, 2)
