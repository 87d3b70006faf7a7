"""Per-iteration accounting the engine fills and the trainer records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class IterationStats:
    iteration: int
    sampled: bool = False  # keep the per-unit timeline for this iteration
    start: float = 0.0
    backward_end: float = 0.0
    end: float = 0.0
    wait: float = 0.0  # exposed wait: seconds blocked on communication
    bytes: int = 0  # payload bytes of the collectives launched
    wire_bytes: float = 0.0  # bytes this worker put on the wire (ring model)
    collectives: int = 0
    # The engine's host seconds on its ops, waits excluded: the algorithm's launches (the
    # collective's books, copies, a tag) and its on_complete (merges, copies, a group's step).
    # The simulator charges them per op (schedule/simulator.py, Compute.launch_host).
    launch_host: float = 0.0
    complete_host: float = 0.0
    completed: int = 0  # ops whose on_complete ran this iteration
    # Seconds of optimizer steps an algorithm applied before the end of backward, where its ops
    # completed (SyncOp.steps: DeAR's groups, overlap_forward's averages, in forward pre-hooks):
    # part of the forward's measured time that is the step's, not the forward's.
    forward_steps: float = 0.0
    # with train.grad_clip: the gradients' total norm before clipping, a 0-d tensor left on the
    # device until the trainer reads it with the loss (one host sync per iteration, not two)
    grad_norm: Any = None
    unit_ready: list[float] | None = None  # per-unit gradient-ready time since start (sampled)
    events: list[dict] = field(default_factory=list)  # per-collective launch/complete (sampled)
    ops: list = field(default_factory=list)  # the plan's ops launched this iteration (SyncOp)

    def add_record(self, rec) -> dict | None:
        """Count a collective launched this iteration; sampled, its event (None: not sampled)."""
        self.bytes += rec.nbytes
        self.wire_bytes += rec.wire_bytes
        self.collectives += 1
        if not self.sampled:
            return None
        event = {"tag": rec.tag, "kind": rec.kind, "bytes": rec.nbytes, "launch": rec.launch - self.start,
                 "deadline": rec.deadline - self.start, "complete": None, "blocked": 0.0}
        self.events.append(event)
        land(event, rec, self.start)
        return event


def land(event: dict, rec, start: float) -> bool:
    """Fill a sampled event's completion once its collective has completed (relative to its own
    iteration's start); False while it is still in flight."""
    if rec.complete is None:
        return False
    event["complete"], event["blocked"] = rec.complete - start, rec.blocked
    return True
