"""No communication at all: independent local training.

The baseline of the engine's own cost (dreamddp with nothing to synchronise
against it), and the algorithm the warm-up passes run with (measuring
backward time, profiling for DreamDDP's scheduler), so those passes cost no
traffic and change no replica state beyond what a forward/backward does.
Replicas drift apart from the first step: not a training method.  Its plan
is empty.
"""

from __future__ import annotations

from dreamddp.algorithms.base import ALGORITHMS, Algorithm, Display


@ALGORITHMS.register
class NoSync(Algorithm):
    name = "nosync"
    display = Display(90)
