"""Bubble filling: extra syncs of output-side units where the link idles.

For every iteration, units that come before the iteration's first scheduled
unit in backward order (so they belong to earlier iterations and their
gradients are ready early) are tried in order as extra syncs; one is kept only
if the iteration's exposed wait does not grow, and filling stops at the first
that does not fit, so the extras are always an output-side prefix (as in the
authors' ``fillin_more_layers``).  An iteration with nothing scheduled may be
filled up to the end of backward.  Parameter-free units (comm == 0) are
skipped: there is nothing of theirs to send.  Filled units sync more than once
per window; the engine simply averages them again.
"""

from __future__ import annotations

from dreamddp.schedule.cost import arrays, fifo_finish, groups
from dreamddp.schedule.profile import Profile

_EPS = 1e-12  # tolerance on "the wait did not grow", against float round-off


def bubble_fill(profile: Profile, H: int, schedule: dict[str, list[int]]) -> dict[str, list[int]]:
    """A copy of ``schedule`` with extra syncs that never increase any iteration's wait."""
    bp, comm = arrays(profile)
    ready = bp.cumsum()
    end = float(ready[-1]) if len(ready) else 0.0
    out = {u: list(its) for u, its in schedule.items()}
    for g, members in enumerate(groups(profile, H, schedule)):
        first = members[0] if members else len(profile.units)
        # Extras all precede the members on the FIFO link, and members started
        # on a link free from t0 drain at max(t0 + their comm, their own finish).
        own = fifo_finish(ready, comm, members)
        members_comm = float(sum(comm[m] for m in members))
        limit = max(end, own) + _EPS
        t = 0.0  # link free time after the extras chosen so far
        for i in range(first):
            if comm[i] <= 0.0:
                continue
            t_trial = max(t, ready[i]) + comm[i]
            if max(t_trial + members_comm, own) > limit:
                break
            t = t_trial
            out.setdefault(profile.units[i], []).append(g)
    return {u: sorted(set(its)) for u, its in out.items()}
