"""The engine's overhead on the ideal link, from one job's run records ({rep: {segment: Record}}): each
ratio or difference taken inside a repetition (the same processes) before the median over them."""

from __future__ import annotations

from dreamddp.reports.labels import OPT_IN
from dreamddp.reports.records import Record
from dreamddp.reports.spread import median_spread

# engine-overhead ratios (same job); an opt-in segment's only where its job ran it
OVERHEAD = [("ssgd@ideal", "ddp@ideal"), ("ssgd@ideal", "ddp+1bucket@ideal"), ("ascwfbp@ideal", "ddp@ideal"),
            ("nosync@ideal", "plain@ideal")]
PHASES = {"forward": "forward", "backward": "backward", "step and the rest": "rest"}  # shown name: Row field


def overhead_key(a: str, b: str) -> str:
    """``"ssgd / ddp"`` for the pair ("ssgd@ideal", "ddp@ideal")."""
    return f"{a.split('@')[0]} / {b.split('@')[0]}"


def engine_overhead(reps: dict) -> dict:
    """{"ssgd / ddp": median (spread), ...}; an opt-in pair the job did not run is left out, one it
    should have run is None."""
    ran = {label for s in reps.values() for label in s}
    return {overhead_key(a, b): median_spread([s[a].mean_iteration / s[b].mean_iteration
                                               for s in reps.values() if a in s and b in s])
            for a, b in OVERHEAD if all(x in ran or x not in OPT_IN for x in (a, b))}


def _phase_ms(rec: Record) -> list[float]:
    """Mean forward, backward, and the rest less waits (the step, the engine's books), in ms."""
    return [1e3 * rec.timed_mean(field) for field in PHASES.values()]


def phase_overhead(reps: dict, a: str = "nosync@ideal", b: str = "plain@ideal") -> dict:
    """{phase: median (spread)} of ``a``'s mean ms in each phase less ``b``'s: where the engine's
    overhead lies (forward, where nosync adds nothing, shows the noise); empty when the job lacks one."""
    pairs = [(_phase_ms(s[a]), _phase_ms(s[b])) for s in reps.values() if a in s and b in s]
    return {name: median_spread([x[i] - y[i] for x, y in pairs]) for i, name in enumerate(PHASES)} if pairs else {}


def fmt_ms(m) -> str:
    """A signed ms difference, ``median (min to max)``."""
    return "n/a" if m is None else f"{m[0]:+.2f} ({m[1]:+.2f} to {m[2]:+.2f})"
