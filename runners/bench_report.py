"""runners/bench.py's run records -> ``<out>/README.md`` (and ``bench.csv``).

Every number here is computed from the run records under ``<runs>/<model>/rep<k>/<segment>/``;
medians are over repetitions, spreads are min-max, and a ratio is taken within
one repetition (one job, one link rate) before its median is.  Bounds and
predictions come from the same job's records (bench_predict.py).  Regenerate
from the committed records: ``python runners/bench_report.py results/bench``.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import replace
from pathlib import Path

import bench_predict as bp

from dreamddp.atomic import write_csv, write_text
from dreamddp.prediction import record_link
from dreamddp.results.target import time_to_target, train_loss_points
from dreamddp.schedule.authors_model import modelled_times
from dreamddp.schedule.compare import reference_root
from dreamddp.schedule.profile import load_profile, scaled

REFERENCE = bp.REFERENCE
TIMED = ["ssgd", "ascwfbp", "dear", "flsgd", "plsgd_enp", "streaming_diloco", "dreamddp", "dreamddp+overlap",
         "dreamddp+general", "dreamddp+delay"]
IDEAL = ["ddp@ideal", "ssgd@ideal", "nosync@ideal", "plain@ideal"]
# The paper's 32-GPU table: A6000 profiles x (backward, comm) multipliers (PAPER.md; the artifact README).
PAPER_PROFILES = {"gpt2": ("paper-v1/A6000/gpt2", 10.0, 5.0), "resnet18": ("paper-v1/A6000/resnet18", 2.0, 1.0),
                  "resnet50": ("paper-v1/A6000/resnet50", 2.0, 1.0), "llama2": ("paper-v1/A6000/llama2", 10.0, 5.0)}
AUTHORS_KEYS = {"ssgd": "sgd", "ascwfbp": "pipe_sgd", "flsgd": "localsgd", "plsgd_enp": "pipe_seq_localsgd"}
WITHIN = 0.05  # every algorithm within 5% of its own bound


def load(runs: str) -> dict:
    """{model: {rep: {segment: run record}}} of every completed segment."""
    out: dict = {}
    for path in sorted(Path(runs).glob("*/rep*/*/run.json")):
        rec = json.loads(path.read_text())
        if rec.get("status") != "completed":
            continue
        model, rep, label = path.parts[-4], int(path.parts[-3][3:]), path.parts[-2]
        rec["_dir"] = str(path.parent)
        out.setdefault(model, {}).setdefault(rep, {})[label] = rec
    return out


def job_seconds(segs: dict) -> float:
    """One job's duration: its first segment's start to its last segment's end (records only, so
    a job kept by ``bench.py --resume`` counts as long as it took)."""
    return max(r["end_time"] for r in segs.values()) - min(r["start_time"] for r in segs.values())


def _t(rec) -> float:
    return rec["summary"]["mean_iteration_time"]


def _med(values) -> tuple[float, float, float] | None:
    values = [v for v in values if v is not None]
    return (statistics.median(values), min(values), max(values)) if values else None


def _fmt(m, digits: int = 3) -> str:
    if m is None:
        return "n/a"
    return f"{m[0]:.{digits}f} ({m[1]:.{digits}f}-{m[2]:.{digits}f})"


def paper_ratios(model: str) -> dict:
    """Baseline / DreamDDP under the authors' model on their profile (H=10)."""
    try:
        rel, bpm, comm = PAPER_PROFILES[model]
        profile = scaled(load_profile(reference_root() / rel), bp=bpm, comm=comm)
    except (KeyError, FileNotFoundError):
        return {}
    times = modelled_times(profile, 10)["algorithm_times"]
    return {ours: times[theirs] / times["dream_ddp"] for ours, theirs in AUTHORS_KEYS.items()}


def authors_on_ours(segs: dict) -> dict:
    """Baseline / DreamDDP under the authors' model (forward left out, ASC-WFBP a fixed 0.6 of
    its communication) on THIS job's profile: each unit's steady backward and its all-reduce
    as the recorded link takes it.  Next to the measured ratios it shows what leaving the
    forward pass out of the model does to the gain."""
    profile = bp.steady_profile(segs)
    rec = segs.get(REFERENCE)
    if profile is None or rec is None:
        return {}
    link, world = record_link(rec), rec["extra"]["world_size"]
    comm = {u: link.seconds("all_reduce", profile.nbytes[u], world) for u in profile.units}
    times = modelled_times(replace(profile, comm=comm), int(rec["config"]["algo"]["H"]))["algorithm_times"]
    return {ours: times[theirs] / times["dream_ddp"] for ours, theirs in AUTHORS_KEYS.items()}


def lateness(rec: dict) -> float | None:
    """The median over sampled iterations of how long a worker was blocked in a wait after the
    collective's link deadline (the most of any collective of the iteration): what it waited
    beyond the link model, for the slowest rank to reach the collective and the backend's own
    transfer.  A collective waited long after its deadline (merged late) blocked for nothing."""
    late = []
    for r in bp.timed(rec):
        events = [e for e in (r.get("timeline") or {}).get("collectives", []) if e["complete"] is not None]
        if events:
            late.append(max(max(0.0, min(e["complete"] - e["deadline"], e["blocked"])) for e in events))
    return statistics.median(late) if late else None


def per_rep(reps: dict) -> dict:
    """Per repetition and segment: measured, predicted, bounds (seconds), ratios."""
    out: dict = {}
    for r, segs in reps.items():
        profile = bp.steady_profile(segs)
        skew = bp.nosync_skew(segs, profile) if profile else None
        for label in TIMED:
            rec = segs.get(label)
            if rec is None:
                continue
            row = {"rep": r, "measured": _t(rec), "late": lateness(rec)}
            if REFERENCE in segs:
                row["x_dreamddp"] = _t(rec) / _t(segs[REFERENCE])
            if profile is not None:
                row.update(predicted=bp.predict(rec, profile, skew), plan_bound=bp.plan_bound(rec, profile),
                           bound=bp.structure_bound(label, rec, profile), compute=bp.compute_time(profile),
                           longest_unit=bp.longest_unit(rec, profile))
            out.setdefault(label, []).append(row)
    return out


def in_flight_bytes(rec: dict | None) -> int | None:
    """The most parameter bytes a delayed-merge plan has in flight at once: the late collectives
    launched in the last ``merge_delay`` iterations (each holds a copy of its units)."""
    if not rec or not rec["extra"]["algorithm"].get("delayed"):
        return None
    late, d = rec["extra"]["algorithm"]["delayed"], int(rec["config"]["algo"]["merge_delay"])
    nbytes = [4 * u["numel"] for u in rec["extra"]["units"]]
    per = [sum(sum(nbytes[a:b + 1]) for a, b in its) for its in late]
    return max(sum(per[(h - k) % len(per)] for k in range(d)) for h in range(len(per)))


def times_to_target(reps: dict) -> tuple[float, dict]:
    """(target, {label: [seconds per repetition or None]}) on the smoothed training loss
    (results/target.py): the target is the highest final value among the timed runs, so
    every one of them reaches it."""
    curves = {(r, label): train_loss_points(segs[label]["iterations"])
              for r, segs in reps.items() for label in TIMED if label in segs}
    target = max(points[-1][1] for points in curves.values())
    out: dict = {}
    for (r, label), points in curves.items():
        out.setdefault(label, []).append(time_to_target(points, target))
    return target, out


def _split(segs: dict) -> str:
    rows = bp.timed(segs[bp.NOSYNC]) if bp.NOSYNC in segs else []
    if not rows:
        return ""
    f = statistics.median(r["forward"] for r in rows)
    b = statistics.median(r["backward"] for r in rows)
    s = statistics.median(r["time"] - r["wait"] - r["forward"] - r["backward"] for r in rows)
    return (f"Compute (nosync, steady): forward {1e3 * f:.1f} ms, backward {1e3 * b:.1f} ms, step and the rest "
            f"{1e3 * s:.1f} ms: backward / forward {b / f:.2f}, step / backward {s / b:.2f}.")


def model_section(model: str, reps: dict) -> tuple[list[str], list[dict], dict]:
    """Markdown lines, csv rows and the numbers the targets are judged on, for one model."""
    stats = per_rep(reps)
    paper = paper_ratios(model)
    ours_authors = {label: _med([authors_on_ours(segs).get(label) for segs in reps.values()]) for label in AUTHORS_KEYS}
    target, ttt = times_to_target(reps)
    ttt_ratio = {label: [a / b for a, b in zip(ttt[label], ttt[REFERENCE]) if a and b] for label in ttt}
    some = next(iter(reps.values()))
    rec = some.get(REFERENCE) or next(iter(some.values()))
    calib = json.loads((Path(rec["_dir"]).parent / "calibration.json").read_text())
    comm_backward = [s["ssgd"]["summary"]["mean_wait"] / s["ssgd"]["summary"]["mean_backward"]
                     for s in reps.values() if "ssgd" in s]
    m = rec["extra"].get("model", {})
    lines = [
        f"## {model}: {rec['config']['model']['name']}/{rec['config']['model']['size']} on {rec['config']['data']['name']}, "
        f"{rec['extra']['world_size']} workers, H={rec['config']['algo']['H']}",
        "",
        f"{len(reps)} repetitions, {rec['summary']['iterations']} iterations per run ({rec['summary']['timed_iterations']} timed). "
        + (f"{m['parameters'] / 1e6:.2f}M parameters, {m['edge_share']:.1%} of bytes in embeddings/head. " if m else "")
        + f"Emulated link {calib['gbps'] * 1e3:.2f} Mbit/s in repetition 0 (all-reduce of the {calib['model_bytes'] / 2**20:.2f} MiB "
        f"model = {calib['ratio']:g} x the steady backward of {calib['backward_s'] * 1e3:.1f} ms); measured comm/backward "
        f"(S-SGD's exposed wait / its backward): {_fmt(_med(comm_backward), 2)}. Alpha (one collective): "
        f"{rec['extra']['link']['alpha_ms']:.2f} ms. {_emulation(rec)} {_split(some)}",
        "",
        "| algorithm | iteration s | x DreamDDP (measured) | x DreamDDP (paper, modelled) | x DreamDDP (authors' model, "
        "this profile) | bound s | bound / measured | plan, no skew / measured | predicted / measured "
        f"| waited beyond the link model (ms) | time to loss {target:.3f} (s) | x DreamDDP (time to target) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows, judged = [], {}
    for label in TIMED:
        if label not in stats:
            continue
        st = stats[label]
        col = lambda key: _med([s.get(key) for s in st])  # noqa: E731
        ratio = lambda key: _med([s[key] / s["measured"] for s in st if s.get(key)])  # noqa: E731
        row = {"model": model, "algorithm": label, "iteration_s": col("measured"), "x_dreamddp": col("x_dreamddp"),
               "paper_x_dreamddp": paper.get(label), "authors_model_x_dreamddp": ours_authors.get(label),
               "bound_s": col("bound"), "bound_over_measured": ratio("bound"),
               "plan_over_measured": ratio("plan_bound"), "predicted_over_measured": ratio("predicted"),
               "late_ms": _med([1e3 * s["late"] for s in st if s.get("late") is not None]),
               "time_to_target_s": _med(ttt.get(label, [])), "ttt_x_dreamddp": _med(ttt_ratio.get(label, [])),
               "compute_s": col("compute")}
        rows.append(row)
        units = [s["longest_unit"] for s in st if s.get("longest_unit")]
        judged[label] = {**row, "longest_unit": units and (units[0][0], *(statistics.median(u[k] for u in units)
                                                                          for k in (1, 2, 3))),
                         "measured_by_rep": {s["rep"]: s["measured"] for s in st}}
        p = paper.get(label)
        lines.append(f"| {label} | {_fmt(row['iteration_s'])} | {_fmt(row['x_dreamddp'], 2)} | "
                     f"{'n/a' if p is None else f'{p:.2f}'} | {_fmt(row['authors_model_x_dreamddp'], 2)} | "
                     f"{_fmt(row['bound_s'])} | "
                     f"{_fmt(row['bound_over_measured'], 2)} | {_fmt(row['plan_over_measured'], 2)} | "
                     f"{_fmt(row['predicted_over_measured'], 2)} | {_fmt(row['late_ms'], 1)} | "
                     f"{_fmt(row['time_to_target_s'], 1)} | {_fmt(row['ttt_x_dreamddp'], 2)} |")
    times = {label: _med([_t(s[label]) for s in reps.values() if label in s]) for label in IDEAL}
    over = {"ssgd / ddp": _med([_t(s["ssgd@ideal"]) / _t(s["ddp@ideal"]) for s in reps.values()
                                if "ssgd@ideal" in s and "ddp@ideal" in s]),
            "nosync / plain": _med([_t(s["nosync@ideal"]) / _t(s["plain@ideal"]) for s in reps.values()
                                    if "nosync@ideal" in s and "plain@ideal" in s])}
    lines += ["", "Engine overhead on the ideal link (iteration time ratios, same job): "
              + "; ".join(f"{k} {_fmt(v, 3)}" for k, v in over.items())
              + ". Iteration seconds: " + ", ".join(f"{label} {_fmt(v, 3)}" for label, v in times.items()) + "."]
    memory = {label[: -len("@memory")]: s[label]["extra"]["memory"]["peak_bytes"]
              for s in reps.values() for label in s if label.endswith("@memory")}
    if memory:
        lines += ["", "Peak live tensor memory per worker during training (torch profiler: every tensor the run "
                  "allocated from building its model on, repetition 0):", "",
                  "| algorithm | peak MiB | x plain | x nosync |", "|---|---|---|---|"]
        for label, peak in memory.items():
            vs = lambda ref: "n/a" if not memory.get(ref) else f"{peak / memory[ref]:.3f}"  # noqa: E731
            lines.append(f"| {label} | {peak / 2**20:.2f} | {vs('plain@ideal')} | {vs('nosync@ideal')} |")
        late = in_flight_bytes(some.get("dreamddp+delay@memory") or some.get("dreamddp+delay"))
        if late and memory.get("dreamddp+delay") and memory.get("plain@ideal"):
            extra = memory["dreamddp+delay"] - memory["plain@ideal"]
            lines += ["", f"dreamddp+delay over plain: {extra / 2**20:.2f} MiB; the largest set of units its plan has "
                      f"in flight at once (merged late): {late / 2**20:.2f} MiB (one copy each with merge_delay=1)."]
    compute = _med([s["compute"] for s in stats.get(REFERENCE, []) if s.get("compute")])
    return lines, rows, {"rows": judged, "over": over, "memory": memory, "compute": compute,
                         "nosync": times.get("nosync@ideal")}


def _emulation(rec: dict) -> str:
    """How the host was shared (docs/bandwidth.md, "Emulating a cluster on a small CPU host")."""
    host, link = rec["extra"].get("host") or {}, rec["extra"]["link"]
    quota = f"compute threads capped at {host['cpu_quota']:g} cores" if host.get("cpu_quota") else \
        f"no CPU quota ({host.get('cpu_quota_note', 'not recorded')})"
    pinned = "pinned" if host.get("pinned") else "not pinned"
    return (f"Host: {host.get('local_workers', '?')} workers on {host.get('cores', '?')} cores, {quota}, {pinned}; "
            f"carrier {link.get('carrier', 'eager')}, hold_core {link.get('hold_core', False)}.")


def _x(j: dict, num: str, den: str) -> tuple | None:
    """num / den iteration time: the ratio inside each repetition (one job), then its median and spread."""
    a, b = j["rows"].get(num), j["rows"].get(den)
    if not a or not b:
        return None
    a, b = a["measured_by_rep"], b["measured_by_rep"]
    return _med([a[r] / b[r] for r in a if r in b])


def _reason(row: dict) -> str:
    """Why measured exceeds the bound, from the numbers: schedule, skew, and the rest."""
    measured = row["iteration_s"][0]
    parts = []
    if row["bound_over_measured"] and row["plan_over_measured"]:
        plan, bound = measured * row["plan_over_measured"][0], measured * row["bound_over_measured"][0]
        if plan - bound > 0.005 * measured:
            parts.append(f"its plan leaves {1e3 * (plan - bound):.1f} ms more wait than the best plan")
        if row["predicted_over_measured"]:
            pred = measured * row["predicted_over_measured"][0]
            parts.append(f"the ranks' skew adds {1e3 * (pred - plan):.1f} ms (predicted)")
            parts.append(f"{1e3 * (measured - pred):+.1f} ms are beyond the model (the backend's own transfer at "
                         f"the wait, per-op work the profile lacks)")
    return "; ".join(parts)


def targets(judged: dict, args: dict) -> list[str]:
    """The issues' targets, met or not, from the measurements."""
    out = ["## Targets", "", "| target | measured | met |", "|---|---|---|"]
    reasons: list[str] = []

    def line(name, value, ok):
        out.append(f"| {name} | {value} | {'yes' if ok else 'NO'} |")

    skew_job = args.get("nproc", 2) > 2
    for model, j in judged.items():
        rows = j["rows"]
        if not skew_job and model == "resnet18":
            for num, goal in (("flsgd", 1.25), ("plsgd_enp", 1.05), ("ascwfbp", 3.5)):
                m = rows.get(num, {}).get("x_dreamddp")
                line(f"{num} / dreamddp >= {goal} ({model})", _fmt(m, 2), m is not None and m[0] >= goal)
            m = _x(j, "dreamddp+delay", "dreamddp")
            n = _x(j, "dreamddp+delay", "dreamddp+overlap")
            line(f"dreamddp+delay <= min(dreamddp, dreamddp+overlap) ({model})",
                 f"x dreamddp {_fmt(m, 3)}, x overlap {_fmt(n, 3)}", m is not None and n is not None and max(m[0], n[0]) <= 1.0)
        if not skew_job and model == "gpt2":
            d = rows.get("dreamddp", {}).get("bound_over_measured")
            line(f"dreamddp within 3% of its bound ({model})", _fmt(d, 3), d is not None and d[0] >= 1 / 1.03)
            m = _x(j, "flsgd", "dreamddp+delay")
            line(f"flsgd / dreamddp+delay >= 1.22 ({model})", _fmt(m, 3), m is not None and m[0] >= 1.22)
            fl, ns = rows.get("flsgd", {}).get("iteration_s"), j.get("nosync")
            if m and fl and ns:
                ceiling = fl[0] / ns[0]
                line(f"flsgd / dreamddp+delay within 5% of flsgd / nosync = {ceiling:.3f} ({model})",
                     f"{m[0] / ceiling:.3f} of it", m[0] >= 0.95 * ceiling)
                if m[0] < 0.95 * ceiling:
                    reasons.append(_ceiling_reason(model, j, ns[0]))
        if skew_job:
            m = _x(j, "flsgd", "dreamddp+delay")
            line(f"dreamddp+delay beats flsgd by >= 10% ({model}, {args.get('nproc')} workers)", _fmt(m, 3),
                 m is not None and m[0] >= 1.10)
        missed = [(label, r) for label, r in rows.items()
                  if r["bound_over_measured"] and r["bound_over_measured"][0] < 1 - WITHIN]
        line(f"every algorithm within {WITHIN:.0%} of its bound ({model})",
             "all" if not missed else "missed: " + ", ".join(f"{lb} {r['bound_over_measured'][0]:.2f}" for lb, r in missed),
             not missed)
        over = j["over"].get("ssgd / ddp")
        line(f"ssgd <= 1.05 x ddp ({model})", _fmt(over, 3), over is not None and over[0] <= 1.05)
        mem = j["memory"]
        if mem.get("dreamddp") and mem.get("plain@ideal"):
            r = mem["dreamddp"] / mem["plain@ideal"]
            line(f"dreamddp peak memory <= plain + 2% ({model})", f"{r:.3f}", r <= 1.02)
    for model, j in judged.items():
        for label, r in j["rows"].items():
            if r["bound_over_measured"] and r["bound_over_measured"][0] < 1 - WITHIN:
                reasons.append(f"- {model} {label}: {r['iteration_s'][0] * 1e3:.1f} ms measured, bound "
                               f"{r['bound_s'][0] * 1e3:.1f} ms: {_reason(r)}.")
    return out + (["", "Where a target is missed, the measured reason:", ""] + reasons if reasons else [])


def _ceiling_reason(model: str, j: dict, nosync: float) -> str:
    """Why DreamDDP with a delayed merge stays above the compute-only iteration (nosync's)."""
    row = j["rows"]["dreamddp+delay"]
    measured, bound = row["iteration_s"][0], row["bound_s"][0]
    unit, comm, compute, step = row["longest_unit"]
    return (f"- {model} dreamddp+delay against the compute-only iteration: its own bound is {1e3 * bound:.1f} ms, "
            f"{1e3 * (bound - nosync):.1f} ms over nosync's {1e3 * nosync:.1f} ms: a late all-reduce runs behind "
            f"merge_delay iterations of compute less the step it follows ({1e3 * (compute - step):.0f} ms with "
            f"merge_delay=1, {1e3 * (2 * compute - step):.0f} ms with 2), and the longest one, {unit}'s, takes "
            f"{1e3 * comm:.0f} ms on this link. Measured {1e3 * measured:.1f} ms, {1e3 * (measured - bound):.1f} ms "
            f"over that bound.")


def write(runs: str, out: str) -> None:
    made = json.loads((Path(runs) / "bench.json").read_text())
    args = made["args"]
    data = load(runs)
    seconds = sum(job_seconds(segs) for reps in data.values() for segs in reps.values())
    target = "make bench" if args.get("preset", "compute") == "compute" else "make bench-skew"
    lines = [f"# Benchmark: every algorithm side by side (`{target}`)", "",
             "Made by `python runners/bench.py` " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in args.items()
                                                           if k not in ("out", "quick", "models", "target")
                                                           and not isinstance(v, bool) and v not in (None, []))
             + f" ({seconds / 60:.0f} min of jobs on this host, each from its first record's start to its "
             "last one's end). Numbers are medians over repetitions with the min-max "
             "spread in brackets; every ratio is taken inside one repetition (one job: the same processes, one "
             "link rate) before its median. Run records: `runs/<model>/rep<k>/<segment>/run.json`.", ""]
    rows, judged = [], {}
    for model, reps in data.items():
        section, model_rows, judged[model] = model_section(model, reps)
        lines += section + [""]
        rows += model_rows
    lines += targets(judged, args) + ["", _READING]
    write_text(os.path.join(out, "README.md"), "\n".join(lines) + "\n")
    if rows:
        write_csv(os.path.join(out, "bench.csv"), [{k: (v[0] if isinstance(v, tuple) else v) for k, v in r.items()}
                                                   for r in rows])


_READING = """## How to read it

- *x DreamDDP (measured)*: the algorithm's mean iteration time over DreamDDP's in the same job;
  *(paper, modelled)*: the same ratio under the authors' cost model on their A6000 profile with the
  paper's 32-GPU multipliers (runners/bench_report.py PAPER_PROFILES), which charges ASC-WFBP a
  fixed 60% of its communication and ignores the forward pass; *(authors' model, this profile)*:
  their model on this job's own per-unit profile and link, so the gap to the measured ratio is
  what leaving the forward pass (and the step) out of the model overstates.
- *bound*: the least iteration time any plan of the algorithm's kind could take on this job's
  profile and link (runners/bench_predict.py): for DreamDDP the least exposed wait any assignment
  of units to iterations leaves (the units ready last and needed first cannot be hidden; with
  overlap_forward, until their next forward; with the delayed merge, only a link busier than the
  whole iteration would show), for the others their own plan with every rank computing alike.
  *plan, no skew*: the same for the plan the run actually ran (its schedule).
- *predicted*: the simulator (dreamddp/schedule/simulator.py) on the job's own measurements: the
  DreamDDP segment's per-unit profile, the nosync segment's steady compute and every rank's spread
  of it (sampled: a sync point waits for the slowest rank), the link as recorded, the run's plan.
- Runs are interleaved one H-window at a time inside each job, so every algorithm samples the
  same slow and fast spells of the host; the link's clock of the runs not training is paused.
- *waited beyond the link model*: in the sampled iterations, how long after its modelled deadline
  the iteration's last collective completed (the slowest worker and gloo's own transfer).
- *time to loss*: training seconds (sum of iteration times) until the training loss, averaged
  over the last 10 iterations, first reaches the target: the highest final such loss among the
  timed runs, so every run reaches it (dreamddp/results/target.py).
- dreamddp+overlap runs DreamDDP's schedule with the averages finishing behind the next forward;
  dreamddp+general profiles and schedules with `algo.scheduler=general`; dreamddp+delay with
  `algo.merge_delay=1`.
"""


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Rebuild a benchmark's README.md and bench.csv from its run records.")
    parser.add_argument("out_dir", nargs="?", default="results/bench", help="the folder runners/bench.py wrote (runs/ inside)")
    out_dir = parser.parse_args().out_dir
    write(os.path.join(out_dir, "runs"), out_dir)
    print(f"{out_dir}/README.md")
