"""The one sync pipeline every op of every algorithm's plan passes through.

An algorithm states which units sync when (its plan); the stages (engine/stages.py) say
what travels and how it lands.  Per op:

1. plan (torch-free, ``plan``: the engine runs and the simulator times the same ops): a
   gradient op with a codec becomes an all-gather of every rank's payload; a parameter op
   whose stages need an anchor sends the units' change since it (``Payload.OUTER``); timing
   ``late``/``eager`` launch it after the step and complete it a window later (``lag = H``);
   ``moments_every`` adds a ``Payload.STATE`` op after the step.  ``SyncOp.scale`` charges the
   bytes the codec sends.
2. launch: gradients and parameters averaged in place (no stage: the plain algorithm), or
   the payload made (the gradient, or ``Delta = anchor - theta``; late: ``s - theta`` with
   ``s`` where the unit's progress is measured from), plus the error-feedback residual
   ``v = x + decay * e``, encoded, all-gathered, every rank's payload decoded and summed in
   rank order (every rank the same mean, bitwise), ``e <- v - decode(encode(v))``.
3. complete, with ``Delta_bar`` the mean (over every rank, or ``senders``: over the ranks
   that sent each index):
   - gradient: the gradient slice becomes ``Delta_bar``;
   - a unit's first sync of its window (its outer step): ``A <- OuterStep(A, Delta_bar)``
     (avg: ``A - Delta_bar``; else the torch optimizer on the unit's anchor), then
     in place ``theta <- alpha * theta + (1 - alpha) * A`` (alpha: streaming_diloco's mix,
     else 0); late ``theta <- theta + A - s; s <- theta``;
   - a unit's further syncs in the window (DreamDDP's bubble filling) take no outer step:
     ``theta <- A - Delta_bar``, the average (our rule: a second outer step would stack
     momentum on a one-step pseudo-gradient, which made layer-wise DiLoCo climb);
   - eager (Kale et al. 2025), at the end of window k with this worker's fresh change
     ``Delta_k`` (just launched), its stale one ``Delta_{k-1}`` and the landed mean:
     ``g = Delta_bar_{k-1} + (Delta_k - Delta_{k-1}) / W``, ``A <- OuterStep(A, g)``,
     ``theta <- A`` (the first window steps on ``Delta_0 / W`` at its launch; the run's end
     lands the last mean with ``Delta_k = A - theta``);
   - a parameter op launched after the step without an anchor (dreamddp's ``merge_delay``,
     or ``late`` with plain averaging) averages a copy ``s``: ``theta <- avg(s) + theta - s``.
"""

from __future__ import annotations

from dataclasses import replace

from dreamddp.engine.gather import cat, gather_mean, slice_of, split
from dreamddp.engine.plan import Payload, SyncOp, When, contiguous_runs
from dreamddp.engine.stages import anchored, codec_of
from dreamddp.lazy import lazy

torch = lazy("torch")

MOMENTS = ("exp_avg", "exp_avg_sq")  # Adam's state keys (DES-LOC's u and v)
TAGS = {"grad": "grad", "delta": "outer", "copy": "late", "state": "state"}  # accounting tag per role


class Landed:
    """The handle of a transfer completed before a checkpoint was taken (``Engine.adopt``)."""

    def wait(self) -> float:
        return 0.0


class Pipeline:
    def __init__(self, cfg, alpha: float = 0.0):
        self.cfg, self.alpha, self.H = cfg, alpha, int(cfg.H)
        self.codec = codec_of(cfg)
        self.anchored = anchored(cfg)
        self.every = [int(k) for k in cfg.moments_every]
        self.syncs_moments = any(self.every)
        self._plans: dict = {}  # (id(base plan), moments) -> (base plan, plan)
        self.role: dict[SyncOp, str] = {}  # rewritten op -> grad | delta | copy | state

    # ---- 1. the plan (torch-free) ----
    def bind_plan(self, base_plan, layout) -> None:
        self.layout = layout
        self.engine_plan = lambda t: self.plan(base_plan(t), t)  # iteration t's ops as they travel
        self._plans.clear()
        self.first = [set() for _ in range(self.H)]  # units whose first sync of the window is at pos
        seen: set[int] = set()
        for pos in range(self.H if self.anchored else 0):  # periodic parameter plans only (DeAR's is stateful)
            for op in base_plan(pos):
                if op.payload is Payload.PARAM:
                    self.first[pos].update(u for u in op.units if u not in seen)
                    seen.update(op.units)
        self.state_op = SyncOp(0, len(layout) - 1, Payload.STATE, When.AFTER_STEP, When.AFTER_STEP)

    def plan(self, base: tuple, t: int) -> tuple:
        moments = tuple(k > 0 and (t + 1) % k == 0 for k in self.every) if self.syncs_moments else ()
        key = (id(base), moments)
        hit = self._plans.get(key)
        if hit is None or hit[0] is not base:
            if len(self._plans) >= 256:  # a plan built fresh each iteration: keep the index bounded
                self._plans.clear()
            ops = tuple(self.rewrite(op) for op in base)
            if any(moments):
                ops += (replace(self.state_op, scale=float(sum(moments))),)
                self.role[ops[-1]] = "state"
            hit = self._plans[key] = (base, ops)
        return hit[1]

    def rewrite(self, op: SyncOp) -> SyncOp:
        """``op`` as it travels (module docstring, 1)."""
        role, new = None, op
        if op.payload is Payload.GRAD and self.codec is not None and op.collective == "all_reduce":
            role, new = "grad", replace(op, payload=Payload.OUTER)
        elif op.payload is Payload.PARAM and (self.anchored or op.more):
            role, new = "delta", replace(op, payload=Payload.OUTER)
        elif op.payload is Payload.PARAM and self.cfg.timing == "late":
            role = "copy"
        if role in ("delta", "copy") and self.cfg.timing != "in_place":
            # launched after the step, landed a window later after the step, when the next
            # launch of the same units has gone out (eager needs that fresh change)
            new = replace(new, launch=When.AFTER_STEP, complete=When.AFTER_STEP, lag=self.H)
        elif op.payload is Payload.PARAM and op.launch is When.AFTER_STEP and op.lag:
            role = role or "copy"  # the plan's own late merge (dreamddp merge_delay)
        if role in ("grad", "delta") and self.codec is not None:
            numel = max(1, self.layout.op_bytes(op) // self.layout.itemsize)
            new = replace(new, collective="all_gather",
                          scale=self.layout.world * self.codec.nbytes(numel) / (self.layout.itemsize * numel))
        if role:
            self.role[new] = role
        return new

    def compressed_numel(self, op: SyncOp) -> int:
        """Elements the codec encodes for ``op`` (as it travels, from ``plan``); 0: not compressed."""
        if self.codec is None or self.role.get(op) not in ("grad", "delta"):
            return 0
        return max(1, self.layout.op_bytes(op) // self.layout.itemsize)

    # ---- tensors ----
    def bind(self, engine) -> None:
        self.engine, flat, cfg = engine, engine.flat, self.cfg
        params = flat.params
        self.world = engine.comm.world_size
        self._sent: dict = {}  # (op, launch iteration) -> what its completion needs
        self._arena = None
        self.anchor = params.detach().float().clone() if self.anchored else None
        keep = self.codec is not None and cfg.error_feedback
        self.residual = torch.zeros(params.numel(), dtype=torch.float32, device=params.device) if keep else None
        late = cfg.timing == "late" and self.anchored  # eager keeps its sent change with the op in flight
        self.snapshot = params.detach().float().clone() if late else None  # s: where the window's progress starts
        self.started: set = set()  # spans launched once (late, eager: their first window is special)
        self.outer = None
        if self.anchored and cfg.outer_optimizer != "avg":
            self.unit_params = [torch.nn.Parameter(self.anchor[a:b], requires_grad=False)
                                for a, b in (flat.span(u, u) for u in range(len(engine.units)))]
            self.outer = make_outer(cfg, self.unit_params)
        self._moment_params = [p for u in engine.units for p in u.params]

    def prefix(self, op: SyncOp) -> str | None:
        """The accounting tag's kind for ``op`` (None: its payload's name)."""
        return TAGS.get(self.role.get(op))

    def place(self, op: SyncOp, t: int, layout):
        """Where a copy averaged late travels (None: the op is not one): with lag 1 in the one
        buffer of late copies, after this iteration's earlier ones (the only ones in flight
        then), else a copy of its own."""
        if self.role.get(op) != "copy":
            return None
        if op.lag > 1:
            return ("copy", t, op), 0
        offset = 0
        for o in self.engine_plan(t % self.H):
            if o == op:
                break
            if self.role.get(o) == "copy":
                offset += layout.op_bytes(o)
        return "late copies", offset

    def spans(self, op: SyncOp) -> list[tuple[int, int]]:
        return [self.engine.flat.span(a, b) for a, b in op.runs]

    def launch(self, engine, op: SyncOp, tag: str):
        role = self.role.get(op)
        key = (op, engine.t)
        if role is None:
            if op.collective != "all_reduce":
                raise ValueError(f"{engine.algorithm.name}: collective {op.collective!r} needs its own launch()")
            return engine.comm.all_reduce_avg(engine.tensor(op), tag=tag)
        if role == "state":
            return self._launch_moments(engine, key, tag)
        if role == "copy":
            return self._launch_copy(engine, op, key, tag)
        spans = self.spans(op)
        if role == "grad":
            x = cat([engine.flat.grads[a:b].float() for a, b in spans])
        else:
            x = self._delta(engine, op, spans)
        sent = x.clone() if self.cfg.timing == "eager" else None  # x is averaged in place below
        residual = None if self.residual is None else [self.residual[a:b] for a, b in spans]
        if self.codec is None:
            handle, finish = engine.comm.all_reduce_avg(x, tag=tag), (lambda: x)
        else:
            handle, finish = gather_mean(engine.comm, x, self.codec, residual, self.cfg.error_decay,
                                         self.cfg.reduction == "senders", tag)
        self._sent[key] = (spans, finish, self._steps(op, engine.t, role), sent)
        return handle

    def _steps(self, op: SyncOp, t: int, role: str) -> list[int]:
        """The op's units whose first sync of the window is this one (launched at ``t``): they
        take the outer step where it lands, the others only average."""
        first = self.first[t % self.H]
        return [u for u in op.units if u in first] if role == "delta" else []

    def _delta(self, engine, op, spans):
        """The units' change: since the anchor, or (late) since where their window began."""
        params, parts = engine.flat.params, []
        for a, b in spans:
            theta = params[a:b].float()
            if self.cfg.timing == "late":
                parts.append(self.snapshot[a:b] - theta)
                if (a, b) not in self.started:  # the first window: nothing lands at its end
                    self.snapshot[a:b] = theta
            else:
                parts.append(self.anchor[a:b] - theta)
        x = cat(parts)
        if self.cfg.timing == "eager" and not all(s in self.started for s in spans):
            self._outer_step(engine, spans, x / self.world, op.units)
            for a, b in spans:
                params[a:b].copy_(self.anchor[a:b])
        self.started.update(spans)
        return x

    def on_complete(self, engine, op: SyncOp) -> None:
        role = self.role.get(op)
        if role is None:
            return
        t = engine.t - op.lag
        if role == "state":
            return self._land_moments(self._sent.pop((op, t)))
        if role == "copy":
            return self._land_copy(engine, op, self._sent.pop((op, t)))
        spans, finish, steps, sent = self._sent.pop((op, t))
        mean = finish()
        if role == "grad":
            with torch.no_grad():
                for (a, b), g in zip(spans, split(mean, spans)):
                    engine.flat.grads[a:b].copy_(g)
            return
        params = engine.flat.params
        with torch.no_grad():
            if self.cfg.timing == "eager":  # g = mean + (fresh - stale) / W; the fresh change is this window's
                mean = mean + (self._fresh(op, engine.t, spans) - sent) / self.world
            self._outer_step(engine, spans, mean, steps)
            for (a, b), g in zip(spans, split(mean, spans)):
                if self.cfg.timing == "late":
                    params[a:b].add_(self.anchor[a:b] - self.snapshot[a:b])
                    self.snapshot[a:b] = params[a:b]
                elif self.cfg.timing == "eager" or self.alpha == 0:
                    params[a:b].copy_(self.anchor[a:b])
                else:
                    params[a:b].mul_(self.alpha).add_(self.anchor[a:b], alpha=1 - self.alpha)
            self._average_rest(engine, op, spans, mean, steps)

    def _fresh(self, op, t, spans):
        """Eager: the change this worker launched in this iteration for the same units; at the
        run's end (``land_all``: nothing launched then) its change since the anchor."""
        entry = self._sent.get((op, t))
        return entry[3] if entry is not None else cat([self.anchor[a:b] - self.engine.flat.params[a:b].float()
                                                       for a, b in spans])

    def _outer_step(self, engine, spans, mean, steps) -> None:
        """``A <- OuterStep(A, mean)`` on the units of ``steps`` (their first sync of the window)."""
        if not steps:
            return
        flat = engine.flat
        if self.outer is None:
            for r0, r1 in contiguous_runs(steps):
                a, b = flat.span(r0, r1)
                self.anchor[a:b].sub_(slice_of(mean, spans, a, b))
            return
        for u in steps:  # the units' own parameters of the outer optimizer: its state is per unit
            a, b = flat.span(u, u)
            self.unit_params[u].grad = slice_of(mean, spans, a, b)
        self.outer.step()
        for u in steps:
            self.unit_params[u].grad = None

    def _average_rest(self, engine, op, spans, mean, steps) -> None:
        """Units synced again in the window (no outer step): ``theta <- A - mean``, the average."""
        stepped = set(steps)
        for r0, r1 in contiguous_runs(u for u in op.units if u not in stepped):
            a, b = engine.flat.span(r0, r1)
            engine.flat.params[a:b].copy_(self.anchor[a:b] - slice_of(mean, spans, a, b))

    # ---- a copy averaged late (merge_delay; late without an anchor) ----
    def _launch_copy(self, engine, op, key, tag):
        params = engine.tensor(op).detach()
        if op.lag > 1:
            buf = params.clone()
        else:  # lag 1: one buffer, made once, the size of the largest iteration's late copies
            if self._arena is None:
                size = max(sum(engine.tensor(o).numel() for o in self.engine_plan(t) if self.role.get(o) == "copy")
                           for t in range(self.H))
                self._arena = torch.empty(size, dtype=params.dtype, device=params.device)
            start = self.place(op, engine.t, engine.layout)[1] // params.element_size()
            buf = self._arena[start: start + params.numel()]
            buf.copy_(params)
        self._sent[key] = (buf, buf.clone() if op.lag > 1 else None)
        return engine.comm.all_reduce_avg(buf, tag=tag)

    def _land_copy(self, engine, op, entry) -> None:
        avg, snapshot = entry
        params = engine.tensor(op)
        with torch.no_grad():
            if snapshot is None:  # lag 1: nothing moved the parameters since the copy
                params.copy_(avg)
            else:
                params.sub_(snapshot).add_(avg)

    # ---- the inner optimizer's moments (DES-LOC) ----
    def _launch_moments(self, engine, key, tag):
        state = engine.optimizer.state
        due = [m for m, k in zip(MOMENTS, self.every) if k > 0 and (engine.t + 1) % k == 0]
        from dreamddp.engine.mesh import local_tensor  # torch: not at module level (the simulator's import)

        # a sharded parameter's moments are DTensors: its local shard is what this rank averages
        tensors = [local_tensor(state[p][m]) for m in due for p in self._moment_params]
        flat = torch.cat([x.reshape(-1) for x in tensors])
        self._sent[key] = (tensors, flat)
        return engine.comm.all_reduce_avg(flat, tag=tag)

    @staticmethod
    def _land_moments(entry) -> None:
        tensors, flat = entry
        with torch.no_grad():
            torch._foreach_copy_(tensors, [x.view_as(t) for x, t in zip(flat.split([t.numel() for t in tensors]), tensors)])

    # ---- checkpoints: taken after the engine's flush, every transfer landed ----
    def state_dict(self) -> dict:
        if not hasattr(self, "engine"):  # never bound: an algorithm off the engine (ddp) has no state here
            return {}
        state = {}
        for name in ("anchor", "residual", "snapshot"):
            if getattr(self, name) is not None:
                state[name] = getattr(self, name)
        if self.outer is not None:
            state["outer"] = self.outer.state_dict()
        if self.started:
            state["started"] = sorted(self.started)
        inflight = []
        for (op, t), entry in self._sent.items():
            index = self.engine.algorithm.plan(t).index(op)
            role = self.role[op]
            if role == "copy":
                kept = [x if x is None else x.clone() for x in entry]
            else:  # a change or gradient (moments land in their own iteration: never in flight)
                kept = [entry[1](), entry[3]]
            inflight.append((t + op.lag, t, index, kept))
        if inflight:
            state["inflight"] = inflight
        return state

    def load_state_dict(self, state: dict, saved_size) -> None:
        if not hasattr(self, "engine") and not state:  # never bound (ddp), and nothing was saved
            return
        for name in ("anchor", "residual", "snapshot"):
            ours = getattr(self, name)
            if (ours is None) != (name not in state):
                raise ValueError(f"checkpoint and the sync stages disagree on the {name} (algo.compress, "
                                 "algo.outer_optimizer, algo.timing, algo.error_feedback)")
            if ours is not None:
                saved_size(name, state[name].numel(), ours.numel())
                ours.copy_(state[name])
        if (self.outer is None) != ("outer" not in state):
            raise ValueError("checkpoint and algo.outer_optimizer disagree on the outer optimizer's state")
        if self.outer is not None:
            self.outer.load_state_dict(state["outer"])
        self.started = {tuple(s) for s in state.get("started", [])}
        for due, t, index, kept in state.get("inflight", []):
            op = self.engine.algorithm.plan(t)[index]
            role = self.role[op]
            if role == "copy":
                saved_size(f"late average of units {op.first}-{op.last}", kept[0].numel(),
                           self.engine.tensor(op).numel())
                self._sent[(op, t)] = tuple(kept)
            else:
                mean, sent = kept
                self._sent[(op, t)] = (self.spans(op), lambda m=mean: m, self._steps(op, t, role), sent)
            self.engine.adopt(due, op, Landed())


def make_outer(cfg, params):
    """The outer optimizer ``algo.outer_optimizer`` names, built as the inner one is (optim.py)."""
    lr, mu = cfg.outer_lr, cfg.outer_momentum
    if cfg.outer_optimizer in ("sgd", "nesterov"):
        return torch.optim.SGD(params, lr=lr, momentum=mu, nesterov=cfg.outer_optimizer == "nesterov" and mu > 0)
    cls = torch.optim.Adam if cfg.outer_optimizer == "adam" else torch.optim.AdamW
    return cls(params, lr=lr, betas=(mu, 0.999))


def outer_copies(cfg) -> int:
    """fp32 copies of the model the outer optimizer's state holds once it has stepped."""
    if cfg.outer_optimizer in ("adam", "adamw"):
        return 2
    return int(cfg.outer_optimizer in ("sgd", "nesterov") and cfg.outer_momentum > 0)
