"""How a benchmark job ran, in words (each worker's batch, the compute split, how the workers shared
the host or the GPU), for every report that quotes a job's regime next to its ratios."""

from __future__ import annotations

import collections
import statistics

from dreamddp.reports.predict import NOSYNC
from dreamddp.reports.records import Record


def batch(rec: Record) -> str:
    return f"batch {rec.batch_size} per worker"


def compute_split(segs: dict) -> str:
    """Forward / backward / step of the job's compute-only run (nosync): whether it is the paper's regime."""
    rows = segs[NOSYNC].timed() if NOSYNC in segs else []
    if not rows:
        return ""
    f, b, s = (statistics.median(getattr(r, field) for r in rows) for field in ("forward", "backward", "rest"))
    return (f"Compute (nosync, steady): forward {1e3 * f:.1f} ms, backward {1e3 * b:.1f} ms, step and the rest "
            f"{1e3 * s:.1f} ms: backward / forward {b / f:.2f}, step / backward {s / b:.2f}.")


def carriers(rec: Record, segs: dict) -> str:
    """The carrier most runs on the emulated link had, and the runs with another (carrier=auto picks
    step for the algorithms that merge late)."""
    paced = {label: r.carrier or "eager" for label, r in segs.items()
             if r.link_paced and not label.endswith("@memory")}
    if not paced:
        return rec.carrier or "eager"
    counts = sorted(collections.Counter(paced.values()).items(), key=lambda cn: (-cn[1], cn[0]))
    others = [f"{c}: {', '.join(sorted(lb for lb, x in paced.items() if x == c))}" for c, _ in counts[1:]]
    return counts[0][0] + (f" ({'; '.join(others)})" if others else "")


def emulation(rec: Record, segs: dict) -> str:
    """How the host was shared (docs/bandwidth.md), or on a GPU run, which GPU the workers shared."""
    host, n = rec.host, rec.world
    if rec.device == "cuda":
        gpus = rec.gpus or ("?",)
        return (f"Device: {'1 worker alone on' if n == 1 else f'{n} workers sharing'} one {gpus[0]} over gloo "
                f"({len(gpus)} GPU(s) on the host, {rec.cores or '?'} cores); carrier "
                f"{rec.carrier or 'eager'}, matmul precision {rec.matmul_precision}.")
    quota = f"compute threads capped at {host.cpu_quota:g} cores" if host.cpu_quota else \
        f"no CPU quota ({host.cpu_quota_note or 'not recorded'})"
    return (f"Host: {host.local_workers or '?'} workers on {host.cores or '?'} cores, {quota}, "
            f"{'pinned' if host.pinned else 'not pinned'}; "
            f"carrier {carriers(rec, segs)}, hold_core {rec.hold_core}.")
