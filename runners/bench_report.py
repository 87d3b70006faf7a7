"""runners/bench.py's run records -> ``results/bench/README.md`` (and ``bench.csv``).

Every number here is computed from the run records under ``<runs>/<model>/rep<k>/<segment>/``;
medians are over repetitions, spreads are min-max, and a ratio is taken within
one repetition (one job, one link rate) before its median is.  Regenerate from
the committed records: ``python runners/bench_report.py results/bench``.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np

from dreamddp.atomic import write_csv, write_text
from dreamddp.prediction import record_link, simulate_record
from dreamddp.schedule.authors_model import modelled_times
from dreamddp.schedule.compare import reference_root
from dreamddp.schedule.cost import arrays
from dreamddp.schedule.general import hiding_bound
from dreamddp.schedule.profile import load_profile, scaled
from dreamddp.run.summary import warmup_cut

REFERENCE = "dreamddp"
TIMED = ["ssgd", "ascwfbp", "dear", "flsgd", "plsgd_enp", "streaming_diloco", "dreamddp", "dreamddp+overlap",
         "dreamddp+general"]
IDEAL = ["ddp@ideal", "ssgd@ideal", "nosync@ideal", "plain@ideal"]
# The paper's 32-GPU table: A6000 profiles x (backward, comm) multipliers (PAPER.md; the artifact README).
PAPER_PROFILES = {"gpt2": ("paper-v1/A6000/gpt2", 10.0, 5.0), "resnet18": ("paper-v1/A6000/resnet18", 2.0, 1.0)}
AUTHORS_KEYS = {"ssgd": "sgd", "ascwfbp": "pipe_sgd", "flsgd": "localsgd", "plsgd_enp": "pipe_seq_localsgd"}
SMOOTH = 10  # iterations in the moving average of the training loss for time to target


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


def _t(rec) -> float:
    return rec["summary"]["mean_iteration_time"]


def _med(values: list[float]) -> tuple[float, float, float] | None:
    values = [v for v in values if v is not None]
    return (statistics.median(values), min(values), max(values)) if values else None


def _fmt(m, digits: int = 3, unit: str = "") -> str:
    if m is None:
        return "n/a"
    return f"{m[0]:.{digits}f}{unit} ({m[1]:.{digits}f}-{m[2]:.{digits}f})"


def paper_ratios(model: str) -> dict:
    """Baseline / DreamDDP under the authors' model on their profile (H=10)."""
    try:
        rel, bp, comm = PAPER_PROFILES[model.split("-")[0]]  # gpt2-2w: GPT-2 on 2 workers
        profile = scaled(load_profile(reference_root() / rel), bp=bp, comm=comm)
    except (KeyError, FileNotFoundError):
        return {}
    times = modelled_times(profile, 10)["algorithm_times"]
    return {ours: times[theirs] / times["dream_ddp"] for ours, theirs in AUTHORS_KEYS.items()}


def _timed(rec: dict) -> list[dict]:
    rows = rec["iterations"]
    return rows[warmup_cut(len(rows)):]


def steady_profile(profile, anchor: dict, split: dict | None = None):
    """The DreamDDP run's per-unit profile with its compute totals set to a run's steady state.

    Warm-up profiling passes run right after start-up and time the compute off
    the steady state; on a host with more workers than cores, compute also
    speeds up or slows down with how the workers' busy phases line up, which
    each algorithm's synchronisation changes.  So the totals come from the run
    being predicted (``anchor``): its backward, and the rest of its iteration
    outside waits (forward and step), split between forward and step as in
    ``split`` (the nosync run, whose forward holds no waits; default: the
    anchor itself).  Per-unit shares come from the profile; the link is the model's."""
    rows, ref = _timed(anchor), _timed(split or anchor)
    mean = lambda rs, f: statistics.fmean(f(r) for r in rs)  # noqa: E731
    backward = mean(rows, lambda r: r["backward"])
    rest = mean(rows, lambda r: r["time"] - r["wait"] - r["backward"])
    fwd_share = mean(ref, lambda r: r["forward"]) / mean(ref, lambda r: r["time"] - r["wait"] - r["backward"])
    fwd_scale = rest * fwd_share / sum(profile.fwd.values())
    bp_scale = backward / sum(profile.bp.values())
    return replace(profile, fwd={u: v * fwd_scale for u, v in profile.fwd.items()},
                   bp={u: v * bp_scale for u, v in profile.bp.items()}, step_time=rest * (1 - fwd_share))


def predictions(reps: dict) -> dict:
    """{label: [predicted / measured per repetition]} for the emulated segments."""
    out: dict = {}
    for segs in reps.values():
        if REFERENCE not in segs or "nosync@ideal" not in segs:
            continue
        measured = load_profile(os.path.join(segs[REFERENCE]["_dir"], "profile"))
        for label in TIMED:
            rec = segs.get(label)
            if rec is None:
                continue
            algo = rec["extra"]["algorithm"]
            profile = steady_profile(measured, rec, split=segs["nosync@ideal"])
            res = simulate_record(profile, rec["config"], world=rec["extra"]["world_size"], link=record_link(rec),
                                  groups=algo.get("groups"), runs=algo.get("runs"))
            out.setdefault(label, []).append(res.mean_iter / _t(rec))
    return out


def flsgd_ceiling(reps: dict) -> list[float]:
    """Per repetition, the largest FLSGD / DreamDDP any schedule could reach: FLSGD's measured
    iteration over (that iteration less FLSGD's exposed wait, i.e. its own compute, plus
    the least exposed wait per window of ANY assignment / H), that wait bounded below by
    what each unit overruns when synced alone (schedule.general.hiding_bound) on the
    DreamDDP segment's profile (backward shares; totals of the nosync segment), each
    unit's all-reduce priced by the recorded link (alpha + bytes / bandwidth)."""
    out = []
    for segs in reps.values():
        if not all(k in segs for k in (REFERENCE, "flsgd", "nosync@ideal")):  # nosync: the backward split
            continue
        profile = steady_profile(load_profile(os.path.join(segs[REFERENCE]["_dir"], "profile")), segs["flsgd"],
                                 split=segs["nosync@ideal"])
        link, world = record_link(segs[REFERENCE]), segs[REFERENCE]["extra"]["world_size"]
        bp, _ = arrays(profile)
        comm = np.array([link.seconds("all_reduce", profile.nbytes[u], world) for u in profile.units])
        ready, synced = np.cumsum(bp), comm > 0
        least_wait = hiding_bound(ready[synced], comm[synced], float(ready[-1]))
        H = segs[REFERENCE]["config"]["algo"]["H"]
        flsgd = segs["flsgd"]["summary"]
        out.append(flsgd["mean_iteration_time"] / (flsgd["mean_iteration_time"] - flsgd["mean_wait"] + least_wait / H))
    return out


def lateness(reps: dict) -> dict:
    """{label: [per repetition, the median over sampled iterations of how long the iteration's
    last collective completed after its link deadline]}: the time a worker waited beyond the
    link model, i.e. for the slowest rank to reach the collective (on this host, more
    workers than cores), plus the backend's own completion."""
    out: dict = {}
    for segs in reps.values():
        for label in TIMED:
            rec = segs.get(label)
            late = [max(0.0, ev[-1]["complete"] - ev[-1]["deadline"]) for r in (_timed(rec) if rec else [])
                    if (ev := [e for e in (r.get("timeline") or {}).get("collectives", []) if e["complete"]])]
            if late:
                out.setdefault(label, []).append(statistics.median(late))
    return out


def _smoothed(losses: list[float]) -> list[float]:
    return [statistics.fmean(losses[max(0, i - SMOOTH + 1): i + 1]) for i in range(len(losses))]


def time_to_target(reps: dict) -> tuple[float, dict]:
    """(target, {label: [seconds per repetition or None]}): the target is the highest final smoothed
    training loss among the timed runs, so every one of them reaches it."""
    curves = {}
    for r, segs in reps.items():
        for label in TIMED:
            if label in segs:
                rows = segs[label]["iterations"]
                curves[(r, label)] = ([x["time"] for x in rows], _smoothed([x["loss"] for x in rows]))
    target = max(s[-1] for _, s in curves.values())
    out: dict = {}
    for (r, label), (times, smooth) in curves.items():
        elapsed, hit = 0.0, None
        for t, s in zip(times, smooth):
            elapsed += t
            if s <= target:
                hit = elapsed
                break
        out.setdefault(label, []).append(hit)
    return target, out


def model_section(model: str, reps: dict) -> tuple[list[str], list[dict], dict]:
    """Markdown lines, csv rows and the numbers the targets are judged on, for one model."""
    times = {label: [_t(s[label]) for s in reps.values() if label in s] for label in TIMED + IDEAL}
    ratio = {label: [_t(s[label]) / _t(s[REFERENCE]) for s in reps.values() if label in s and REFERENCE in s]
             for label in TIMED}
    paper = paper_ratios(model)
    pred = predictions(reps)
    late = lateness(reps)
    target, ttt = time_to_target(reps)
    ttt_ratio = {label: [a / b for a, b in zip(ttt[label], ttt[REFERENCE]) if a and b] for label in ttt}
    some = next(iter(reps.values()))
    rec = some.get(REFERENCE) or next(iter(some.values()))
    calib = json.loads((Path(rec["_dir"]).parent / "calibration.json").read_text())
    comm_backward = [s["ssgd"]["summary"]["mean_wait"] / s["ssgd"]["summary"]["mean_backward"]
                     for s in reps.values() if "ssgd" in s]
    lines = [
        f"## {model}: {rec['config']['model']['name']}/{rec['config']['model']['size']} on {rec['config']['data']['name']}, "
        f"{rec['extra']['world_size']} workers, H={rec['config']['algo']['H']}",
        "",
        f"{len(reps)} repetitions, {rec['summary']['iterations']} iterations per run ({rec['summary']['timed_iterations']} timed). "
        f"Emulated link {calib['gbps'] * 1e3:.2f} Mbit/s in repetition 0 (all-reduce of the {calib['model_bytes'] / 2**20:.2f} MiB "
        f"model = {calib['ratio']:g} x the steady backward of {calib['backward_s'] * 1e3:.1f} ms); measured comm/backward "
        f"(S-SGD's exposed wait / its backward): {_fmt(_med(comm_backward), 2)}. Alpha (one collective): "
        f"{rec['extra']['link']['alpha_ms']:.2f} ms. {_emulation(rec)}",
        "",
        "| algorithm | iteration s | x DreamDDP (measured) | x DreamDDP (paper, modelled) | predicted / measured | "
        f"waited beyond the link model (ms) | time to loss {target:.3f} (s) | x DreamDDP (time to target) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = []
    for label in TIMED:
        if not times[label]:
            continue
        p = paper.get(label)
        row = {"model": model, "algorithm": label, "iteration_s": _med(times[label]), "x_dreamddp": _med(ratio[label]),
               "paper_x_dreamddp": p, "predicted_over_measured": _med(pred.get(label, [])),
               "late_s": _med(late.get(label, [])),
               "time_to_target_s": _med(ttt.get(label, [])), "ttt_x_dreamddp": _med(ttt_ratio.get(label, []))}
        rows.append(row)
        lines.append(f"| {label} | {_fmt(row['iteration_s'])} | {_fmt(row['x_dreamddp'], 2)} | "
                     f"{'n/a' if p is None else f'{p:.2f}'} | {_fmt(row['predicted_over_measured'], 2)} | "
                     f"{_fmt(None if row['late_s'] is None else tuple(1e3 * v for v in row['late_s']), 1)} | "
                     f"{_fmt(row['time_to_target_s'], 1)} | {_fmt(row['ttt_x_dreamddp'], 2)} |")
    over = {"ssgd / ddp": [_t(s["ssgd@ideal"]) / _t(s["ddp@ideal"]) for s in reps.values()
                           if "ssgd@ideal" in s and "ddp@ideal" in s],
            "nosync / plain": [_t(s["nosync@ideal"]) / _t(s["plain@ideal"]) for s in reps.values()
                               if "nosync@ideal" in s and "plain@ideal" in s]}
    ceiling = _med(flsgd_ceiling(reps))
    lines += ["", "The most FLSGD / DreamDDP any schedule could give here (FLSGD's iteration over its own compute plus "
              "the least exposed wait per window of any assignment of units to iterations, on the measured "
              f"profile, / H): {_fmt(ceiling, 2)}. What no schedule hides is each unit's all-reduce that "
              "overruns the backward left after its gradient is ready (the input-side units, the embedding "
              "last of all); forward and the optimizer step, which no schedule overlaps, weigh in the "
              "denominator."]
    lines += ["", "Engine overhead on the ideal link (iteration time ratios, same job): "
              + "; ".join(f"{k} {_fmt(_med(v), 3)}" for k, v in over.items())
              + ". Iteration seconds: " + ", ".join(f"{label} {_fmt(_med(times[label]), 3)}" for label in IDEAL) + "."]
    memory = {label[: -len("@memory")]: s[label]["extra"]["memory"]["peak_bytes"]
              for s in reps.values() for label in s if label.endswith("@memory")}
    if memory:
        lines += ["", "Peak live tensor memory per worker during training (torch profiler: every tensor the run "
                  "allocated from building its model on, repetition 0):", "", "| algorithm | peak MiB | x plain | x nosync |", "|---|---|---|---|"]
        for label, peak in memory.items():
            vs = lambda ref: "n/a" if not memory.get(ref) else f"{peak / memory[ref]:.3f}"  # noqa: E731
            lines.append(f"| {label} | {peak / 2**20:.2f} | {vs('plain@ideal')} | {vs('nosync@ideal')} |")
    judged = {"ratio": {k: _med(v) for k, v in ratio.items()}, "pred": {k: _med(v) for k, v in pred.items()},
              "ceiling": ceiling, "times": {k: _med(v) for k, v in times.items()},
              "over": {k: _med(v) for k, v in over.items()}, "memory": memory}
    return lines, rows, judged


def _emulation(rec: dict) -> str:
    """How the host was shared (docs/bandwidth.md, "Emulating a cluster on a small CPU host")."""
    host, link = rec["extra"].get("host") or {}, rec["extra"]["link"]
    quota = f"compute threads capped at {host['cpu_quota']:g} cores" if host.get("cpu_quota") else \
        f"no CPU quota ({host.get('cpu_quota_note', 'not recorded')})"
    pinned = "pinned" if host.get("pinned") else "not pinned"
    return (f"Host: {host.get('local_workers', '?')} workers on {host.get('cores', '?')} cores, {quota}, {pinned}; "
            f"carrier {link.get('carrier', 'eager')}, hold_core {link.get('hold_core', False)}.")


def _gaps(j: dict) -> dict:
    """Measured minus modelled iteration time (ms) of the local-SGD variants."""
    return {k: j["times"][k][0] * (1 - j["pred"][k][0]) * 1e3 for k in ("flsgd", "plsgd_enp", "dreamddp", "dreamddp+general")
            if j["times"].get(k) and j["pred"].get(k)}


def _why(judged: dict) -> list[str]:
    """The measured reasons behind the GPT-2 targets, in numbers from this benchmark."""
    g, out = judged.get("gpt2"), []
    if not g:
        return []
    if g["ceiling"] is not None and g["ceiling"][0] < 1.2:
        out.append(f"- FLSGD / DreamDDP >= 1.2 is beyond what any schedule could give here: the best assignment of "
                   f"units to iterations, on the measured profile and link, gives {g['ceiling'][0]:.2f}. The "
                   "forward pass and the optimizer step, which no schedule overlaps, are in every iteration's "
                   "time (the paper's cost model leaves the forward pass out), and the embedding's all-reduce, "
                   "ready last, cannot be hidden at all.")
    gaps = _gaps(g)
    if gaps:
        out.append("- Measured minus modelled iteration time: " + ", ".join(f"{k} {v:+.1f} ms" for k, v in gaps.items())
                   + ". The algorithms that synchronise every iteration wait, every iteration, for the slowest of "
                   "workers that time-slice two cores and for gloo's own transfer at the wait; FLSGD does once per "
                   "window (docs/bandwidth.md, \"Emulating a cluster on a small CPU host\"). This is also why the "
                   "simulator, which models the link and not the workers' skew, is off by more than 10% for them.")
    two = judged.get("gpt2-2w")
    if two and two["ratio"].get("flsgd") and two["ratio"].get("plsgd_enp"):
        out.append(f"- With one worker per core (gpt2-2w, the same model and comm/backward on 2 workers) FLSGD / "
                   f"DreamDDP is {two['ratio']['flsgd'][0]:.2f} and PLSGD-ENP / DreamDDP "
                   f"{two['ratio']['plsgd_enp'][0]:.2f}; measured minus modelled: "
                   + ", ".join(f"{k} {v:+.1f} ms" for k, v in _gaps(two).items()) + ".")
    return ["", "Why (GPT-2):", ""] + out if out else []


def targets(judged: dict) -> list[str]:
    """The issue's targets, met or not, from the measurements."""
    out = ["## Targets", "", "| target | measured | met |", "|---|---|---|"]

    def line(name, value, ok):
        out.append(f"| {name} | {value} | {'yes' if ok else 'NO'} |")

    for model in ("gpt2", "gpt2-2w"):
        j = judged.get(model)
        if not j:
            continue
        for label, goal in (("flsgd", 1.2), ("plsgd_enp", 1.05)):
            m = j["ratio"].get(label)
            line(f"{label} / dreamddp >= {goal} ({model})", _fmt(m, 2), m is not None and m[0] >= goal)
        line(f"(the most flsgd / dreamddp any schedule could give, {model})", _fmt(j["ceiling"], 2),
             j["ceiling"] is not None and j["ceiling"][0] >= 1.2)
    for model, j in judged.items():
        worst = max(j["pred"].items(), key=lambda kv: abs(kv[1][0] - 1)) if j["pred"] else None
        if worst:
            line(f"simulator within 10%, every algorithm ({model})", f"worst {worst[0]}: {worst[1][0]:.3f}",
                 all(abs(m[0] - 1) <= 0.10 for m in j["pred"].values()))
        m = j["over"].get("ssgd / ddp")
        line(f"ssgd <= 1.05 x ddp ({model})", _fmt(m, 3), m is not None and m[0] <= 1.05)
        mem = j["memory"]
        if mem.get("dreamddp") and mem.get("plain@ideal"):
            r = mem["dreamddp"] / mem["plain@ideal"]
            line(f"dreamddp peak memory <= plain + 2% ({model})", f"{r:.3f}", r <= 1.02)
    return out + _why(judged)


def write(runs: str, out: str) -> None:
    made = json.loads((Path(runs) / "bench.json").read_text())
    args, seconds = made["args"], made["seconds"]
    data = load(runs)
    lines = ["# Benchmark: every algorithm side by side (`make bench`)", "",
             "Made by `python runners/bench.py` " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in args.items()
                                                           if k not in ("out", "quick", "models")
                                                           and not isinstance(v, bool) and v not in (None, []))
             + f" ({seconds / 60:.0f} min on this host). Numbers are medians over repetitions with the min-max "
             "spread in brackets; every ratio is taken inside one repetition (one job: the same processes, one "
             "link rate) before its median. Run records: `runs/<model>/rep<k>/<segment>/run.json`.", ""]
    rows, judged = [], {}
    for model, reps in data.items():
        section, model_rows, judged[model] = model_section(model, reps)
        lines += section + [""]
        rows += model_rows
    lines += targets(judged) + ["", _READING]
    write_text(os.path.join(out, "README.md"), "\n".join(lines) + "\n")
    if rows:
        write_csv(os.path.join(out, "bench.csv"), [{k: (v[0] if isinstance(v, tuple) else v) for k, v in r.items()}
                                                   for r in rows])


_READING = """## How to read it

- *x DreamDDP (measured)*: the algorithm's mean iteration time over DreamDDP's in the same job;
  *(paper, modelled)*: the same ratio under the authors' cost model on their A6000 profile with the
  paper's 32-GPU multipliers (runners/bench_report.py PAPER_PROFILES), which charges ASC-WFBP a
  fixed 60% of its communication and ignores the forward pass.
- Runs are interleaved one H-window at a time inside each job, so every algorithm samples the
  same slow and fast spells of the host; the link's clock of the runs not training is paused.
- *waited beyond the link model*: in the sampled iterations, how long after its modelled deadline
  the iteration's last collective completed (the slowest worker and gloo's own transfer).
- *predicted / measured*: our simulator (dreamddp/prediction.py) on the DreamDDP segment's
  per-unit profile, its compute totals taken from the nosync segment's steady state, the link
  as recorded (rate, measured alpha), each algorithm's own recorded plan.
- *time to loss*: training seconds (sum of iteration times) until the training loss, averaged
  over the last 10 iterations, first reaches the target: the highest final such loss among the
  timed runs, so every run reaches it.
- dreamddp+overlap runs DreamDDP's schedule with the averages finishing behind the next forward;
  dreamddp+general profiles and schedules with `algo.scheduler=general`.
"""


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Rebuild a benchmark's README.md and bench.csv from its run records.")
    parser.add_argument("out_dir", nargs="?", default="results/bench", help="the folder runners/bench.py wrote (runs/ inside)")
    out_dir = parser.parse_args().out_dir
    write(os.path.join(out_dir, "runs"), out_dir)
    print(f"{out_dir}/README.md")
