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

The rule is that no member's lateness grows: each unit's average is due at
the end of backward, or with ``overlap`` (``algo.overlap_forward``) at its
unit's next forward pre-hook (``cost.forward_slack``), where an extra also
takes its own optimizer step out of the step to its pre-hook
(``cost.step_moved``), which brings every member's deadline forward by that
much, since the extras are output-side of every member.  With every deadline
at the end of backward this is the rule above: the drain does not pass the end
of backward or the members' own drain.
"""

from __future__ import annotations

import numpy as np

from dreamddp.schedule.cost import arrays, deadlines, groups, overlap_terms
from dreamddp.schedule.profile import Profile

_EPS = 1e-12  # tolerance on "the wait did not grow", against float round-off


def bubble_fill(profile: Profile, H: int, schedule: dict[str, list[int]], overlap: bool = False) -> dict[str, list[int]]:
    """A copy of ``schedule`` with extra syncs that never increase any iteration's wait."""
    bp, comm = arrays(profile)
    ready = bp.cumsum()
    slack, moved = overlap_terms(profile, overlap)
    due = deadlines(bp, slack)
    moved = np.zeros(len(bp)) if moved is None else moved
    out = {u: list(its) for u, its in schedule.items()}
    for g, members in enumerate(groups(profile, H, schedule)):
        first = members[0] if members else len(profile.units)
        m = np.array(members, dtype=int)
        own_due = due[m] - np.cumsum(moved[m])  # the members' own steps up to each
        queued = np.cumsum(comm[m])
        alone = np.maximum.accumulate(ready[m] - np.concatenate(([0.0], queued[:-1]))) + queued  # FIFO from 0

        def members_late(free: float, shift: float) -> float:
            """The members' worst lateness on a link free at ``free`` (each FIFO finish is the later
            of its finish from an idle link and ``free`` plus the comm queued up to it), their
            deadlines ``shift`` earlier (the extras' steps).  Every member, one with nothing to
            send too: its collective still queues behind the extras."""
            late = np.maximum(alone, free + queued) - (own_due - shift)
            return float(max(0.0, late.max(initial=0.0)))

        limit = members_late(0.0, 0.0) + _EPS
        t, shift = 0.0, 0.0  # link free time after the extras chosen so far; their steps
        for i in range(first):
            if comm[i] <= 0.0:
                continue
            t_trial, shift_trial = max(t, ready[i]) + comm[i], shift + moved[i]
            if t_trial - (due[i] - shift_trial) > limit or members_late(t_trial, shift_trial) > limit:
                break
            t, shift = t_trial, shift_trial
            out.setdefault(profile.units[i], []).append(g)
    return {u: sorted(set(its)) for u, its in out.items()}
