"""The engine's overhead on the ideal link, from one job's run records ({rep: {segment: record}}).

Ratios and differences are taken inside each repetition (one job, the same processes) before
their median: S-SGD and ASC-WFBP against torch DDP, nosync (the engine with nothing to sync)
against plain (no engine), and where nosync's time differs from plain's, phase by phase.
"""

from __future__ import annotations

import statistics

from dreamddp.reports import predict as bp
from dreamddp.bench.segments import OPT_IN

from dreamddp.reports.spread import median_spread

# engine-overhead ratios (same job); an opt-in segment's only where its job ran it
OVERHEAD = [("ssgd@ideal", "ddp@ideal"), ("ssgd@ideal", "ddp+1bucket@ideal"), ("ascwfbp@ideal", "ddp@ideal"),
            ("nosync@ideal", "plain@ideal")]
PHASES = ("forward", "backward", "step and the rest")


def overhead_key(a: str, b: str) -> str:
    """``"ssgd / ddp"`` for the pair ("ssgd@ideal", "ddp@ideal")."""
    return f"{a.split('@')[0]} / {b.split('@')[0]}"


def engine_overhead(reps: dict) -> dict:
    """{"ssgd / ddp": median (spread), ...}: each OVERHEAD ratio over one job's repetitions,
    taken inside each repetition; an opt-in pair the job did not run is left out, one it should
    have run is None."""
    ran = {label for s in reps.values() for label in s}
    return {overhead_key(a, b): median_spread([bp.mean_iteration(s[a]) / bp.mean_iteration(s[b])
                                               for s in reps.values() if a in s and b in s])
            for a, b in OVERHEAD if all(x in ran or x not in OPT_IN for x in (a, b))}


def _phase_ms(rec: dict) -> tuple[float, float, float]:
    """Mean forward, backward, and the rest less waits (the step, the engine's books), in ms."""
    rest = statistics.fmean(bp.step_and_rest(r) for r in bp.timed(rec))
    return 1e3 * bp.timed_mean(rec, "forward"), 1e3 * bp.timed_mean(rec, "backward"), 1e3 * rest


def phase_overhead(reps: dict, a: str = "nosync@ideal", b: str = "plain@ideal") -> dict:
    """{phase: median (spread)} of ``a``'s mean time in each phase less ``b``'s, in ms, inside each
    repetition: where the engine's overhead lies (nosync's hooks run in backward, its flat zeroing
    and accounting in the rest, nothing of it in forward, so forward shows the phases' own noise).
    Empty when the job did not run both."""
    pairs = [(_phase_ms(s[a]), _phase_ms(s[b])) for s in reps.values() if a in s and b in s]
    return {phase: median_spread([x[i] - y[i] for x, y in pairs]) for i, phase in enumerate(PHASES)} if pairs else {}


def fmt_ms(m) -> str:
    """A signed ms difference, ``median (min to max)``."""
    return "n/a" if m is None else f"{m[0]:+.2f} ({m[1]:+.2f} to {m[2]:+.2f})"
