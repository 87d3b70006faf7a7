"""No communication at all: independent local training.

Not a registered algorithm.  The trainer runs warm-up passes with it
(measuring backward time for a bandwidth ratio, profiling for DreamDDP's
scheduler), so those passes cost no traffic and change no replica state
beyond what a forward/backward does.
"""

from __future__ import annotations

from dreamddp.algorithms.base import Algorithm


class NoSync(Algorithm):
    name = "nosync"

    def plan(self, t: int):
        return ()
