"""FLSGD over a window of fixed wall-clock length (``algo=flsgd_timed``): no worker waits for the slowest.

A window is H iterations of the trainer: ``train.iterations`` counts iterations as for every
algorithm, so evaluation, checkpoints and the end of the run come at the same iteration on
every worker.  In each window worker i computes the first iteration, then each further one
while its elapsed wall time e since the window began, plus two of its mean steps so far
(e + 2 e / j after j steps), stays within ``algo.window_s`` (this step and the window's last
both fit); it idles through the rest (no batch, no step: engine/window.py, the policy the
trainer, the engine and the simulator share) and
computes the window's last iteration, after whose optimizer step every worker joins the merge,
weighted by the samples each processed in the window (Decoupled DiLoCo's token weighting; every
worker's batch is train.batch_size, so by steps)::

    theta <- sum_i n_i theta_i / sum_i n_i          n_i: worker i's optimizer steps in the window

sent as one all-reduce (AVG) of [s_i theta_i, s_i e_i] with s_i = n_i / H and e_i rank i's
one-hot row of W: every rank learns every n_j and sets theta <- mean_i(s_i theta_i) / (sum_j n_j
/ (H W)).  When every worker took all H steps, s_i = 1 and the divisor is 1: FLSGD's average,
bitwise.  A worker takes min(H, 2) to H steps: H caps the window so that all meet the merge at
one iteration, and a worker that reaches the cap before its time is up waits there (set H above
the fastest worker's steps per window).  Time outside the steps (evaluation, checkpoints: the
engine's flush precedes each) does not count against the window; a checkpoint keeps the steps
taken and the time elapsed.  The learning-rate schedule follows the iteration, idle ones too.
``clock`` (default ``time.perf_counter``; on CUDA each engine iteration ends on a synchronised
stamp, so the host clock is then the device's) is injectable for exact tests.

Why not DreamDDP's layer-wise schedule on the same window: it syncs different units at different
iterations of a window of H, each from its gradient-ready hook, and the replicas' unit u meets
only if every worker runs iteration k(u) with a backward.  With a wall-clock window a worker's
computed iterations depend on its speed: the idle tail has no backward to sync in, and moving
the syncs onto the iterations each worker does compute pairs unit u on one worker with another
unit on the next.  Only a whole-model merge at one agreed iteration lines up.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dreamddp.algorithms.base import ALGORITHMS, AlgoConfig, Algorithm, Display, op_tag
from dreamddp.checks import positive
from dreamddp.engine.plan import Payload, SyncOp, When
from dreamddp.engine.window import TimedWindow
from dreamddp.lazy import lazy

torch = lazy("torch")


@dataclass
class TimedConfig(AlgoConfig):
    # Wall-clock seconds of a window, measured by each worker from the window's first iteration;
    # it takes the steps that fit (at least min(H, 2)), then idles to the window's last iteration.
    window_s: float = 1.0


@ALGORITHMS.register
class FLSGDTimed(Algorithm):
    name = "flsgd_timed"
    on_shards = "its merge weights each replica by steps through a whole-model path not written for local shards"
    Config = TimedConfig
    display = Display(45, periodic=True)
    syncs = "own"  # its merge weights each replica by its steps

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        positive("algo.window_s", cfg.window_s)

    @classmethod
    def window_policy(cls, cfg):
        return TimedWindow(cfg.H, cfg.window_s)

    def __init__(self, cfg, setup: dict | None = None, clock=None):
        super().__init__(cfg, setup)
        self.window = TimedWindow(cfg.H, cfg.window_s, clock)  # the trainer and the engine drive it
        self._merged: list[int] | None = None  # every worker's steps, from this iteration's merge

    def make_plan(self, layout) -> None:
        op = SyncOp(0, len(layout) - 1, Payload.OUTER, When.AFTER_STEP, When.AFTER_STEP)
        numel = layout.op_bytes(op) // layout.itemsize
        # the parameters and W weights (a profile without bytes: the measured times as they are)
        self._sync = (replace(op, scale=(numel + layout.world) / numel if numel else 1.0),)

    def base_plan(self, t: int):
        return self._sync if (t + 1) % self.cfg.H == 0 else ()

    def bind(self, engine) -> None:
        super().bind(engine)
        a, b = engine.flat.span(0, len(engine.units) - 1)
        params = engine.flat.params
        self._buf = torch.empty(b - a + engine.layout.world, dtype=params.dtype, device=params.device)

    # ---- the weighted merge ----
    def launch(self, engine, op: SyncOp):
        a, b = engine.flat.span(op.first, op.last)
        n, buf = b - a, self._buf
        s = self.window.steps / self.cfg.H
        if s == 1:
            buf[:n].copy_(engine.flat.params[a:b])
        else:
            torch.mul(engine.flat.params[a:b], s, out=buf[:n])
        buf[n:].zero_()
        buf[n + engine.comm.rank] = s
        return engine.comm.all_reduce_avg(buf, tag=op_tag(engine, op, "param"))

    def on_complete(self, engine, op: SyncOp) -> None:
        a, b = engine.flat.span(op.first, op.last)
        n, world, H = b - a, engine.layout.world, self.cfg.H
        counts = [round(x * world * H) for x in self._buf[n:].double().tolist()]
        divisor = sum(counts) / (H * world)  # exactly 1.0 when every worker took H steps
        params = engine.flat.params[a:b]
        if divisor == 1:
            params.copy_(self._buf[:n])
        else:
            torch.div(self._buf[:n], divisor, out=params)
        self._merged = counts
        self.window.close()

    def iteration_record(self) -> dict:
        merged, self._merged = self._merged, None
        return {} if merged is None else {"window_steps": merged}

    # ---- checkpoints: the open window ----
    def state_dict(self) -> dict:
        return {"window": self.window.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        state = dict(state)
        window = state.pop("window", None)
        if window is not None:
            self.window.load_state_dict(window)
        super().load_state_dict(state)

    def describe(self) -> dict:
        return {"name": self.name, "H": self.cfg.H, "window_s": self.cfg.window_s}
