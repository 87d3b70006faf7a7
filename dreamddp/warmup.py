"""Warm-up passes before training: link calibration and DreamDDP's schedule.

Both run on the live workers with no communication of the algorithm's own
(the engine holds the NoSync algorithm meanwhile) and leave the training
state as they found it.
"""

from __future__ import annotations

import os


from dreamddp.algorithms.schedule_file import read_schedule
from dreamddp.comm.link import ring_factor
from dreamddp.schedule import make_schedule, save_profile, save_schedule
from dreamddp.schedule.profiler import measure_profile
from dreamddp.schedule.simulator import simulate_run


def calibrate_link(engine, comm, link, optimizer, loss_fn, ratio: float, grad_clip: float, record) -> float:
    """Set the emulated bandwidth so that all-reduce(all parameters) / backward = ratio."""
    prof = measure_profile(engine, comm, optimizer, loss_fn, iterations=3, grad_clip=grad_clip, comm_repeats=1)
    backward = prof.meta["backward_total"]
    nbytes = sum(u.nbytes for u in engine.units)
    gbps = ring_factor("all_reduce", comm.world_size) * nbytes * 8 / (ratio * backward) / 1e9
    link.gbps = gbps
    if record is not None:
        record.set("link_calibration", {"comm_ratio": ratio, "backward": backward, "model_bytes": nbytes, "gbps": gbps})
    return gbps


def prepare_schedule(cfg, engine, comm, algorithm, optimizer, loss_fn, run_dir: str, record):
    """algo.schedule given: read it.  Otherwise profile, schedule (DFS, + bubble filling unless
    algo.bubble_fill=false), save
    both, and return the profile (None when the schedule was read from a file)."""
    if cfg.algo.schedule:
        H, sched = read_schedule(cfg.algo.schedule)
        algorithm.set_schedule(H, sched, source=cfg.algo.schedule)
        if record is not None:
            record.set("schedule", {"source": cfg.algo.schedule, "H": H, "schedule": sched})
        return None
    profile = measure_profile(
        engine, comm, optimizer, loss_fn, iterations=cfg.algo.profile_iterations, grad_clip=cfg.train.grad_clip,
        meta={"model": f"{cfg.model.name}/{cfg.model.size}", "link": comm.link.describe()},
    )
    H = cfg.algo.H
    sched = make_schedule(profile, H, scheduler="dreamddp", bubble=cfg.algo.bubble_fill)
    algorithm.set_schedule(H, sched, source="profiled")
    if record is not None:
        save_profile(profile, os.path.join(run_dir, "profile"))
        save_schedule(os.path.join(run_dir, "schedule.json"), H, sched)
        record.set("schedule", {"source": "profiled", "H": H, "schedule": sched})
        record.set("profile", {"dir": "profile", "step_time": profile.step_time, **profile.meta})
    return profile


def predict(cfg, profile, algorithm, link, world: int) -> dict:
    """The simulator's mean iteration time and exposed wait for this run's algorithm and plan."""
    gbps = getattr(link, "gbps", None)
    res = simulate_run(profile, cfg.algo, cfg.bandwidth, world=world, gbps=gbps,
                       groups=getattr(algorithm, "groups", None))
    return {"mean_iteration_time": res.mean_iter, "mean_wait": res.mean_wait, "link": "modelled" if gbps else "measured"}


def setup_state(cfg, link, algorithm) -> dict:
    """What the warm-up passes decided, for a checkpoint: a resumed run re-uses it
    instead of measuring again (a new profile would give another schedule)."""
    setup = {}
    if cfg.bandwidth.comm_ratio:
        setup["link_gbps"] = link.gbps
    if algorithm.name == "dreamddp":
        setup["schedule"] = {"H": cfg.algo.H, "schedule": algorithm.schedule, "source": algorithm.source}
    return setup


def restore_setup(setup: dict, link, algorithm, ckpt: str, record) -> None:
    """Apply a checkpoint's ``setup_state`` in place of the warm-up passes."""
    if "link_gbps" in setup:
        link.gbps = setup["link_gbps"]
    if "schedule" in setup:
        s = setup["schedule"]
        algorithm.set_schedule(s["H"], s["schedule"], source=s["source"])  # where it first came from
        if record is not None:
            record.set("schedule", {"source": s["source"], "from_checkpoint": ckpt, "H": s["H"], "schedule": s["schedule"]})
