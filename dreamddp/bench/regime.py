"""How a benchmark job ran, in words (each worker's batch, the compute split, how the workers shared
the host or the GPU), for every report that quotes a job's regime next to its ratios."""

from __future__ import annotations

import collections
import statistics

from dreamddp.reports import predict as bp


def batch(rec: dict) -> str:
    return f"batch {rec['config']['train']['batch_size']} per worker"


def compute_split(segs: dict) -> str:
    """Forward / backward / step of the job's compute-only run (nosync): whether it is the paper's regime."""
    rows = bp.timed(segs[bp.NOSYNC]) if bp.NOSYNC in segs else []
    if not rows:
        return ""
    f, b, s = (statistics.median(get(r) for r in rows)
               for get in (lambda r: r["forward"], lambda r: r["backward"], bp.step_and_rest))
    return (f"Compute (nosync, steady): forward {1e3 * f:.1f} ms, backward {1e3 * b:.1f} ms, step and the rest "
            f"{1e3 * s:.1f} ms: backward / forward {b / f:.2f}, step / backward {s / b:.2f}.")


def carriers(rec: dict, segs: dict) -> str:
    """The carrier most runs on the emulated link had, and the runs with another (carrier=auto picks
    step for the algorithms that merge late)."""
    paced = {label: r["extra"]["link"].get("carrier", "eager") for label, r in segs.items()
             if r["extra"]["link"].get("paced") and not label.endswith("@memory")}
    if not paced:
        return rec["extra"]["link"].get("carrier", "eager")
    counts = sorted(collections.Counter(paced.values()).items(), key=lambda cn: (-cn[1], cn[0]))
    others = [f"{c}: {', '.join(sorted(lb for lb, x in paced.items() if x == c))}" for c, _ in counts[1:]]
    return counts[0][0] + (f" ({'; '.join(others)})" if others else "")


def emulation(rec: dict, segs: dict) -> str:
    """How the host was shared (docs/bandwidth.md), or on a GPU run, which GPU the workers shared."""
    host, link, hardware = rec["extra"].get("host") or {}, rec["extra"]["link"], rec.get("hardware", {})
    if rec["config"]["cluster"]["device"] == "cuda":
        gpus, n = hardware.get("gpus") or ["?"], rec["summary"]["workers"]
        return (f"Device: {'1 worker alone on' if n == 1 else f'{n} workers sharing'} one {gpus[0]} over gloo "
                f"({len(gpus)} GPU(s) on the host, {hardware.get('cores', '?')} cores); carrier "
                f"{link.get('carrier', 'eager')}, matmul precision {rec['config']['train']['matmul_precision']}.")
    quota = f"compute threads capped at {host['cpu_quota']:g} cores" if host.get("cpu_quota") else \
        f"no CPU quota ({host.get('cpu_quota_note', 'not recorded')})"
    return (f"Host: {host.get('local_workers', '?')} workers on {host.get('cores', '?')} cores, {quota}, "
            f"{'pinned' if host.get('pinned') else 'not pinned'}; "
            f"carrier {carriers(rec, segs)}, hold_core {link.get('hold_core', False)}.")
