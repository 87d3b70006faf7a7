"""Scheduler-vs-optimum studies on any profile, and projecting a profile to another cluster.

Projection to another cluster (``project``): a profile's measured comm time of
a unit is, for a bandwidth-bound ring all-reduce, proportional to the ring
factor 2(n-1)/n of its world size n and inversely proportional to the link
bandwidth B.  So a profile measured at (n0, B0) is projected to (n, B) by
multiplying every comm time by ``[2(n-1)/n] / [2(n0-1)/n0] * B0 / B``;
backward and forward times stay as measured (same GPUs).  Latency terms are
not rescaled: at 10 Mbit/s-10 Gbit/s with MB-sized layers the bandwidth term
dominates.  The artifact profiles carry (n0, B0) in their path; paper-v1
profiles have none and need ``base_world`` / ``base_gbps`` given.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace
from pathlib import Path

from dreamddp.comm.cost import ring_factor
from dreamddp.schedule.cost import arrays, total_wait
from dreamddp.schedule.dfs import dfs_cuts
from dreamddp.schedule.make import enp
from dreamddp.schedule.optimal import optimal_cuts
from dreamddp.schedule.profile import Profile, scaled


def reference_root() -> Path:
    """The authors' reference profiles: $DREAMDDP_REFERENCE_PROFILES, else shared/ beside the checkout."""
    candidates = [os.environ.get("DREAMDDP_REFERENCE_PROFILES", "")]
    repo = Path(__file__).resolve().parents[2]
    candidates += [str(repo.parent / "shared/reference/official-profiles"), str(repo / "shared/reference/official-profiles")]
    for c in candidates:
        if c and Path(c).is_dir():
            return Path(c)
    raise FileNotFoundError("reference profiles not found; set DREAMDDP_REFERENCE_PROFILES")


# The paper-v1 32-GPU iteration-time table: each model's A6000 profile times fixed (backward, comm)
# multipliers before modelling (the reference README; ResNet-50 takes none).
PAPER_32GPU = {"resnet18": (2.0, 1.0), "resnet50": (1.0, 1.0), "gpt2": (10.0, 5.0), "llama2": (10.0, 5.0)}


def paper_32gpu_profile(model: str) -> Profile:
    """``model``'s A6000 profile scaled as the paper's 32-GPU table scales it."""
    from dreamddp.schedule.profile import load_profile

    bp, comm = PAPER_32GPU[model]
    return scaled(load_profile(reference_root() / "paper-v1/A6000" / model), bp=bp, comm=comm)


def cut(profile: Profile, n: int) -> Profile:
    """The first ``n`` units in forward order: a shallower network (paper Fig. 15)."""
    if not 1 <= n <= len(profile.units):
        raise ValueError(f"cut: n must be in [1, {len(profile.units)}], got {n}")
    units = profile.units[-n:]
    keep = set(units)
    return replace(
        profile,
        units=units,
        bp={u: t for u, t in profile.bp.items() if u in keep},
        comm={u: t for u, t in profile.comm.items() if u in keep},
        fwd={u: t for u, t in profile.fwd.items() if u in keep},
        nbytes={u: b for u, b in profile.nbytes.items() if u in keep},
    )


def _study_row(profile: Profile, H: int, **extra) -> dict:
    bp, comm = arrays(profile)
    t0 = time.perf_counter()
    w_dfs, _ = dfs_cuts(bp, comm, H)
    t1 = time.perf_counter()
    w_opt, _ = optimal_cuts(bp, comm, H)
    t2 = time.perf_counter()
    w_enp = total_wait(profile, H, enp(profile.units, H))
    return {
        **extra,
        "units": len(profile.units),
        "contiguous_partitions": math.comb(len(profile.units) - 1, H - 1),  # what brute force enumerates
        "wait_dreamddp": w_dfs,
        "wait_optimal": w_opt,
        "wait_enp": w_enp,
        "time_dreamddp_s": t1 - t0,
        "time_optimal_s": t2 - t1,
    }


def by_units(profile: Profile, sizes=range(10, 31), H: int = 5) -> list[dict]:
    """DFS vs the exact optimum (and ENP) per window, cutting the profile to each size."""
    return [_study_row(cut(profile, n), H) for n in sizes]


def by_bandwidth(profile: Profile, ratios=(0.25, 0.5, 1, 2, 4, 8), H: int = 5) -> list[dict]:
    """Same, with comm scaled to ``ratio`` x the profile's bandwidth (comm / ratio)."""
    return [_study_row(scaled(profile, comm=1.0 / r), H, bandwidth_ratio=r) for r in ratios]


def project(profile: Profile, world: int, gbps: float, base_world: int | None = None, base_gbps: float | None = None) -> Profile:
    """Comm times projected from the profile's (world, bandwidth) to (``world``, ``gbps``)."""
    n0 = base_world if base_world is not None else profile.meta.get("world")
    b0 = base_gbps if base_gbps is not None else profile.meta.get("gbps")
    if n0 is None or b0 is None:
        raise ValueError("projection needs the profile's measured world size and bandwidth (base_world, base_gbps)")
    if world < 2 or n0 < 2:
        raise ValueError(f"projection needs world sizes >= 2, got {n0} -> {world}")
    if not (gbps > 0 and b0 > 0):
        raise ValueError(f"bandwidths must be > 0, got {b0} -> {gbps}")
    k = ring_factor("all_reduce", world) / ring_factor("all_reduce", n0) * b0 / gbps
    out = scaled(profile, comm=k)
    out.meta.update(world=world, gbps=gbps)
    return out
