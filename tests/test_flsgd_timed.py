"""flsgd_timed (dreamddp/algorithms/flsgd_timed.py), exact on a fake communicator with an injected
clock: full windows are FLSGD bitwise; the merge weights each replica by the steps its window
took; the window's decision excludes time outside the steps and resumes from a checkpoint."""

from __future__ import annotations

import pytest
import torch

from dreamddp.algorithms import build_algorithm
from dreamddp.algorithms.flsgd_timed import FLSGDTimed
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.config import ConfigError
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.units import enumerate_units
from engine_fixtures import algo_cfg, batch, engine_step, loss_of, small_model

W = 2


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def vector(model) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()


def twin(kind, tag, t):
    """The other replica holds what we hold and took as many steps: its weight in its own row."""
    return [t, torch.cat([t[:-W], t[-W:].roll(1)])]


class Worker:
    """One replica driven as the trainer drives it: ``window.steps_at`` first; a computed iteration takes
    ``dt`` seconds of the clock and the replica's next batch."""

    def __init__(self, rank: int, dt: float, peer_fn=None, **kw):
        self.rank, self.dt, self.clock = rank, dt, Clock(1000.0 * rank)  # the ranks' clocks need not agree
        self.model = small_model()
        self.algo = FLSGDTimed(algo_cfg("flsgd_timed", **kw), clock=self.clock)
        self.comm = FakeCommunicator(W, rank, peer_fn or twin)
        self.engine = PartialSyncEngine(self.model, enumerate_units(self.model), self.comm, self.algo)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        self.computed, self.merged, self.before_merge = [], {}, None

    def run(self, iterations: range) -> "Worker":
        for t in iterations:
            if not self.algo.window.steps_at(t):
                continue
            self.engine.begin_iteration(t)
            loss_of(self.model, batch(self.rank, len(self.computed))).backward()
            self.engine.end_backward()
            self.engine.step(self.opt)
            self.before_merge = vector(self.model)
            self.engine.after_step()
            self.clock.now += self.dt
            self.computed.append(t)
            if record := self.algo.iteration_record():
                self.merged[t] = record["window_steps"]
        return self


def local_sgd(rank: int, steps: int) -> torch.Tensor:
    """``steps`` plain local SGD steps on the replica's batches (what a window computes before its merge)."""
    model = small_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for k in range(steps):
        opt.zero_grad()
        loss_of(model, batch(rank, k)).backward()
        opt.step()
    return vector(model)


def test_full_windows_are_flsgd_bitwise():
    """A window long enough for all H steps on every worker: weights 1, divisor 1, FLSGD's average."""
    H, steps = 3, 9

    def peers(kind, tag, t):  # the other replica holds three times ours and took as many steps
        return [t, torch.cat([3 * t[:-W], t[-W:].roll(1)])]

    timed = Worker(0, 0.01, peers, H=H, window_s=1e6).run(range(steps))
    assert timed.computed == list(range(steps))
    assert timed.merged == {2: [3, 3], 5: [3, 3], 8: [3, 3]}
    model = small_model()
    engine = PartialSyncEngine(model, enumerate_units(model), FakeCommunicator(W, 0, lambda kind, tag, t: [t, 3 * t]),
                               build_algorithm(algo_cfg("flsgd", H=H)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for t in range(steps):
        engine_step(engine, model, opt, t)
    assert torch.equal(vector(timed.model), vector(model))


def test_each_worker_takes_the_steps_that_fit_and_the_merge_weights_them():
    """window_s = 4: a worker at 1 s per step computes iterations 0, 1, 2 and the last (4 steps),
    one at 2 s per step 0 and the last (2 steps); the merge is (4 theta_0 + 2 theta_1) / 6."""
    fast, slow = Worker(0, 1.0, H=8, window_s=4.0), Worker(1, 2.0, H=8, window_s=4.0)
    slow.run(range(8))
    sent_by_slow = slow.comm.calls[-1].values  # its launch-time payload: [s theta_1, 0, s]
    fast.comm.peer_fn = lambda kind, tag, t: [t, sent_by_slow]
    fast.run(range(8))
    assert (fast.computed, slow.computed) == ([0, 1, 2, 7], [0, 7])
    assert fast.merged == {7: [4, 2]}
    theta0, theta1 = local_sgd(0, 4), local_sgd(1, 2)
    assert torch.equal(fast.before_merge, theta0)
    torch.testing.assert_close(vector(fast.model), (4 * theta0 + 2 * theta1) / 6, rtol=1e-6, atol=1e-7)
    assert fast.comm.calls[-1].nbytes == 4 * (theta0.numel() + W)  # the parameters and one weight per worker


def test_equal_step_counts_merge_to_the_plain_average():
    a, b = Worker(0, 1.0, H=6, window_s=3.0), Worker(1, 1.0, H=6, window_s=3.0)
    b.run(range(6))
    a.comm.peer_fn = lambda kind, tag, t: [t, b.comm.calls[-1].values]
    a.run(range(6))
    assert a.computed == b.computed == [0, 1, 5] and a.merged == {5: [3, 3]}
    torch.testing.assert_close(vector(a.model), (local_sgd(0, 3) + local_sgd(1, 3)) / 2, rtol=1e-6, atol=1e-7)


def test_the_window_starts_afresh_after_each_merge():
    w = Worker(0, 1.0, H=4, window_s=2.0).run(range(12))
    assert w.computed == [0, 3, 4, 7, 8, 11] and w.merged == {3: [2, 2], 7: [2, 2], 11: [2, 2]}


def test_time_outside_the_steps_does_not_count_against_the_window():
    """An evaluation (after the engine's flush) of 100 s mid-window leaves the window as it was."""
    w = Worker(0, 1.0, H=8, window_s=4.0).run(range(2))
    w.engine.flush()
    w.clock.now += 100.0
    w.run(range(2, 8))
    assert w.computed == [0, 1, 2, 7]


def test_a_checkpoint_mid_window_resumes_the_window_and_the_trajectory():
    whole = Worker(0, 1.0, H=8, window_s=5.0).run(range(16))
    first = Worker(0, 1.0, H=8, window_s=5.0).run(range(10))
    first.engine.flush()
    state = first.algo.state_dict()
    assert state == {"window": {"steps": 2, "elapsed_s": 2.0}}
    second = Worker(0, 1.0, H=8, window_s=5.0)
    second.clock.now = 1e5  # a new process: another clock
    with torch.no_grad():
        for p, q in zip(second.model.parameters(), first.model.parameters()):
            p.copy_(q)
    second.opt.load_state_dict(first.opt.state_dict())
    second.algo.load_state_dict(state)
    second.computed = list(first.computed)  # the data position: the batches already taken
    second.run(range(10, 16))
    assert second.computed == whole.computed == [0, 1, 2, 3, 7, 8, 9, 10, 11, 15]
    assert torch.equal(vector(second.model), vector(whole.model))


def test_one_iteration_windows_step_and_merge_every_iteration():
    w = Worker(0, 5.0, H=1, window_s=1.0).run(range(3))
    assert w.computed == [0, 1, 2] and w.merged == {0: [1, 1], 1: [1, 1], 2: [1, 1]}


def test_a_window_of_no_time_is_refused():
    with pytest.raises(ConfigError, match=r"^algo.window_s=0.0: must be > 0"):
        build_algorithm(algo_cfg("flsgd_timed", window_s=0.0))
