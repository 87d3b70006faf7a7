"""``dreamddp-bench report DIR``: a benchmark's run records -> ``DIR/README.md`` and ``DIR/bench.csv``.

Every number here is computed from the run records under ``<runs>/<model>/rep<k>/<segment>/``;
medians are over repetitions, spreads are min-max, and a ratio is taken within
one repetition (one job, one link rate) before its median is.  Bounds and
predictions come from the same job's records (dreamddp/bench/predict.py).
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import replace
from pathlib import Path

from dreamddp.bench import predict as bp
from dreamddp.bench.overhead import engine_overhead, fmt_ms, phase_overhead
from dreamddp.bench.regime import batch, compute_split, emulation
from dreamddp.bench.segments import IDEAL, OPT_IN, TIMED, VARIES

from dreamddp.atomic import write_csv, write_text
from dreamddp.engine.layout import UnitLayout
from dreamddp.prediction import record_carrier, record_link
from dreamddp.results.spread import fmt_spread, median_spread
from dreamddp.results.target import time_to_target, train_loss_points
from dreamddp.schedule.authors_model import modelled_times
from dreamddp.schedule.compare import paper_32gpu_profile
from dreamddp.schedule.delay import late_op
from dreamddp.schedule.schedule_file import late_part, late_run

REFERENCE = bp.REFERENCE
AUTHORS_KEYS = {"ssgd": "sgd", "ascwfbp": "pipe_sgd", "flsgd": "localsgd", "plsgd_enp": "pipe_seq_localsgd"}


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


REFERENCES = ("dreamddp", "flsgd")  # the algorithms the side-by-side reports divide by


def ratio_over(reps: dict, label: str, ref: str, of=bp.mean_iteration):
    """``label``'s ``of`` (default its mean iteration) over ``ref``'s, taken inside each
    repetition, then its median with the min-max spread (None where no repetition has both)."""
    return median_spread([of(s[label]) / of(s[ref]) for s in reps.values() if label in s and ref in s])


def job_seconds(segs: dict) -> float:
    """One job's duration: its first segment's start to its last segment's end (records only, so
    a job kept by ``bench.py --resume`` counts as long as it took)."""
    return max(r["end_time"] for r in segs.values()) - min(r["start_time"] for r in segs.values())


def paper_ratios(model: str) -> dict:
    """Baseline / DreamDDP under the authors' model on their profile (H=10)."""
    try:
        profile = paper_32gpu_profile(model)
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
        skew = bp.reference_skew(segs, profile) if profile else None
        for label in TIMED:
            rec = segs.get(label)
            if rec is None:
                continue
            row = {"rep": r, "measured": bp.mean_iteration(rec), "late": lateness(rec), "probed": record_carrier(rec) is not None,
                   "carrier": rec["extra"]["link"].get("carrier", "eager")}
            if REFERENCE in segs:
                row["x_dreamddp"] = bp.mean_iteration(rec) / bp.mean_iteration(segs[REFERENCE])
            if any(label in segs for label in bp.COMPUTE_ONLY):
                row["compute_over"] = bp.backward_over_reference(rec, segs, profile)
                row["forward_over"] = bp.forward_over_reference(rec, segs)
                row["compute_excess"] = bp.compute_excess(rec, segs, profile)
                row["excess_of"] = " and ".join(bp.compute_phases(rec))
                row["host_charged"] = bp.host_charged(rec, profile, bp.compute_phases(rec))
            if profile is not None:
                row.update(predicted=bp.predict(rec, profile, skew), plan_bound=bp.plan_bound(rec, profile),
                           plan_real=bp.plan_bound(rec, profile, real=True),
                           plan_host=bp.plan_bound(rec, profile, real=True, host=True),
                           bound=bp.structure_bound(label, rec, profile),
                           any_bound=bp.structure_bound(label, rec, profile, any_assignment=True),
                           compute=bp.compute_time(profile),
                           longest_unit=bp.longest_unit(rec, profile), forward_steps=bp.forward_steps(rec, profile))
            out.setdefault(label, []).append(row)
    return out


def in_flight_bytes(rec: dict | None) -> int | None:
    """The most parameter bytes a delayed-merge plan has in flight at once: the late collectives
    launched in the last ``merge_delay`` iterations (each holds a copy of its units)."""
    if not rec or not rec["extra"]["algorithm"].get("delayed"):
        return None
    late, d = rec["extra"]["algorithm"]["delayed"], int(rec["config"]["algo"]["merge_delay"])
    units = rec["extra"]["units"]
    layout = UnitLayout(tuple(u["name"] for u in units), tuple(4 * u["numel"] for u in units), frozenset(),
                        rec["extra"]["world_size"])
    per = [sum(layout.op_bytes(late_op(*late_run(e), d, late_part(e))) for e in its) for its in late]
    return max(sum(per[(h - k) % len(per)] for k in range(d)) for h in range(len(per)))


def times_to_target(reps: dict) -> tuple[float | None, dict]:
    """(target, {label: [seconds per repetition or None]}) on the smoothed training loss
    (results/target.py): the target is the highest final value among the timed runs, so
    every one of them reaches it."""
    curves = {(r, label): train_loss_points(segs[label]["iterations"])
              for r, segs in reps.items() for label in TIMED if label in segs}
    if not curves:  # a job of the ideal-link segments alone (--only nosync@ideal plain@ideal)
        return None, {}
    target = max(points[-1][1] for points in curves.values())
    out: dict = {}
    for (r, label), points in curves.items():
        out.setdefault(label, []).append(time_to_target(points, target))
    return target, out


def model_section(model: str, reps: dict) -> tuple[list[str], list[dict]]:
    """Markdown lines and csv rows for one model."""
    stats = per_rep(reps)
    paper = paper_ratios(model)
    ours_authors = {label: median_spread([authors_on_ours(segs).get(label) for segs in reps.values()]) for label in AUTHORS_KEYS}
    target, ttt = times_to_target(reps)
    ttt_ratio = {label: [a / b for a, b in zip(ttt[label], ttt.get(REFERENCE, [])) if a and b] for label in ttt}
    some = next(iter(reps.values()))
    # the header's run: a timed one (the calibration run is shorter and has no algorithm of its own)
    rec = some.get(REFERENCE) or some.get(bp.NOSYNC) or next(r for label, r in some.items() if label != "calibration")
    calib = json.loads((Path(rec["_dir"]).parent / "calibration.json").read_text())
    world = rec["extra"]["world_size"]
    comm_backward = [s["ssgd"]["summary"]["mean_wait"] / s["ssgd"]["summary"]["mean_backward"]
                     for s in reps.values() if "ssgd" in s]
    m = rec["extra"].get("model", {})
    lines = [
        f"## {model}: {rec['config']['model']['name']}/{rec['config']['model']['size']} on {rec['config']['data']['name']}, "
        f"{batch(rec)}, {world} worker{'s' if world > 1 else ''}, "
        f"H={rec['config']['algo']['H']}",
        "",
        f"{len(reps)} repetitions, {rec['summary']['iterations']} iterations per run ({rec['summary']['timed_iterations']} timed). "
        + (f"{m['parameters'] / 1e6:.2f}M parameters, {m['edge_share']:.1%} of bytes in embeddings/head. " if m else "")
        + (f"Emulated link {calib['gbps'] * 1e3:.2f} Mbit/s in repetition 0 (all-reduce of the {calib['model_bytes'] / 2**20:.2f} MiB "
           f"model = {calib['ratio']:g} x the steady backward of {calib['backward_s'] * 1e3:.1f} ms); measured comm/backward "
           f"(S-SGD's exposed wait / its backward): {fmt_spread(median_spread(comm_backward), 2)}. Alpha (one collective): "
           f"{rec['extra']['link']['alpha_ms']:.2f} ms. " if world > 1 else "One worker: no link to emulate. ")
        + f"{emulation(rec, some)} {compute_split(some)}",
        "",
    ]
    lines += [
        "| algorithm | iteration s | x DreamDDP (measured) | x DreamDDP (paper, modelled) | x DreamDDP (authors' model, "
        "this profile) | bound s | bound / measured | plan, no skew / measured | predicted / measured "
        f"| waited beyond the link model (ms) | time to loss {target:.3f} (s) | x DreamDDP (time to target) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ] if target is not None else ["No algorithm on the emulated link in this job: the engine overhead alone."]
    rows = []
    for label in TIMED:
        if label not in stats:
            continue
        st = stats[label]
        col = lambda key: median_spread([s.get(key) for s in st])  # noqa: E731
        ratio = lambda key: median_spread([s[key] / s["measured"] for s in st if s.get(key)])  # noqa: E731
        row = {"model": model, "algorithm": label, "iteration_s": col("measured"), "x_dreamddp": col("x_dreamddp"),
               "paper_x_dreamddp": paper.get(label), "authors_model_x_dreamddp": ours_authors.get(label),
               "bound_s": col("bound"), "bound_over_measured": ratio("bound"),
               "any_bound_s": col("any_bound"), "any_bound_over_measured": ratio("any_bound"),
               "plan_over_measured": ratio("plan_bound"), "plan_real_over_measured": ratio("plan_real"),
               "plan_host_over_measured": ratio("plan_host"),
               "predicted_over_measured": ratio("predicted"),
               "late_ms": median_spread([1e3 * s["late"] for s in st if s.get("late") is not None]),
               "time_to_target_s": median_spread(ttt.get(label, [])), "ttt_x_dreamddp": median_spread(ttt_ratio.get(label, [])),
               "compute_s": col("compute"), "probed": all(s["probed"] for s in st),
               "compute_over": col("compute_over"), "forward_over": col("forward_over"),
               "compute_excess_s": col("compute_excess"), "host_charged_s": col("host_charged"),
               "excess_of": st[0].get("excess_of"),
               "forward_steps_ms": median_spread([1e3 * s["forward_steps"][0] for s in st if s.get("forward_steps")]),
               "forward_steps_charged_ms": median_spread([1e3 * s["forward_steps"][1] for s in st
                                                          if s.get("forward_steps")])}
        rows.append(row)
        p = paper.get(label)
        lines.append(f"| {label} | {fmt_spread(row['iteration_s'])} | {fmt_spread(row['x_dreamddp'], 2)} | "
                     f"{'n/a' if p is None else f'{p:.2f}'} | {fmt_spread(row['authors_model_x_dreamddp'], 2)} | "
                     f"{fmt_spread(row['bound_s'])} | "
                     f"{fmt_spread(row['bound_over_measured'], 2)} | {fmt_spread(row['plan_over_measured'], 2)} | "
                     f"{fmt_spread(row['predicted_over_measured'], 2)} | {fmt_spread(row['late_ms'], 1)} | "
                     f"{fmt_spread(row['time_to_target_s'], 1)} | {fmt_spread(row['ttt_x_dreamddp'], 2)} |")
    ran = {label for s in reps.values() for label in s}
    bases = {label: VARIES[label] for label in TIMED if label in OPT_IN and label in ran and VARIES[label] != label}
    varied = {f"{label} / {base}": median_spread([bp.mean_iteration(s[label]) / bp.mean_iteration(s[base]) for s in reps.values()
                                                 if label in s and base in s])
              for label, base in bases.items()}
    if any(varied.values()):
        lines += ["", "Opt-in variants over the run they vary (iteration time ratios, same job): "
                  + "; ".join(f"{k} {fmt_spread(v, 3)}" for k, v in varied.items() if v) + "."]
    times = {label: median_spread([bp.mean_iteration(s[label]) for s in reps.values() if label in s])
             for label in IDEAL if label in ran or label not in OPT_IN}
    over = engine_overhead(reps)
    lines += ["", "Engine overhead on the ideal link (iteration time ratios, same job): "
              + "; ".join(f"{k} {fmt_spread(v, 3)}" for k, v in over.items())
              + ". Iteration seconds: " + ", ".join(f"{label} {fmt_spread(v, 3)}" for label, v in times.items()) + "."]
    phases = phase_overhead(reps)
    if phases:
        lines += ["", "nosync less plain per phase (ms, mean per run, median over repetitions): "
                  + "; ".join(f"{k} {fmt_ms(v)}" for k, v in phases.items()) + "."]
    memory = {label[: -len("@memory")]: s[label]["extra"]["memory"]["peak_bytes"]
              for s in reps.values() for label in s if label.endswith("@memory")}
    if memory:
        # as each record says it measured (CPU records before 2026-11-29 counted the profiler's own
        # events, which miss a free made on gloo's thread: dreamddp/bench/memory.py)
        notes = sorted({s[label]["extra"]["memory"].get("note") or "" for s in reps.values()
                        for label in s if label.endswith("@memory")} - {""})
        how = "; ".join(notes) or "not recorded"
        lines += ["", f"Peak live tensor memory per worker during training (rank 0's record: {how}; repetition 0):",
                  "",
                  "| algorithm | peak MiB | x plain | x nosync |", "|---|---|---|---|"]
        for label, peak in memory.items():
            vs = lambda ref: "n/a" if not memory.get(ref) else f"{peak / memory[ref]:.3f}"  # noqa: E731
            lines.append(f"| {label} | {peak / 2**20:.2f} | {vs('plain@ideal')} | {vs('nosync@ideal')} |")
        late = in_flight_bytes(some.get("dreamddp+delay@memory") or some.get("dreamddp+delay"))
        if late and memory.get("dreamddp+delay") and memory.get("plain@ideal"):
            extra = memory["dreamddp+delay"] - memory["plain@ideal"]
            lines += ["", f"dreamddp+delay over plain: {extra / 2**20:.2f} MiB; the largest set of units its plan has "
                      f"in flight at once (merged late): {late / 2**20:.2f} MiB (one copy each with merge_delay=1)."]
    return lines, rows


def _flag(name: str, value) -> str:
    """One argument of bench.py's command line as it was given."""
    flag = "--" + name.replace("_", "-")
    if value is True:
        return flag
    return f"{flag} {' '.join(map(str, value)) if isinstance(value, list) else value}"


def made_by(args: dict) -> str:
    """The command that made the records, as it was given (its defaults left out)."""
    skip = ("out", "quick", "target")
    flags = [_flag(k, v) for k, v in args.items() if k not in skip and v is not None and v is not False and v != []]
    return "dreamddp-bench run " + " ".join(flags)


def write(runs: str, out: str, data: dict | None = None) -> list[dict]:
    """``out``/README.md and bench.csv from the records under ``runs`` (``data``: ``load(runs)``
    where the caller has it); returns the table's rows (medians with their spread)."""
    made = json.loads((Path(runs) / "bench.json").read_text())
    args = made["args"]
    data = load(runs) if data is None else data
    seconds = sum(job_seconds(segs) for reps in data.values() for segs in reps.values())
    lines = [f"# Benchmark: algorithms side by side (`--preset {args.get('preset', 'compute')}`)", "",
             f"Made by `{made_by(args)}` ({seconds / 60:.0f} min of jobs on this host, each from its first record's "
             "start to its last one's end); rebuilt by `dreamddp-bench report` from the run records. Numbers are "
             "medians over repetitions with the min-max spread in brackets; every ratio is taken inside one "
             "repetition (one job: the same processes, one link rate) before its median. Run records: "
             "`runs/<model>/rep<k>/<segment>/run.json`.", ""]
    rows = []
    for model, reps in data.items():
        section, model_rows = model_section(model, reps)
        lines += section + [""]
        rows += model_rows
    chunk = int(args.get("chunk") or 0)
    interleave = "one H-window" if chunk in (0, int(args.get("H") or 0)) else \
        ("one iteration" if chunk == 1 else f"{chunk} iterations")
    lines += [_READING.replace("{interleave}", interleave)]
    write_text(os.path.join(out, "README.md"), "\n".join(lines) + "\n")
    if rows:
        write_csv(os.path.join(out, "bench.csv"), [{k: (v[0] if isinstance(v, tuple) else v) for k, v in r.items()}
                                                   for r in rows])
    return rows


_READING = """## How to read it

- *x DreamDDP (measured)*: the algorithm's mean iteration time over DreamDDP's in the same job;
  *(paper, modelled)*: the same ratio under the authors' cost model on their A6000 profile with the
  paper's 32-GPU multipliers (dreamddp/schedule/compare.py PAPER_32GPU), which charges ASC-WFBP a
  fixed 60% of its communication and ignores the forward pass; *(authors' model, this profile)*:
  their model on this job's own per-unit profile and link, so the gap to the measured ratio is
  what leaving the forward pass (and the step) out of the model overstates.
- *bound*: the least iteration time any plan of the algorithm's kind could take on this job's
  profile and link (dreamddp/bench/predict.py): for DreamDDP the least exposed wait any plan its
  scheduler searches leaves: one contiguous run of units per iteration for the paper's scheduler
  (the exact optimum over such splits), any assignment of units to iterations for
  `algo.scheduler=general` (the units ready last and needed first cannot be hidden; with
  overlap_forward, until their next forward; with the delayed merge, only a link busier than the
  whole iteration would show); for the others their own plan with every rank computing alike.
  *plan, no skew*: the same for the plan the run actually ran (its schedule).
- *predicted*: the simulator (dreamddp/schedule/simulator.py) on the job's own measurements: the
  DreamDDP segment's per-unit profile, the steady compute of the two compute-only segments
  (nosync@ideal and plain@ideal, pooled: one run's compute drifts with the host) and every rank's
  compute per iteration in them (whole measured iterations, every rank's together where the records keep
  the series: a sync point waits for the slowest rank), the link as recorded, the run's plan,
  and the real transfer its deferred carrier runs at the first wait (gloo's all-reduces probed at
  the run's start-up, `extra.link.real_transfer_ms`; what of it runs on past the wait, or, with
  the step carrier, past an iteration's end, takes the worker's core from the compute after it).
- Runs are interleaved {interleave} at a time inside each job, so every algorithm samples the
  same slow and fast spells of the host; the link's clock of the runs not training is paused.
- *waited beyond the link model*: in the sampled iterations, how long after its modelled deadline
  the iteration's last collective completed (the slowest worker and gloo's own transfer).
- *time to loss*: training seconds (sum of iteration times) until the training loss, averaged
  over the last 10 iterations, first reaches the target: the highest final such loss among the
  timed runs, so every run reaches it (dreamddp/results/target.py).
- dreamddp+overlap runs DreamDDP with the averages finishing behind the next forward
  (`algo.overlap_forward=true`; its record's `extra.schedule.source` says "for overlap_forward"
  where the schedule was planned for that; records made before the scheduler was ran
  DreamDDP's schedule, planned for the end of backward, as the opt-in
  dreamddp+overlap+same-schedule does);
  dreamddp+general profiles and schedules with `algo.scheduler=general`; dreamddp+delay with
  `algo.merge_delay=1`.
"""
