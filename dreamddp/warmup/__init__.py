"""Warm-up passes: measurements on the live job before training, which then starts as if
they had not happened (parameters, optimizer state and buffers restored).

The set-up layer sits above the engine and the algorithms: it drives the
engine with the ``nosync`` algorithm (no traffic of its own) while link types
calibrate (``Link.calibrate``) and algorithms prepare (``Algorithm.prepare``,
e.g. DreamDDP's profile and schedule) through the :class:`Warmup` they are given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from dreamddp.checks import at_least
from dreamddp.schedule.profile import Profile
from dreamddp.warmup.profiler import measure_profile

CALIBRATION_ITERATIONS = 3  # timed passes behind a comm/backward-ratio link rate


def check(warmup_cfg) -> None:
    at_least("warmup.profile_iterations", warmup_cfg.profile_iterations, 1)


@dataclass
class Warmup:
    cfg: object
    engine: object  # PartialSyncEngine holding the nosync algorithm
    comm: object
    optimizer: object
    loss_fn: Callable
    recorder: object  # dreamddp.recorder.Recorder (a no-op one on ranks > 0)
    profiled: Profile | None = field(default=None, init=False)  # the last full profile, for predictions

    @property
    def world(self) -> int:
        return self.comm.world_size

    @property
    def model_bytes(self) -> int:
        return sum(u.nbytes for u in self.engine.units)

    def backward_time(self) -> float:
        """Seconds of one backward pass (all ranks agree: the slowest sets it); no traffic."""
        prof = measure_profile(self.engine, self.comm, self.optimizer, self.loss_fn,
                               iterations=CALIBRATION_ITERATIONS, grad_clip=self.cfg.train.grad_clip, comm_repeats=0)
        return prof.meta["backward_total"]

    def profile(self) -> Profile:
        """Per-unit forward, backward and all-reduce times under the configured link over
        ``warmup.profile_iterations`` passes, saved beside the run record (``profile/``)."""
        cfg = self.cfg
        profile = measure_profile(
            self.engine, self.comm, self.optimizer, self.loss_fn, iterations=cfg.warmup.profile_iterations,
            grad_clip=cfg.train.grad_clip,
            meta={"model": f"{cfg.model.name}/{cfg.model.size}", "link": self.comm.link.describe()},
        )
        self.recorder.save_profile(profile)
        self.profiled = profile
        return profile

    def save_schedule(self, H: int, schedule: dict[str, list[int]]) -> None:
        self.recorder.save_schedule(H, schedule)

    def record(self, key: str, value) -> None:
        self.recorder.set(key, value)
