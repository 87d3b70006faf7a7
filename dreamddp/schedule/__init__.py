"""Profiles, the iteration-time model and simulator, and the schedulers.

``make_schedule(profile, H, scheduler, bubble)`` is the entry point the
training side needs; everything else is importable from its own module.
"""

from dreamddp.schedule.make import SCHEDULERS, make_schedule
from dreamddp.schedule.profile import Profile, load_profile, load_schedule, save_profile, save_schedule

__all__ = ["SCHEDULERS", "Profile", "load_profile", "load_schedule", "make_schedule", "save_profile", "save_schedule"]
