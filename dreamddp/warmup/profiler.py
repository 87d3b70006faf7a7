"""Profiling a live run: per-unit forward, backward and all-reduce times.

Runs on every worker of the real job, on the real model, data and link:

* forward per unit from forward pre-hooks (on alternate passes, so the
  hooks' own cost stays out of the totals): from a unit's pre-hook to the next
  unit's, the last unit's to the end of the pass, rescaled so the units sum to
  the forward pass measured on the other passes.  Work outside every unit
  (attention, activations, a tied output head, the loss) is charged to the
  unit it follows, because what a plan needs is when each unit's pre-hook
  runs: a unit's own time (pre- to post-hook) left half of GPT-2's forward
  outside the units (56.7 of 115.7 ms on the compute preset, 29 ms of it the
  tied head and the loss after ``ln_f``), which the rescaling spread over all
  units, so the simulator predicted 12 ms of forward after DeAR's last
  all-gather where 37 ms ran (results/simulator/README.md, run before this);
* backward per unit from the engine's gradient-ready timeline (the time from
  the previous unit's readiness to this one's; the tail after the last unit
  is charged to the last unit, so the units sum to the backward pass);
* the blocking all-reduce of each unit's parameters through the configured
  communicator and link, on a scratch buffer (``comm_repeats`` times, the
  median kept; 0 = not measured, e.g. before the link has a rate);
* the optimizer step (with clipping) as ``optimizer_time``, and as
  ``step_time`` the whole pass less its forward and backward, as the training
  loop's records count "step and the rest": the optimizer step and the
  engine's per-iteration work around it (zeroing the flat gradients as the
  pass begins, most of it: a memset of every gradient, gone cold in the
  caches since the last step; its books at the pass's start and end).  On ResNet-18's
  compute preset (2 workers, one per core) that work is 2.0 ms beside a
  4.2 ms optimizer step, 1.4% of a DreamDDP iteration at comm/backward 7, which a profile of the optimizer
  step alone left out of every in-run prediction;
* what one more optimizer call costs, ``optimizer_call_time``: every unit
  stepped in its own call against all of them in one, per extra call (an
  algorithm that steps where its collectives complete, SyncOp.steps, makes one
  call per op: on ResNet-18's compute preset DreamDDP with overlap_forward's
  per-average steps took 3.1-3.3 ms of forward where their share of the one
  step and their calls come to 2.2 ms, results/bench_forward_steps);
* every rank's compute time (its whole pass) of each timed pass, in
  ``meta["compute_by_rank"]``: the spread between workers and passes that
  the simulator charges at every sync point (its skew).

A worker slower than full speed (``speed``: its speed in pass t, dreamddp/speed.py) waits after
its forward and its backward as training makes it wait, so the passes run beside the others'
waits as training's do (on a shared host a worker computes faster while its neighbour sleeps:
results/bench/unequal measured a profile without the waits predicting a slow worker's FLSGD too
slow); the times kept are the passes' own, waits excluded.

``iterations`` unperturbed passes are timed (plus as many hooked ones and
``warmup`` dropped ones).  Per unit the median over passes, rescaled so the
units sum to the median pass (a pass that lost its core for a while moves a
median little and a mean a lot); then the mean over ranks, so all ranks agree on
one profile (and so schedule identically).  Not the element-wise maximum:
with more workers than cores, each unit's maximum over ranks catches some
rank's stall, and the sum of those maxima overstated the backward pass by 60%
(4 workers, 2 cores), which led bubble filling to add syncs that the real
backward pass could not hide.  Training state (parameters, optimizer state, buffers such as
BatchNorm statistics) is snapshotted before and restored after.
"""

from __future__ import annotations

import copy
import functools
import statistics
from typing import Callable

import torch

from dreamddp.clock import Stamps
from dreamddp.comm.gather import gather_by_rank
from dreamddp.engine import substep
from dreamddp.schedule.profile import Profile
from dreamddp.speed import stretch


def measure_profile(engine, comm, optimizer, loss_fn: Callable[[], torch.Tensor], *, iterations: int,
                    warmup: int = 2, comm_repeats: int = 3, meta: dict | None = None,
                    speed: Callable[[int], float] | None = None) -> Profile:
    units = engine.units
    model = engine.model
    state = _snapshot(engine, optimizer)
    fwd_unit = [[] for _ in units]
    bwd_unit = [[] for _ in units]
    fwd_tot, bwd_tot, steps, rests = [], [], [], []
    marks = Stamps(len(units), engine.flat.params.device)  # per unit: its forward pre-hook
    hooks = []
    # Per-unit marks (forward hooks, the engine's gradient-ready stamps) run on odd passes only,
    # which give each unit's share; even passes, unmarked, give the totals the shares scale to.
    # On an H200 GPT-2 124M's 75 marks (CUDA events) lengthened its backward pass 10-14%
    # (results/gpu/README.md, run 6).
    timing = [False]

    clock = engine.clock  # on CUDA each stamp synchronises the device first (per-unit marks do not)

    def pre(i, *_):
        if timing[0]:
            marks.mark(i)

    for u in units:
        hooks.append(model.get_submodule(u.name).register_forward_pre_hook(functools.partial(pre, u.index)))
    sample_every = engine.sample_every
    try:
        for t in range(warmup + 2 * iterations):
            timing[0] = t >= warmup and (t - warmup) % 2 == 1
            engine.sample_every = 1 if timing[0] else 0
            engine.begin_iteration(t)
            t0 = clock()
            marks.begin(t0)
            loss = loss_fn()
            t1 = clock()
            if timing[0]:
                for i, seconds in enumerate(forward_intervals(marks.read(), t1 - t0, marks.marked())):
                    if seconds is not None:
                        fwd_unit[i].append(seconds)
            slow = 1.0 if speed is None else speed(t)
            b0 = clock() if slow < 1 and stretch(t1 - t0, slow) else t1  # backward's start
            loss.backward()
            t2 = clock()
            t2w = clock() if slow < 1 and stretch(t2 - b0, slow) else t2  # and the wait after it
            engine.end_backward()
            engine.step(optimizer)
            t3 = clock()
            stats = engine.after_step()
            if t < warmup:
                continue
            if not timing[0]:
                fwd_tot.append(t1 - t0)
                bwd_tot.append(t2 - b0)
                steps.append(t3 - t2w)
                rests.append((stats.end - stats.start) - (t2w - t0))  # the pass less forward, backward, waits
                continue
            prev = b0 - stats.start
            for u in units:
                ready = stats.unit_ready[u.index]
                bwd_unit[u.index].append(max(0.0, ready - prev))
                prev = max(prev, ready)
            bwd_unit[-1][-1] += max(0.0, (t2 - stats.start) - prev)
        call = _call_seconds(engine, optimizer, clock, repeats=max(3, iterations))
    finally:
        engine.sample_every = sample_every
        for h in hooks:
            h.remove()
        _restore(engine, optimizer, state)

    comm_t = _comm_times(engine, comm, comm_repeats)
    fwd = _shares(fwd_unit, statistics.median(fwd_tot))
    bwd = _shares(bwd_unit, statistics.median(bwd_tot))
    medians = torch.tensor([statistics.median(steps), statistics.median(rests), call], dtype=torch.float64)
    vec = torch.cat([fwd, bwd, comm_t, medians])
    comm.all_reduce_mean(vec)  # all ranks agree on the typical worker
    n = len(units)
    fwd, bwd, comm_t = vec[:n].tolist(), vec[n : 2 * n].tolist(), vec[2 * n : 3 * n].tolist()
    optimizer, rest, call = float(vec[-3]), float(vec[-2]), float(vec[-1])
    names = [u.name for u in units]
    passes = [f + b + r for f, b, r in zip(fwd_tot, bwd_tot, rests)]
    # Per-unit maps in forward order, the order save_profile writes and load_profile reads: a
    # profile read back from a run's profile/ then sums to the same bits as the one measured
    # (the prediction of a run resumed from its checkpoint is the run's own)
    forward = lambda values: dict(reversed(list(zip(names, values))))  # noqa: E731
    return Profile(
        units=names,
        bp=forward(bwd),
        comm=forward(comm_t),
        fwd=forward(fwd),
        nbytes=forward([u.nbytes for u in units]),
        step_time=max(rest, optimizer),
        optimizer_time=optimizer,
        optimizer_call_time=call,
        meta={"iterations": iterations, "warmup": warmup, "forward_total": sum(fwd), "backward_total": sum(bwd),
              "world": comm.world_size, "compute_by_rank": gather_by_rank(comm, passes), **(meta or {})},
    )


def forward_intervals(at: list[float], total: float, ran: list[bool]) -> list[float | None]:
    """Each unit's forward seconds in one pass of ``total`` seconds, from the pass-relative
    times of the units' pre-hooks (``ran[i]`` False: the unit did not run, None out): from its
    pre-hook to the next one in time, the last unit's to the pass's end, the first's from the
    pass's start.  Ordered by time, not by unit index: a model may call its units in another
    order.  Whether a unit ran is asked of the marks, not read off a time of 0.0: on CUDA the
    first unit's event can read 0.0 s after the pass's start event."""
    called = sorted((t, i) for i, (t, r) in enumerate(zip(at, ran)) if r)
    out: list[float | None] = [None] * len(at)
    for k, (t, i) in enumerate(called):
        end = called[k + 1][0] if k + 1 < len(called) else total
        out[i] = max(0.0, end - (0.0 if k == 0 else t))
    return out


def _shares(samples: list[list[float]], total: float) -> torch.Tensor:
    """Per-unit medians over passes, rescaled to sum to ``total`` (equal shares if none timed)."""
    med = torch.tensor([statistics.median(x) if x else 0.0 for x in samples], dtype=torch.float64)
    return med * (total / med.sum()) if med.sum() > 0 else torch.full_like(med, total / len(samples))


def _comm_times(engine, comm, repeats: int) -> torch.Tensor:
    """Blocking all-reduce of each unit's parameter count, on the flat gradient buffer (zeroed
    after: no gradient is pending between passes).  Not a scratch tensor of its own: gloo
    could keep one alive past set-up, a largest unit's worth of memory in the training loop."""
    out = torch.zeros(len(engine.units), dtype=torch.float64)
    if repeats == 0:
        return out
    scratch = engine.flat.grads
    for u in engine.units:
        times = []
        for _ in range(repeats):
            t0 = engine.clock()
            comm.all_reduce_avg(scratch[: u.numel], tag=f"profile:{u.name}").wait()
            times.append(engine.clock() - t0)
        out[u.index] = statistics.median(times)
    comm.drain()
    engine.flat.zero_grads()
    return out


def _call_seconds(engine, optimizer, clock, repeats: int) -> float:
    """Seconds one more optimizer call costs beyond its parameters' work: every unit with
    parameters stepped in its own call against all of them in one call (medians over
    ``repeats``), over the extra calls.  Steps the parameters: the caller restores them."""
    units = [u.index for u in engine.units if u.params]
    if len(units) < 2:
        return 0.0
    whole = substep.SubsetStepper(optimizer, substep.unit_params(engine, units))
    each = [substep.SubsetStepper(optimizer, substep.unit_params(engine, [u])) for u in units]
    hyper = substep.snapshot(optimizer)
    whole.step(hyper)  # the state (momentum buffers) exists before anything is timed
    one, split = [], []
    for _ in range(repeats):
        t0 = clock()
        whole.step(hyper)
        t1 = clock()
        for stepper in each:
            stepper.step(hyper)
        t2 = clock()
        one.append(t1 - t0)
        split.append(t2 - t1)
    return max(0.0, (statistics.median(split) - statistics.median(one)) / (len(units) - 1))


def _snapshot(engine, optimizer):
    buffers = {k: v.detach().clone() for k, v in engine.model.named_buffers()}
    return engine.flat.params.detach().clone(), copy.deepcopy(optimizer.state_dict()), buffers


def _restore(engine, optimizer, state) -> None:
    params, opt_state, buffers = state
    with torch.no_grad():
        engine.flat.params.copy_(params)
        for k, v in engine.model.named_buffers():
            v.copy_(buffers[k])
    optimizer.load_state_dict(opt_state)
    engine.flat.zero_grads()
