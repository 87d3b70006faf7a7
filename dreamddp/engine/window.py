"""A window of wall-clock length: which iterations a worker computes (``algo=flsgd_timed``).

One object the trainer, the engine and the simulator share.  A window is H iterations of the
trainer; worker i computes the first, then each further one while its elapsed seconds e since
the window began, plus two of its mean steps so far (e + 2 e / j after j steps), stay within
``window_s`` (this step and the window's last both fit); it idles through the rest (no batch,
no step) and computes the window's last.  Time outside the steps (evaluation, checkpoints:
the engine's flush precedes each, ``pause``) does not count against the window.

- ``takes(pos, elapsed, steps)``: the rule, pure (the simulator decides each rank on its own clock);
- ``steps_at(t)``: the trainer's question before each iteration, on this worker's clock;
- ``stepped()``: the engine, after each optimizer step; ``pause()``: the engine's flush;
- ``close()``: the merge, which ends the window.
"""

from __future__ import annotations

import time


class TimedWindow:
    def __init__(self, H: int, window_s: float, clock=None):
        self.H, self.window_s = int(H), float(window_s)
        self.clock = clock or time.perf_counter  # injectable for exact tests
        self.steps = 0  # optimizer steps in the open window
        self.start: float | None = None  # clock at the window's first iteration (None: none open)
        self.elapsed: float | None = None  # the open window's seconds at the last pause (clock stopped)

    def takes(self, pos: int, elapsed: float, steps: int) -> bool:
        if pos == 0 or pos == self.H - 1 or steps == 0:
            return True
        return elapsed + 2 * elapsed / steps <= self.window_s

    def steps_at(self, t: int) -> bool:
        pos, now = t % self.H, self.clock()
        if self.elapsed is not None and pos:  # back from evaluation or a checkpoint: the window goes on
            self.start, self.elapsed = now - self.elapsed, None
        if pos == 0 or self.start is None:
            if pos == 0:
                self.steps = 0
            self.start, self.elapsed = now, None
            return True
        return self.takes(pos, now - self.start, self.steps)

    def stepped(self) -> None:
        self.steps += 1

    def pause(self) -> None:
        if self.start is not None:
            self.elapsed, self.start = self.clock() - self.start, None

    def close(self) -> None:
        self.steps, self.start, self.elapsed = 0, None, None

    def state_dict(self) -> dict:
        return {"steps": self.steps, "elapsed_s": self.elapsed}  # after a pause: the clock stopped

    def load_state_dict(self, state: dict) -> None:
        self.steps, self.elapsed, self.start = int(state["steps"]), state["elapsed_s"], None
