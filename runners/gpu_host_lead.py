"""results/gpu/host_lead.md: how far ahead of the GPU the host launched each collective, from the run records.

    python runners/gpu_host_lead.py [--gpu results/gpu]      # part of make gpu-reports

On CUDA a unit's gradient hook fires when backward has *queued* the unit's
kernels; the device runs them later.  The sampled iterations of every run in
``<gpu>/bench/*/runs`` hold both clocks: each collective's host launch time and
each unit's gradient-ready time on the device (CUDA events, read after the
iteration's synchronising end stamp).  For the collectives launched during
backward, the lead is the device-ready time of the op's last unit less its
launch.  A link reserved from the launch (what the emulated link did before
it waited for the device: dreamddp/comm/ready.py) put the modelled transfer on
the wire up to that lead early; replaying the iteration's collectives through
the link's FIFO from their device-ready times instead shows how much later
the last of them would have finished.  Runs whose marks synchronised the
device at every unit (before the event marks, run 2) show no lead: their host
waited for the device at each mark.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import subprocess
from pathlib import Path

import bench_regime
import bench_report
from gpu_summary import job_folders, where

from dreamddp.atomic import write_text
from dreamddp.prediction import record_link


# The commit that made the marks inside a pass CUDA events (dreamddp.clock.Stamps); a record made
# before it synchronised the device at every mark, so its host never ran ahead there.
EVENT_MARKS = "e151100af65d97cefa1a426156aee94ebac10dbd"


# The commit from which a paced link reserved a CUDA collective's wire time from when the device
# reached its launch (dreamddp/comm/ready.py); before it, from the host's launch.
DEVICE_READY = "42f030b5869925d96e86364a8581e2b7e0d11773"


@functools.cache
def _after(commit: str, sha: str) -> bool | None:
    """Whether ``sha`` holds ``commit`` (git history); None where git cannot say."""
    root = Path(__file__).resolve().parents[1]
    try:
        done = subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor", commit, sha],
                              capture_output=True)
    except OSError:  # no git here
        return None
    return {0: True, 1: False}.get(done.returncode)


def marks(sha: str) -> str:
    """How a record's per-unit marks were taken, from the commit it ran."""
    return {True: "events", False: "synchronised", None: "unknown"}[_after(EVENT_MARKS, sha)]


def link_from(sha: str) -> str:
    """When the record's paced link reserved a CUDA collective's wire time, from the commit it ran."""
    return {True: "device", False: "launch", None: "unknown"}[_after(DEVICE_READY, sha)]


def op_units(tag: str, index: dict[str, int]) -> list[int] | None:
    """The units of a collective's tag (``param:<unit name>`` or ``param:<first>-<last>``)."""
    name = tag.partition(":")[2]
    if name in index:
        return [index[name]]
    first, sep, last = name.partition("-")
    if sep and first.isdigit() and last.isdigit():
        return list(range(int(first), int(last) + 1))
    return None


def iteration_lead(row: dict, index: dict[str, int], link, world: int) -> tuple[list[float], float, float] | None:
    """(lead of each backward-launched collective, how much later the last deadline is when each
    reserves the link from its device-ready time than from its launch, the run's own last deadline
    less the device-ready replay's), or None when the timeline cannot say."""
    timeline = row.get("timeline") or {}
    ready, collectives = timeline.get("unit_ready"), timeline.get("collectives")
    if not ready or not collectives:
        return None
    begin, end = row["forward"], row["forward"] + row["backward"]  # the backward pass, host seconds since start
    leads, free_launch, free_device = [], float("-inf"), float("-inf")
    for c in sorted(collectives, key=lambda c: c["launch"]):
        seconds = link.seconds(c["kind"], c["bytes"], world)
        device = c["launch"]
        units = op_units(c["tag"], index)
        if begin <= c["launch"] <= end and units and all(ready[u] > 0 for u in units):
            device = max(c["launch"], max(ready[u] for u in units))
            leads.append(device - c["launch"])
        free_launch = max(c["launch"], free_launch) + seconds
        free_device = max(device, free_device) + seconds
    recorded = max(c["deadline"] for c in collectives)
    return (leads, free_device - free_launch, recorded - free_device) if leads else None


def run_rows(gpu: Path) -> tuple[list[dict], dict]:
    """The rows of every run with a sampled CUDA timeline, and each job's regime (its device line
    and forward / backward / step split, as its bench README states them), by (job, model)."""
    out, regimes = [], {}
    for job in sorted(d for dirs in job_folders(gpu).values() for d in dirs):
        name = f"{job.parent.name}/{job.name}"
        for model, reps in bench_report.load(str(job / "runs")).items():
            for rep, segs in sorted(reps.items()):
                for label, rec in segs.items():
                    row = _run_row(rec)
                    if row is None or label.endswith("@memory"):
                        continue
                    out.append({"job": name, "model": model, "rep": f"rep{rep}", "algorithm": label, **row})
                    regimes.setdefault((name, model), f"{bench_regime.emulation(rec, segs)} "
                                                      f"{bench_regime.compute_split(segs)}")
    return out, regimes


def _run_row(rec: dict) -> dict | None:
    link = record_link(rec) if rec.get("extra", {}).get("link") else None
    if link is None:
        return None
    index = {u["name"]: i for i, u in enumerate(rec["extra"]["units"])}
    found = [x for x in (iteration_lead(r, index, link, rec["extra"]["world_size"]) for r in rec["iterations"])
             if x is not None]
    if not found:
        return None
    leads = [lead for ls, _, _ in found for lead in ls]
    later = [shift for _, shift, _ in found]
    gap = [g for _, _, g in found]
    return {"marks": marks(rec["git_sha"]), "link_from": link_from(rec["git_sha"]), "ops": len(leads),
            "iterations": len(found), "lead_ms": 1e3 * statistics.median(leads), "lead_max_ms": 1e3 * max(leads),
            "later_ms": 1e3 * statistics.median(later), "gap_ms": 1e3 * statistics.median(gap),
            "iteration_ms": 1e3 * rec["summary"]["mean_iteration_time"]}


def report(rows: list[dict], regimes: dict) -> str:
    timed = [r for r in rows if r["marks"] == "events"]
    others = sorted({(r["job"], r["marks"]) for r in rows if r["marks"] != "events"})
    lines = ["# How far ahead of the GPU the host launched each collective", "",
             "Made by `python runners/gpu_host_lead.py` from the sampled iterations of the run records under "
             f"{where('`{}/*/runs`')} (module docstring: what is measured and how). "
             "*lead*: a backward-launched "
             "collective's device-ready time (its last unit's gradient, by CUDA event) less its host launch, "
             "median and largest over the sampled iterations. *last deadline later by*: replayed through the "
             "emulated link's FIFO from device-ready times instead of launch times, how much later the "
             "iteration's last collective would have left the modelled wire (median over sampled "
             "iterations): at most what a link reserved at launch left out of the iteration. *link from*: "
             "when the run's link reserved each transfer (from the commit it ran): at the host's launch, or "
             "from when the device reached the launch (dreamddp/comm/ready.py). *recorded less replay*: the "
             "run's own last deadline less the device-ready replay's: about minus the column before it where "
             "the link reserved at the launch, about zero where it waited for the device.", ""]
    for job in sorted({r["job"] for r in timed}):
        by_algo: dict[str, list[dict]] = {}
        for r in timed:
            if r["job"] == job:
                by_algo.setdefault(r["algorithm"], []).append(r)
        how = "/".join(sorted({r["link_from"] for rs in by_algo.values() for r in rs}))
        if by_algo:
            lines += [f"Job {job} (link from the {how}), median over the repetitions: " + "; ".join(
                f"{a} {statistics.median(r['later_ms'] for r in rs):.1f} ms later "
                f"({statistics.median(r['later_ms'] / r['iteration_ms'] for r in rs):.1%} of its iteration; "
                f"lead {statistics.median(r['lead_ms'] for r in rs):.1f} ms; recorded less replay "
                f"{statistics.median(r['gap_ms'] for r in rs):.1f} ms)" for a, rs in sorted(by_algo.items())) + ".",
                      ""]
    lines += [f"Regime of job {job} ({model}): {regimes[(job, model)]}"
              for job, model in sorted({(r["job"], r["model"]) for r in timed})] + [""]
    lines += ["| job | model | rep | algorithm | link from | ops | sampled iterations | lead ms (median) "
              "| lead ms (max) | last deadline later by ms | recorded less replay ms | iteration ms |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in timed:
        lines.append(f"| {r['job']} | {r['model']} | {r['rep']} | {r['algorithm']} | {r['link_from']} | {r['ops']} | "
                     f"{r['iterations']} | {r['lead_ms']:.2f} | {r['lead_max_ms']:.2f} | {r['later_ms']:.2f} | "
                     f"{r['gap_ms']:.2f} | {r['iteration_ms']:.1f} |")
    if others:
        lines += ["", "Not in the table: the jobs whose records took the marks another way (from the commit each ran): "
                  + "; ".join(f"{job} ({how})" for job, how in others) + ". *synchronised*: a device "
                  "synchronisation at every mark held the host back to the device there, so no lead can show."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu", default="results/gpu")
    args = p.parse_args(argv)
    gpu = Path(args.gpu)
    rows, regimes = run_rows(gpu)
    if not rows:
        raise SystemExit(f"gpu_host_lead: no sampled CUDA timelines under {where(str(gpu / '{}'))}")
    write_text(str(gpu / "host_lead.md"), report(rows, regimes))
    print(gpu / "host_lead.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
