"""The planning library: profiles, the cost model, the schedulers, bubble filling, the
simulator and schedule files.

Pure: numpy and the standard library only, never torch at module level, so the
``dreamddp-schedule`` command and the results tools start in a fraction of a
second.  Measuring a live job (the profiler, the warm-up passes) lives above
the engine in ``dreamddp.warmup``.  ``make_schedule(profile, H, scheduler,
bubble)`` is the entry point the training side needs; everything else is
importable from its own module.
"""

from dreamddp.schedule.make import SCHEDULERS, make_schedule
from dreamddp.schedule.profile import Profile, load_profile, save_profile
from dreamddp.schedule.schedule_file import ScheduleError, read_schedule, save_schedule

__all__ = ["SCHEDULERS", "Profile", "ScheduleError", "load_profile", "make_schedule", "read_schedule",
           "save_profile", "save_schedule"]
