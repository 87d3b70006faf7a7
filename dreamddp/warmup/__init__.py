"""Warm-up passes: measurements on the live job before training, which then starts as if
they had not happened (parameters, optimizer state and buffers restored here; the data
position and the random state by the trainer, dreamddp.run.train).

The set-up layer sits above the engine and the algorithms: it drives the
engine with the ``nosync`` algorithm (no traffic of its own) while link types
calibrate (``Link.calibrate``) and algorithms prepare (``Algorithm.prepare``,
e.g. DreamDDP's profile and schedule) through the :class:`Warmup` they are given.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Callable

import torch
import torch.distributed as dist

from dreamddp.checks import at_least
from dreamddp.comm.cost import KINDS, PROBE_BYTES, QUEUED
from dreamddp.engine.gather import decoded_mean, encoded
from dreamddp.schedule.profile import Profile
from dreamddp.speed import Speeds
from dreamddp.warmup.profiler import measure_profile

CALIBRATION_ITERATIONS = 3  # timed passes behind a comm/backward-ratio link rate
TRANSFER_PROBE = {"repeats": 5, "warmup": 1}  # probe_latency rounds of each real_transfer size (median of repeats)
CODEC_PROBE_NUMEL = (2**16, 2**22)  # elements a codec is timed at: a small unit's, about a compute-preset model's


def check(warmup_cfg) -> None:
    at_least("warmup.profile_iterations", warmup_cfg.profile_iterations, 1)
    at_least("warmup.predict_iterations", warmup_cfg.predict_iterations, 0)


@dataclass
class Warmup:
    cfg: object
    engine: object  # PartialSyncEngine holding the nosync algorithm
    comm: object
    optimizer: object
    loss_fn: Callable
    recorder: object  # dreamddp.run.recorder.Recorder (a no-op one on ranks > 0)
    profiled: Profile | None = field(default=None, init=False)  # the last full profile, for predictions

    @property
    def world(self) -> int:
        return self.comm.world_size

    @property
    def model_bytes(self) -> int:
        return sum(u.nbytes for u in self.engine.units)

    def _speed(self) -> Callable[[int], float] | None:
        """This worker's speed per pass as training sets it (cluster.worker_speed, slow_spell),
        for the profile's passes; None at full speed throughout."""
        speeds = Speeds.from_config(getattr(self.cfg, "cluster", None))
        if speeds.uniform:
            return None
        rank = dist.get_rank() if dist.is_initialized() else 0  # the trainer's rank (ctx.rank)
        return lambda t: speeds.of(rank, t)

    def collective_alpha(self) -> float:
        """Seconds one collective costs on the real backend (all ranks agree: the slowest)."""
        alpha = torch.tensor([self.comm.probe_latency(self.engine.units[0].params[0])], dtype=torch.float64)
        self.comm.all_reduce_max(alpha)
        return float(alpha)

    def real_transfer(self, kind: str = "all_reduce") -> list[tuple[int, float]] | None:
        """(bytes, seconds) of ``kind`` collectives over comm.cost.PROBE_BYTES on the real backend,
        unpaced (all ranks agree: the slowest); None unless a queued carrier (deferred, step) will
        expose that transfer at the waits (an eager one runs it behind the link's pacing)."""
        if self.comm.carrier not in QUEUED:
            return None
        return self.transfer_times(kind, PROBE_BYTES, TRANSFER_PROBE)

    def transfer_times(self, kind: str, sizes: tuple[int, ...], rounds: dict) -> list[tuple[int, float]]:
        """(bytes, seconds) of one ``kind`` collective of each of ``sizes`` on the real backend
        and link, unpaced (``rounds``: probe_latency's repeats and warmup; all ranks agree: the
        slowest)."""
        like = self.engine.units[0].params[0]
        secs = torch.tensor([self.comm.probe_latency(like, **rounds, numel=b // like.element_size(), kind=kind)
                             for b in sizes], dtype=torch.float64)
        self.comm.all_reduce_max(secs)
        return [(b // like.element_size() * like.element_size(), s) for b, s in zip(sizes, secs.tolist())]

    def real_transfer_kinds(self) -> dict[str, list[tuple[int, float]]] | None:
        """``real_transfer`` of the kinds other than the all-reduce (their own probes: gloo's do
        not scale from its all-reduce as a ring's would, comm/cost.py)."""
        if self.comm.carrier not in QUEUED:
            return None
        return {kind: self.real_transfer(kind) for kind in KINDS if kind != "all_reduce"}

    def backward_time(self) -> float:
        """Seconds of one backward pass (all ranks agree: the slowest sets it); no traffic."""
        prof = measure_profile(self.engine, self.comm, self.optimizer, self.loss_fn,
                               iterations=CALIBRATION_ITERATIONS, comm_repeats=0)
        return prof.meta["backward_total"]

    def profile(self, iterations: int | None = None, comm: bool = True) -> Profile:
        """Per-unit forward, backward and all-reduce times under the configured link over
        ``iterations`` passes (default ``warmup.profile_iterations``), saved beside the run
        record (``profile/``); ``comm=False``: no all-reduce timed (a paced link's model
        gives them)."""
        cfg = self.cfg
        profile = measure_profile(
            self.engine, self.comm, self.optimizer, self.loss_fn, iterations=iterations or cfg.warmup.profile_iterations,
            **({} if comm else {"comm_repeats": 0}), speed=self._speed(),
            meta={"model": f"{cfg.model.name}/{cfg.model.size}", "link": self.comm.link.describe()},
        )
        self.recorder.save_profile(profile)
        self.profiled = profile
        return profile

    @property
    def link_alpha(self) -> float:
        """What one collective costs on the link whatever its size (0 before calibration): the
        measured alpha, and on a paced link the latency hops of an all-reduce too, which every
        collective pays again (so fusing units saves them)."""
        link = self.comm.link
        model = link.model() if link.paced else None
        return model.seconds("all_reduce", 0, self.world) if model else link.alpha_s or 0.0

    def planning_profile(self, profile: Profile) -> Profile:
        """The profile a scheduler should plan with.  On a paced link (emulated) the link is
        its model, so each unit's all-reduce time is the model's (alpha + bytes / bandwidth);
        a blocking measurement adds only the skew between ranks at start-up.  Elsewhere
        (ideal, tc) the measured times are the truth."""
        link = self.comm.link
        if not link.paced or not profile.nbytes:
            return profile
        model = link.model()
        comm = {u: model.seconds("all_reduce", profile.nbytes[u], self.world) for u in profile.units}
        return replace(profile, comm=comm)

    def save_schedule(self, made: dict) -> None:
        """A scheduler's output (``{"H", "schedule", "collectives"?, "delayed"?}``), beside the record."""
        self.recorder.save_schedule(made)

    def record(self, key: str, value) -> None:
        self.recorder.set(key, value)


def codec_host(pipeline, comm) -> list[tuple[int, float, float]] | None:
    """(elements, launch s, completion s) of the sync pipeline's codec at ``CODEC_PROBE_NUMEL``:
    a rank's host work around one compressed collective (``codec_seconds``; all
    ranks agree: the slowest), for the simulator; None where nothing is compressed."""
    if pipeline.codec is None:
        return None
    cfg = pipeline.cfg
    secs = torch.tensor([codec_seconds(pipeline.codec, n, comm.world_size, bool(cfg.error_feedback),
                                       cfg.reduction == "senders") for n in CODEC_PROBE_NUMEL], dtype=torch.float64)
    comm.all_reduce_max(secs)
    return [(n, float(a), float(b)) for n, (a, b) in zip(CODEC_PROBE_NUMEL, secs.tolist())]


def codec_seconds(codec, numel: int, world: int, feedback: bool, senders: bool, repeats: int = 3) -> tuple[float, float]:
    """Median host seconds of what a rank does around one compressed collective of ``numel``
    elements, on a random payload: making its payload (``encoded``, with error feedback when
    ``feedback``) and, once every rank's has arrived, their mean (``decoded_mean`` of ``world``
    payloads).  What the simulator charges such an op at its launch and its completion."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(numel, generator=gen)
    residual = [torch.zeros(numel)] if feedback else None
    made, meant = [], []
    for _ in range(repeats + 1):  # the first warms the caches and the codec's own (DCT matrix)
        t0 = time.perf_counter()
        mine = encoded(x, codec, residual, 1.0)
        t1 = time.perf_counter()
        decoded_mean(mine.expand(world, -1), codec, numel, senders)
        made.append(t1 - t0)
        meant.append(time.perf_counter() - t1)
    return statistics.median(made[1:]), statistics.median(meant[1:])
