"""DreamDDP's delayed merge (``algo.merge_delay = d >= 1``): an average applied late,
corrected for the local progress made meanwhile.  Our extension, after DiLoCoX's
one-step-delay overlap and Streaming DiLoCo's tau.

Which collectives go late is the schedule's business (schedule/delay.py: those
the link cannot finish in place).  For such a collective over units U
launched in iteration i:

1. after the optimizer step of iteration i: snapshot ``s = p_U`` (one copy,
   the all-reduce buffer) and all-reduce it (AVG) while training goes on;
2. at the end of backward of iteration i + d, before that step:
   ``p_U <- avg(s) + (p_U - s)``: the average the workers' snapshots had, plus
   this worker's local progress since the snapshot.

Why after the step and not at the gradient: the snapshot is then the value the
next forward reads, so for d = 1 nothing changes ``p_U`` before the merge
(``p_U - s`` is exactly 0), the merge is ``p_U <- avg(s)`` and the snapshot is
the only copy: memory is the bytes of the units in flight.  For d >= 2 the
local steps in between must survive, so ``s`` is kept beside the buffer
(twice the bytes in flight).  What it costs in numerics: the gradient of
iteration i + 1 is taken at the unaveraged parameters and applied to the
averaged ones (a one-step-stale average, as in DiLoCoX); what it buys: the
collective runs behind d forwards and backwards, so a unit ready last and
needed first (GPT-2's tied embedding) is hidden too.

Where the copies live: with d = 1 a collective launched after step i merges
before step i + 1, so the ones in flight are always the last step's, and one
buffer the size of the largest iteration's late units, allocated once, holds
them all.
A fresh copy per launch would also cost that, but only if the previous one
were freed first: the backend's thread drops its reference a moment after the
wait returns, and on a busy core that moment came after the next copy was
made in one of two measured runs (make bench, ResNet-18: 2x the bytes in
flight over plain training).  With d >= 2 batches overlap: a copy each.

A part of a cut run (schedule/delay.py) is the same on its slice of the run's
parameters.

The engine's ``flush`` only lets a late average land (the merge stays at its
iteration); a checkpoint keeps every landed, unmerged average (and its
snapshot), so a resumed run merges it at the same step.
"""

from __future__ import annotations

from dreamddp.algorithms.base import Landed, op_tag
from dreamddp.engine.plan import Payload, SyncOp, When
from dreamddp.lazy import lazy
from dreamddp.schedule.delay import late_op

torch = lazy("torch")


def is_late(op: SyncOp) -> bool:
    return op.payload is Payload.PARAM and op.launch is When.AFTER_STEP


class DelayedMerge:
    """Mixin: the tensor work of late ops; other ops go to the next class in line."""

    late: dict  # op in flight -> (all-reduce buffer, snapshot kept for d >= 2 or None)
    _arena = None  # d = 1: the buffer every iteration's late collectives are copied into

    def launch(self, engine, op: SyncOp):
        if not is_late(op):
            return super().launch(engine, op)
        buf = self._copy(engine, op)
        self.late[op] = (buf, buf.clone() if op.lag > 1 else None)
        return engine.comm.all_reduce_avg(buf, tag=op_tag(engine, op, "late"))

    def payload_place(self, op: SyncOp, t: int, layout):
        if not is_late(op):
            return super().payload_place(op, t, layout)
        if op.lag > 1:
            return ("copy", t, op), 0
        # d = 1: the shared buffer, after this step's earlier late ops (_copy puts it there)
        offset = 0
        for o in self.plan(t):
            if o == op:
                break
            if is_late(o):
                offset += layout.op_bytes(o)
        return "late copies", offset

    def _copy(self, engine, op: SyncOp):
        """``op``'s parameters copied for the all-reduce: with d = 1 into the shared buffer, where
        ``payload_place`` says (after the copies of this step's earlier late ops, the only ones
        in flight), so the simulator's carrier sees the buffer the engine's sends."""
        params = engine.tensor(op).detach()
        if op.lag > 1:
            return params.clone()
        if self._arena is None:
            size = max(sum(engine.tensor(o).numel() for o in self.plan(t) if is_late(o)) for t in range(self.H))
            self._arena = torch.empty(size, dtype=params.dtype, device=params.device)
        start = self.payload_place(op, engine.t, engine.layout)[1] // params.element_size()
        if start + params.numel() > self._arena.numel():  # not this window's plan (cannot happen): a copy of its own
            return params.clone()
        buf = self._arena[start : start + params.numel()]
        buf.copy_(params)
        return buf

    def on_complete(self, engine, op: SyncOp) -> None:
        if not is_late(op):
            return super().on_complete(engine, op)
        avg, snapshot = self.late.pop(op)
        params = engine.tensor(op)
        with torch.no_grad():
            if snapshot is None:  # d = 1: nothing moved the parameters since the snapshot
                params.copy_(avg)
            else:
                params.sub_(snapshot).add_(avg)

    def late_state(self) -> list:
        """The late averages landed but not merged (after the engine's flush)."""
        # cloned: a view of the shared buffer would save all of it
        return [(due, op.first, op.last, list(op.part), *(t if t is None else t.clone() for t in self.late[op]))
                for due, op in self.engine.in_flight() if is_late(op)]

    def load_late_state(self, entries: list, delay: int) -> None:
        for due, first, last, *rest in entries:
            part, avg, snapshot = rest if len(rest) == 3 else ((0, 1), *rest)  # before parts: whole runs
            op = late_op(first, last, delay, tuple(part))
            self.check_saved_size(f"late average of units {first}-{last}", avg.numel(), self.engine.tensor(op).numel())
            self.late[op] = (avg, snapshot)
            self.engine.adopt(due, op, Landed())
