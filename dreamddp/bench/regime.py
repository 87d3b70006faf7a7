"""How a benchmark job ran, in words: each worker's batch, the compute split of its compute-only
run, and how the workers shared the host or the GPU.  Every report that quotes a job's regime
next to its ratios (bench_report, gpu_summary, gpu_host_lead, interleave_study,
simulator_accuracy) writes it with these."""

from __future__ import annotations

import collections
import statistics

from dreamddp.reports import predict as bp


def batch(rec: dict) -> str:
    """The batch each worker trained on."""
    return f"batch {rec['config']['train']['batch_size']} per worker"


def compute_split(segs: dict) -> str:
    """Forward / backward / step of the job's compute-only run (nosync): whether it is the paper's regime."""
    rows = bp.timed(segs[bp.NOSYNC]) if bp.NOSYNC in segs else []
    if not rows:
        return ""
    f = statistics.median(r["forward"] for r in rows)
    b = statistics.median(r["backward"] for r in rows)
    s = statistics.median(bp.step_and_rest(r) for r in rows)
    return (f"Compute (nosync, steady): forward {1e3 * f:.1f} ms, backward {1e3 * b:.1f} ms, step and the rest "
            f"{1e3 * s:.1f} ms: backward / forward {b / f:.2f}, step / backward {s / b:.2f}.")


def carriers(rec: dict, segs: dict) -> str:
    """The carrier of the runs on the emulated link: the one most ran with, and the runs with
    another (carrier=auto picks step for the algorithms that merge late)."""
    paced = {label: r["extra"]["link"].get("carrier", "eager") for label, r in segs.items()
             if r["extra"]["link"].get("paced") and not label.endswith("@memory")}
    if not paced:
        return rec["extra"]["link"].get("carrier", "eager")
    counts = sorted(collections.Counter(paced.values()).items(), key=lambda cn: (-cn[1], cn[0]))
    others = [f"{c}: {', '.join(sorted(lb for lb, x in paced.items() if x == c))}" for c, _ in counts[1:]]
    return counts[0][0] + (f" ({'; '.join(others)})" if others else "")


def emulation(rec: dict, segs: dict) -> str:
    """How the host was shared (docs/bandwidth.md, "Emulating a cluster on a small CPU host"),
    or on a GPU run, which GPU the workers shared."""
    host, link = rec["extra"].get("host") or {}, rec["extra"]["link"]
    if rec["config"]["cluster"]["device"] == "cuda":
        gpus = rec.get("hardware", {}).get("gpus") or ["?"]
        n = rec["summary"]["workers"]
        return (f"Device: {'1 worker alone on' if n == 1 else f'{n} workers sharing'} one {gpus[0]} over gloo "
                f"({len(gpus)} GPU(s) on the host, {rec.get('hardware', {}).get('cores', '?')} cores); "
                f"carrier {link.get('carrier', 'eager')}, matmul precision {rec['config']['train']['matmul_precision']}.")
    quota = f"compute threads capped at {host['cpu_quota']:g} cores" if host.get("cpu_quota") else \
        f"no CPU quota ({host.get('cpu_quota_note', 'not recorded')})"
    pinned = "pinned" if host.get("pinned") else "not pinned"
    return (f"Host: {host.get('local_workers', '?')} workers on {host.get('cores', '?')} cores, {quota}, {pinned}; "
            f"carrier {carriers(rec, segs)}, hold_core {link.get('hold_core', False)}.")
