"""The one translator from an algorithm's plan to a timeline: iteration time and exposed wait.

The simulator has no description of any algorithm of its own.  It takes the
plan the engine runs (``plan(t)``: tuples of ``engine.plan.SyncOp``, built by
the algorithm object bound to a torch-free ``UnitLayout`` of a profile's
units) and walks, per iteration, the points the engine walks:

    forward:  start-of-forward launches, then per unit in forward order
              (decreasing index): completions due in its pre-hook (wait), its
              launches, its forward seconds
    backward: unit i's gradient ready at the backward prefix sum; UNIT_READY
              ops launch when their last unit is ready
    END_OF_BACKWARD: launches, then completions due (wait)
    the optimizer step (``step_time``), less the share of it that ops with
              ``steps`` apply where they complete (DeAR: in forward, after
              each group's all-gather; DreamDDP with overlap_forward: after
              each average lands; where no link work hides it)
    AFTER_STEP: launches, then completions due (wait)

Every launch and every completion also costs the worker its host work on the
op (``Compute.launch_host``, ``Compute.complete_host``: the engine's measured
seconds per op, waits excluded): a launch in backward delays the gradients
after it, as the engine's hook runs on the thread that computes them.  A
compressed op adds its codec's (``Compute.op_host``): the payload is encoded
before its collective starts, and every rank's decoded after it completes.

Every collective queues on the worker's FIFO link (``start = max(link free,
launch)``), as the emulated link paces it, and is done at the later of its
link deadline and the moment the LAST rank launched it (a collective needs
every rank).  ``carrier`` adds the real backend's own transfer as the deferred
carrier (comm/carrier.py) runs it under an emulated link on a real host: the
collectives launched since the last flush start when the slowest rank first
waits for any of them, grouped into real collectives as the carrier groups
them (comm/carry.py: adjacent slices merged, small ones packed), one after
another, and each is done no earlier than its real collective.  What of them
runs past the wait takes the worker's core from the compute after it (``occupy``:
gloo's threads share the computing cores), as does what the step carrier starts
as an iteration ends, from the next one's compute.
Ranks are simulated side by side: each draws its compute time per iteration
from its own measured distribution (``Skew``: multiplicative factors on the
profile), so a plan that synchronises every iteration pays, every iteration,
for the slowest rank (the expected maximum over ranks, sampled), while one
that synchronises once per window pays for the ranks' drift once.  Drawn
``joint``, the ranks' samples are whole measured iterations (every rank's
compute in one of them), which keeps how they moved together: on a shared
host a slow spell slows every worker, and drawn apart it would count as skew.
Without skew all ranks are the profile and the result is exact.  ``speeds``
(dreamddp/speed.py: cluster.worker_speed and cluster.slow_spell) divides each
rank's forward and backward by its speed in that iteration, as the trainer
stretches them, so a sync point waits for the slowest rank; the link model's
rate is already the slowest uplink's (bandwidth.worker_gbps).

Runs that share the workers in turns (``Interleaving``) meet at a barrier every
``turn`` iterations, outside the timed iterations: it lines the ranks up (each
rank's link paused through its wait, as a run's link clock stands still outside
its own turns; the real backend's transfers done in the other runs' turns), so
drift between the ranks is paid only at the sync points inside a turn, and the
iteration reported is rank 0's, the rank whose record it is.  With one
iteration per turn a plan that synchronises once per window pays none of the
ranks' drift across the window; a continuous run does.

The link is not emptied between iterations: ops with ``lag`` (Streaming
DiLoCo, DreamDDP's delayed merge), forward-completed ops (DeAR, DreamDDP with
overlap_forward) and the traffic they queue carry over.  One window of
iterations is simulated first and dropped (nothing is in flight at the
first), then the measured iterations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dreamddp.engine.plan import Plan, SyncOp, When
from dreamddp.schedule.compute import Compute, Interleaving, Skew
from dreamddp.speed import Speeds


# The deferred carrier on a flush: the ops queued since the last one, (iteration launched, op)
# in launch order -> the real collectives it starts, in order: (indices into them, seconds).
Carrier = Callable[[list[tuple[int, SyncOp]]], list[tuple[list[int], float]]]


@dataclass
class SimResult:
    mean_iter: float
    mean_wait: float
    per_iter: list[tuple[float, float]]  # (iteration time, exposed wait), mean over ranks
    ops: list[list[SyncOp]] = field(default_factory=list)  # what each measured iteration launched


def simulate_plan(plan: Callable[[int], Plan], compute: Compute, duration: Callable[[SyncOp], float], *,
                  H: int, iterations: int | None = None, skew: Skew | None = None, world: int = 1,
                  carrier: Carrier | None = None, carrier_at_step: bool = False,
                  interleaving: Interleaving | None = None, speeds: Speeds | None = None,
                  window: Callable[[int, float, int], bool] | None = None) -> SimResult:
    """Time ``iterations`` (default: one window of ``H``) after a warm-up window of ``H``.

    ``duration(op)``: seconds the link takes for ``op``; ``carrier``: the real collectives
    the deferred carrier starts at a wait and their seconds (None: nothing beyond the link);
    ``carrier_at_step``: the step carrier, which also starts what is queued when an
    iteration ends (``bandwidth.carrier=step``); ``interleaving``: the run trained in turns
    with others (None: a continuous run, the iteration the mean over ranks); ``speeds``: each rank's compute speed per iteration;
    ``window``: a timed window's rule (engine/window.py ``takes``: whether a rank computes window
    position ``pos`` after ``elapsed`` seconds and ``steps`` steps of it), each rank deciding on
    its own clock; an iteration it skips costs it nothing and is not in its mean (the trainer
    records no row for it).
    Ranks: ``world`` when ``skew`` gives one sample set per rank or ``speeds`` differ, else one.
    """
    if not isinstance(H, int) or H < 1:
        raise ValueError(f"H must be an integer >= 1, got {H!r}")
    n = H if iterations is None else iterations
    if n < 1:
        raise ValueError(f"iterations must be >= 1, got {n}")
    if interleaving is not None and not isinstance(interleaving, Interleaving):
        raise ValueError(f"interleaving must be an Interleaving or None, got {interleaving!r}")
    turn = None if interleaving is None else interleaving.turn
    slowed = speeds is not None and not speeds.uniform
    ranks = len(skew.factors) if skew is not None else (world if slowed else 1)
    if skew is not None and ranks != world:
        raise ValueError(f"Skew: {ranks} ranks' samples for world {world}")
    sim = _Ranks(compute, duration, carrier, ranks, carrier_at_step)
    draw = _draws(skew, ranks, H + n)
    per_iter, ops = [], []
    elapsed, steps = np.zeros(ranks), np.zeros(ranks, dtype=int)  # per rank, in the timed window
    for t in range(H + n):
        if turn is not None and t % turn == 0:
            sim.barrier()
        # measured iterations start at H: their speeds are the run's from iteration 0
        speed = np.array([speeds.of(r, t - H) for r in range(ranks)]) if slowed else None
        factor = draw[t]
        if window is not None:
            if t % H == 0:
                elapsed[:], steps[:] = 0.0, 0
            active = np.array([window(t % H, elapsed[r], int(steps[r])) for r in range(ranks)])
            factor = factor * active  # a skipped iteration: no pass, no step, nothing to launch
        took, waited, launched = sim.iteration(plan(t), t, factor, speed)
        if window is not None:
            elapsed, steps = elapsed + took, steps + active
        if t >= H:
            if window is None:
                per_iter.append((float(took[0]), float(waited[0])) if turn is not None
                                else (float(took.mean()), float(waited.mean())))
            elif active[0] if turn is not None else active.any():
                mine = [0] if turn is not None else np.flatnonzero(active)
                per_iter.append((float(took[mine].mean()), float(waited[mine].mean())))
            ops.append(launched)
    return SimResult(float(np.mean([p[0] for p in per_iter])), float(np.mean([p[1] for p in per_iter])),
                     per_iter, ops)


def _draws(skew: Skew | None, ranks: int, n: int) -> np.ndarray:
    """(iterations, ranks) compute factors: sampled per rank from its own measurements."""
    if skew is None:
        return np.ones((n, ranks))
    rng = np.random.default_rng(skew.seed)
    if skew.joint:
        return np.stack(skew.factors, axis=1)[rng.integers(skew.factors[0].size, size=n)]
    return np.stack([rng.choice(f, size=n) for f in skew.factors], axis=1)


def _after(clock: np.ndarray, unit_forward: np.ndarray, units: list[int]) -> np.ndarray:
    """``clock`` plus each of ``units``' forward in turn: the same sums, rounded alike, as one
    addition per unit (accumulate adds left to right), in one array operation."""
    if not units:
        return clock
    if len(units) == 1:
        return clock + unit_forward[:, units[0]]
    return np.add.accumulate(np.concatenate([clock[:, None], unit_forward[:, units]], axis=1), axis=1)[:, -1]


class _Ranks:
    """Every rank's clock and FIFO link, advanced point by point through the plan."""

    def __init__(self, compute: Compute, duration, carrier, ranks: int, carrier_at_step: bool = False):
        self.c, self.duration, self.carrier = compute, duration, carrier
        self.carrier_at_step = carrier_at_step
        self.clock = np.zeros(ranks)
        self.link = np.zeros(ranks)
        self.due: dict[tuple[int, object], list[tuple[SyncOp, np.ndarray, np.ndarray, int]]] = {}
        self.launched: list[SyncOp] = []
        # the deferred carrier: launched ops whose real transfer has not started, and when
        # each started one ends (the backend runs them one after another); by launch number,
        # since a plan may hand out the same op object again before the first is done
        self.launches = 0
        self.stepping = 0.0  # optimizer-step seconds the ops completed at the current point apply
        self.factor = np.ones(ranks)  # this iteration's compute factor per rank (skew)
        self.queued: list[tuple[int, int, SyncOp]] = []  # (launch number, iteration, op)
        self.real_done: dict[int, float] = {}
        self.real_free = -np.inf

    def launch(self, op: SyncOp, t: int, at: np.ndarray) -> None:
        start = np.maximum(self.link, at)
        self.link = start + self.duration(op)
        key = (t + op.lag, op.last if op.complete is When.BEFORE_FORWARD else op.complete)
        # done no earlier than its link deadline and than the last rank's launch
        self.launches += 1
        self.due.setdefault(key, []).append((op, self.link, np.full_like(at, at.max()), self.launches))
        self.launched.append(op)
        if self.carrier is not None:
            self.queued.append((self.launches, t, op))

    def flush(self) -> None:
        """The first wait (the step carrier: also an iteration's end) starts every queued real
        transfer, once the slowest rank is there."""
        end = max(self.real_free, float(self.clock.max()))
        for members, seconds in self.carrier([(t, op) for _, t, op in self.queued]):
            end += seconds
            for i in members:
                self.real_done[self.queued[i][0]] = end
        self.real_free, self.queued = end, []

    def wait(self, key) -> np.ndarray | float:
        """Each rank's wait at ``key``; 0.0 where nothing completes there (no array to allocate)."""
        entries = self.due.pop(key, None)
        if not entries:
            return 0.0
        waited = np.zeros_like(self.clock)
        if self.queued:
            self.flush()
        for op, deadline, everyone, n in entries:
            done = np.maximum(deadline, everyone)
            if self.carrier is not None:
                done = np.maximum(done, self.real_done.pop(n))
            w = np.maximum(0.0, done - self.clock)
            self.clock = self.clock + w + self.c.complete_cost(op) * self.factor
            waited += w
            self.stepping += self.c.stepped(op)
        self.occupy()
        return waited

    def occupy(self) -> None:
        """The real transfers still running take the rank's core: its compute resumes when they
        end.  gloo's threads do their copies and sums on the computing cores: beside an
        all-reduce of 4-16 MiB, compute took 0.5-1.0 x the transfer's own time longer
        (docs/findings.md, the carrier check); charged whole, the upper end.  Behind a wait they
        cost nothing (the core idles there), and the queued carriers run only where the compute
        shares the host's cores (``bandwidth.carrier=auto`` is eager on GPUs)."""
        self.clock = np.maximum(self.clock, self.real_free)

    def apply(self) -> None:
        """The optimizer step the ops just completed apply (``SyncOp.steps``), after their wait."""
        if not self.stepping:
            return  # adding 0 x factor would leave the clock as it is
        self.clock = self.clock + self.stepping * self.factor
        self.stepping = 0.0

    def barrier(self) -> None:
        """A turn's barrier: every rank waits for the last, its link and what it has on the wire
        paused through the wait (so they keep their distance to its clock); every rank has
        launched what any launched, and the real backend finished its transfers meanwhile."""
        delta = self.clock.max() - self.clock
        self.clock, self.link = self.clock + delta, self.link + delta
        for key, entries in self.due.items():
            self.due[key] = [(op, deadline + delta, np.full_like(everyone, -np.inf), n)
                             for op, deadline, everyone, n in entries]
        self.real_done = {k: -np.inf for k in self.real_done}
        self.real_free = -np.inf

    def rebase(self) -> None:
        """Times relative to the earliest rank's clock, so long runs keep exact arithmetic."""
        zero = self.clock.min()
        self.clock, self.link, self.real_free = self.clock - zero, self.link - zero, self.real_free - zero
        self.real_done = {k: v - zero for k, v in self.real_done.items()}
        for key, entries in self.due.items():
            self.due[key] = [(op, deadline - zero, everyone - zero, n) for op, deadline, everyone, n in entries]

    def launch_here(self, op: SyncOp, t: int) -> None:
        """Launch at the rank's clock once its payload is made, then pay the launch's host work."""
        self.clock = self.clock + self.c.encode(op) * self.factor
        self.launch(op, t, self.clock)
        self.clock = self.clock + self.c.launch_host * self.factor

    def iteration(self, plan: Plan, t: int, factor: np.ndarray, speed: np.ndarray | None = None):
        c = self.c
        self.factor = factor
        passes = factor if speed is None else factor / speed  # forward and backward, stretched
        self.rebase()
        start = self.clock.copy()
        self.occupy()
        self.launched = []
        waited = np.zeros_like(self.clock)
        forward_launch: dict[object, list[SyncOp]] = {}
        for op in plan:
            if op.launch is When.BEFORE_FORWARD:
                forward_launch.setdefault(op.at, []).append(op)
        for op in forward_launch.get(None, ()):
            self.launch_here(op, t)
        self.clock = self.clock + c.fwd_rest * passes
        unit_forward = np.multiply.outer(passes, np.asarray(c.fwd, dtype=float))  # (ranks, units)
        quiet: list[int] = []  # units passed since the last with something to do, forward not yet added
        for u in range(len(c.fwd) - 1, -1, -1):  # forward order
            if (t, u) in self.due or u in forward_launch or self.stepping:
                self.clock = _after(self.clock, unit_forward, quiet)
                quiet = []
                waited += self.wait((t, u))
                for op in forward_launch.get(u, ()):  # the engine launches before it applies
                    self.launch_here(op, t)
                self.apply()
            quiet.append(u)
        self.clock = _after(self.clock, unit_forward, quiet)
        ready = self.clock[:, None] + np.cumsum(c.bp)[None, :] * passes[:, None]
        hooks = np.zeros_like(self.clock)  # host work of the launches so far, on backward's thread
        for op in sorted((op for op in plan if op.launch is When.UNIT_READY), key=lambda op: op.ready_unit):
            hooks = hooks + c.encode(op) * factor
            self.launch(op, t, ready[:, op.ready_unit] + hooks)  # stable: plan order among ties
            hooks = hooks + c.launch_host * factor
        self.clock = ready[:, -1] + hooks
        for op in plan:
            if op.launch is When.END_OF_BACKWARD:
                self.launch_here(op, t)
        for key in [k for k in self.due if k[0] <= t and isinstance(k[1], int)]:  # pre-hooks that did not run
            waited += self.wait(key)
        waited += self.wait((t, When.END_OF_BACKWARD))
        self.apply()
        # the step less what this plan's ops apply where they complete
        self.clock = self.clock + (c.step - sum(c.moved(op) for op in plan)) * factor
        for op in plan:
            if op.launch is When.AFTER_STEP:
                self.launch_here(op, t)
        waited += self.wait((t, When.AFTER_STEP))
        self.apply()
        if self.carrier_at_step and self.queued:
            self.flush()  # its transfers take the core from the next iteration's compute (occupy)
        return self.clock - start, waited, self.launched
