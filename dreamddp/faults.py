"""Test-only fault injection: make one worker raise, die or freeze at a chosen point.

The fault tests need a worker to fail at a known place of a real run, under every
launcher, without a line of test code in the trainer.  ``DREAMDDP_FAULT`` describes
one fault; unset (always, outside tests) nothing is armed and nothing runs::

    DREAMDDP_FAULT="rank=1,iteration=4,kind=raise"

- ``rank``: the worker that fails (default 0);
- where: ``iteration=N`` (the forward pass of training iteration N), ``forward=N``
  (the N-th forward pass after the model is built, counted from 1: the start-up
  warm-up passes first, e.g. DreamDDP's profiling) or ``finish=1`` (after the training
  loop and its last checkpoint, before the run's summary);
- ``kind``: ``raise`` (RuntimeError), ``kill`` (SIGKILL itself: nothing is written)
  or ``stop`` (SIGSTOP itself: its peers hang in their next collective);
- ``attempt``: the torchrun restart it fires in (default 0), so a restarted worker runs clean.

The trainer arms it twice (dreamddp.run.train.run_worker): forward passes from the end
of the build, training iterations from the start of the loop; each is a forward
pre-hook on the model that removes itself once it has fired.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from typing import Mapping, Optional

ENV = "DREAMDDP_FAULT"
KINDS = ("raise", "kill", "stop")


@dataclass(frozen=True)
class Fault:
    rank: int
    kind: str
    iteration: Optional[int] = None
    forward: Optional[int] = None
    finish: bool = False
    attempt: int = 0

    def fire(self, where: str) -> None:
        print(f"{ENV}: rank {self.rank}: {self.kind} at {where}", file=sys.stderr, flush=True)
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.kind == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        else:
            raise RuntimeError(f"injected fault ({ENV}) at {where}")


def parse(text: str) -> Fault:
    """``rank=1,iteration=4,kind=raise`` -> Fault; a ValueError (one line) when malformed."""
    fields = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key not in ("rank", "kind", "iteration", "forward", "finish", "attempt"):
            raise ValueError(f"{ENV}={text!r}: bad item {item!r} (rank=, kind=, iteration=, forward= or finish=, "
                             "attempt=)")
        fields[key] = value
    try:
        fault = Fault(rank=int(fields.get("rank", 0)), kind=fields.get("kind", "raise"),
                      iteration=int(fields["iteration"]) if "iteration" in fields else None,
                      forward=int(fields["forward"]) if "forward" in fields else None,
                      finish=bool(int(fields.get("finish", 0))), attempt=int(fields.get("attempt", 0)))
    except ValueError:
        raise ValueError(f"{ENV}={text!r}: rank, iteration, forward, finish and attempt are integers") from None
    if fault.kind not in KINDS:
        raise ValueError(f"{ENV}={text!r}: kind must be one of {', '.join(KINDS)}")
    if (fault.iteration is not None) + (fault.forward is not None) + fault.finish != 1:
        raise ValueError(f"{ENV}={text!r}: give exactly one of iteration=, forward= and finish=1")
    return fault


def planned(rank: int, environ: Optional[Mapping[str, str]] = None) -> Optional[Fault]:
    """The fault this worker (``rank``, in this restart) must suffer, if any."""
    env = os.environ if environ is None else environ
    text = env.get(ENV)
    if not text:
        return None
    fault = parse(text)
    restart = int(env.get("TORCHELASTIC_RESTART_COUNT") or env.get("SLURM_RESTART_COUNT") or 0)
    return fault if fault.rank == rank and fault.attempt == restart else None


def arm_forward(model, rank: int) -> None:
    """``forward=N``: fire on the N-th forward pass from now (call right after the build)."""
    fault = planned(rank)
    if fault is not None and fault.forward is not None:
        _arm(model, fault, first=1, target=fault.forward, what="forward pass")


def arm_iteration(model, rank: int, start: int) -> None:
    """``iteration=N``: fire on training iteration N (call before the loop, which starts at ``start``).

    Training forwards are the ones in train mode; evaluation runs in eval mode."""
    fault = planned(rank)
    if fault is not None and fault.iteration is not None and fault.iteration >= start:
        _arm(model, fault, first=start, target=fault.iteration, what="iteration", training_only=True)


def at_finish(rank: int) -> None:
    """``finish=1``: fire now (call after the training loop, before the run's summary)."""
    fault = planned(rank)
    if fault is not None and fault.finish:
        fault.fire("finish")


def _arm(model, fault: Fault, first: int, target: int, what: str, training_only: bool = False) -> None:
    count = [first]

    def hook(module, _inputs):
        if training_only and not module.training:
            return
        if count[0] == target:
            handle.remove()
            fault.fire(f"{what} {target}")
        count[0] += 1

    handle = model.register_forward_pre_hook(hook)
