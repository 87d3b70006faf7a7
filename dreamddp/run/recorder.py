"""What a worker reports: the run record and its W&B mirror on rank 0, nothing elsewhere.

The trainer calls the same methods on every rank; ranks > 0 hold a
:class:`NullRecorder` whose methods do nothing, so the training loop has no
rank checks.  Rank 0's :class:`Recorder` keeps ``run.json`` (dreamddp.run.record),
mirrors numbers to W&B (dreamddp.run.wandb_log, every ``train.log_every``
iterations), and writes the files that sit beside the record (profile/,
schedule.json).
"""

from __future__ import annotations

import os
from typing import Callable

from omegaconf import DictConfig

from dreamddp.run.preempt import EXIT_PREEMPTED
from dreamddp.run.record import RunRecord
from dreamddp.schedule.profile import Profile, save_profile
from dreamddp.schedule.schedule_file import save_schedule
from dreamddp.run.summary import prediction_error, summarise
from dreamddp.run.wandb_log import WandbLogger


class NullRecorder:
    """Ranks > 0: every report is dropped."""

    active = False

    def set(self, key: str, value) -> None: ...
    def flush(self) -> None: ...
    def iteration(self, row: dict) -> None: ...
    def evaluation(self, iteration: int, metrics: dict) -> None: ...
    def divergence(self, iteration: int, div: dict) -> None: ...
    def checkpoint(self, row: dict) -> None: ...
    def save_profile(self, profile: Profile, measured_in: str | None = None) -> None: ...
    def save_schedule(self, made: dict) -> None: ...
    def close(self, cfg, world_size: int, predict: Callable[[], dict] | None = None) -> None: ...
    def fail(self, message: str) -> None: ...
    def preempted(self, message: str) -> None: ...


class Recorder(NullRecorder):
    active = True

    def __init__(self, cfg: DictConfig, run_dir: str) -> None:
        self.run_dir = run_dir
        self.log_every = max(1, int(cfg.train.log_every))
        self.record = RunRecord(run_dir, cfg)
        self.wandb = WandbLogger(cfg, run_dir, enabled=True)

    def set(self, key: str, value) -> None:
        self.record.set(key, value)

    def flush(self) -> None:
        self.record.flush()

    def iteration(self, row: dict) -> None:
        self.record.add_iteration(row)
        if row["iteration"] % self.log_every == 0:
            self.wandb.log(row["iteration"], {k: v for k, v in row.items() if k != "timeline"})

    def evaluation(self, iteration: int, metrics: dict) -> None:
        self.record.add_eval({"iteration": iteration, **metrics})
        self.wandb.log(iteration, {f"eval/{k}": v for k, v in metrics.items()})

    def divergence(self, iteration: int, div: dict) -> None:
        self.record.add_divergence({"iteration": iteration, **div})
        self.wandb.log(iteration, {"divergence": div["mean"]})

    def checkpoint(self, row: dict) -> None:
        self.record.add_checkpoint(row)

    def save_profile(self, profile: Profile, measured_in: str | None = None) -> None:
        """The start-up profile beside the record (``measured_in``: the run dir that measured it,
        for a resumed run that reuses it)."""
        save_profile(profile, os.path.join(self.run_dir, "profile"))
        where = {"measured_in": measured_in} if measured_in else {}
        self.set("profile", {"dir": "profile", "step_time": profile.step_time,
                             "optimizer_time": profile.optimizer_time,
                             "optimizer_call_time": profile.optimizer_call_time, **profile.meta, **where})

    def save_schedule(self, made: dict) -> None:
        save_schedule(os.path.join(self.run_dir, "schedule.json"), made["H"], made["schedule"],
                      made.get("collectives"), made.get("delayed"))

    def close(self, cfg, world_size: int, predict: Callable[[], dict] | None = None) -> None:
        """The summary (and the simulator's prediction), then the record is completed."""
        summary = summarise(self.record, cfg, world_size)
        if predict is not None:
            summary["predicted"] = predicted = predict()
            if predicted.get("per_position") and self.record.data["iterations"]:
                predicted["error"] = prediction_error(self.record.data["iterations"], predicted["per_position"])
        self.record.finish(summary)
        self.wandb.summary(summary)
        self.wandb.finish(exit_code=0)
        print(summary["text"], flush=True)

    def fail(self, message: str) -> None:
        self.record.fail(message)
        self.wandb.finish(exit_code=1)

    def preempted(self, message: str) -> None:
        """Stopped on request, a checkpoint saved: "preempted" here, and to W&B a preempting run
        that ends with dreamddp-run's own exit status (a requeued job continues it)."""
        self.record.preempt(message)
        self.wandb.finish(exit_code=EXIT_PREEMPTED, preempting=True)


def recorder_for(rank: int, cfg: DictConfig, run_dir: str) -> NullRecorder:
    return Recorder(cfg, run_dir) if rank == 0 else NullRecorder()
