"""``dreamddp-bench report DIR``: a benchmark's run records -> ``DIR/README.md`` and ``DIR/bench.csv``.

Every number here is computed from the run records under ``<runs>/<model>/rep<k>/<segment>/``;
medians are over repetitions, spreads are min-max, and a ratio is taken within
one repetition (one job, one link rate) before its median is.  Bounds and
predictions come from the same job's records (dreamddp/reports/predict.py).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import replace
from pathlib import Path

from dreamddp.reports import predict as bp
from dreamddp.bench.overhead import engine_overhead, fmt_ms, phase_overhead
from dreamddp.bench.regime import batch, compute_split, emulation
from dreamddp.bench.segments import IDEAL, OPT_IN, TIMED, VARIES

from dreamddp.atomic import write_csv
from dreamddp.engine.layout import UnitLayout
from dreamddp.prediction import record_carrier, record_link
from dreamddp.reports.render import write_readme
from dreamddp.reports.spread import median_spread
from dreamddp.reports import records
from dreamddp.reports.target import time_to_target, train_loss_points
from dreamddp.schedule.authors_model import modelled_times
from dreamddp.schedule.compare import paper_32gpu_profile
from dreamddp.schedule.delay import late_op
from dreamddp.schedule.schedule_file import late_part, late_run

REFERENCE = bp.REFERENCE
AUTHORS_KEYS = records.authors_keys()


def load(runs: str) -> dict:
    """{model: {rep: {segment: records.Record}}} of every completed segment."""
    return records.bench(runs).runs


REFERENCES = ("dreamddp", "flsgd")  # the algorithms the side-by-side reports divide by


def mean_iteration(rec: records.Record) -> float:
    return rec.mean_iteration


def ratio_over(reps: dict, label: str, ref: str, of=mean_iteration):
    """``label``'s ``of`` (default its mean iteration) over ``ref``'s, taken inside each
    repetition, then its median with the min-max spread (None where no repetition has both)."""
    return median_spread([of(s[label]) / of(s[ref]) for s in reps.values() if label in s and ref in s])


def job_seconds(segs: dict) -> float:
    """One job's duration: its first segment's start to its last segment's end (records only, so
    a job kept by ``bench.py --resume`` counts as long as it took)."""
    return max(r.end_time for r in segs.values()) - min(r.start_time for r in segs.values())


def _over_dreamddp(times: dict) -> dict:
    """Baseline / DreamDDP from the authors' modelled times (their names: AUTHORS_KEYS)."""
    ours = records.authors_key(REFERENCE)
    return {label: times[theirs] / times[ours] for label, theirs in AUTHORS_KEYS.items()}


def paper_ratios(model: str) -> dict:
    """Baseline / DreamDDP under the authors' model on their profile (H=10)."""
    try:
        profile = paper_32gpu_profile(model)
    except (KeyError, FileNotFoundError):
        return {}
    return _over_dreamddp(modelled_times(profile, 10)["algorithm_times"])


def authors_on_ours(segs: dict) -> dict:
    """Baseline / DreamDDP under the authors' model (forward left out, ASC-WFBP a fixed 0.6 of
    its communication) on THIS job's profile: each unit's steady backward and its all-reduce
    as the recorded link takes it.  Next to the measured ratios it shows what leaving the
    forward pass out of the model does to the gain."""
    profile = bp.steady_profile(records.raw(segs))
    rec = segs.get(REFERENCE)
    if profile is None or rec is None:
        return {}
    link = record_link(rec.raw)
    comm = {u: link.seconds("all_reduce", profile.nbytes[u], rec.world) for u in profile.units}
    return _over_dreamddp(modelled_times(replace(profile, comm=comm), rec.H)["algorithm_times"])


def lateness(rec: records.Record) -> float | None:
    """The median over sampled iterations of how long a worker was blocked in a wait after the
    collective's link deadline (the most of any collective of the iteration): what it waited
    beyond the link model, for the slowest rank to reach the collective and the backend's own
    transfer.  A collective waited long after its deadline (merged late) blocked for nothing."""
    late = []
    for r in rec.timed():
        events = [(complete, deadline, blocked) for complete, deadline, blocked in r.collectives if complete is not None]
        if events:
            late.append(max(max(0.0, min(c - d, b)) for c, d, b in events))
    return statistics.median(late) if late else None


def per_rep(reps: dict) -> dict:
    """Per repetition and segment: measured, predicted, bounds (seconds), ratios."""
    out: dict = {}
    for r, job in reps.items():
        segs = records.raw(job)  # the analysis (predict.py) reads the raw records
        profile = bp.steady_profile(segs)
        skew = bp.reference_skew(segs, profile) if profile else None
        for label in records.ordered(lb for lb in job if lb in TIMED):
            typed, rec = job[label], segs[label]
            row = {"rep": r, "measured": typed.mean_iteration, "late": lateness(typed),
                   "probed": record_carrier(rec) is not None, "carrier": typed.carrier}
            if REFERENCE in job:
                row["x_dreamddp"] = typed.mean_iteration / job[REFERENCE].mean_iteration
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


def in_flight_bytes(rec: records.Record | None) -> int | None:
    """The most parameter bytes a delayed-merge plan has in flight at once: the late collectives
    launched in the last ``merge_delay`` iterations (each holds a copy of its units)."""
    if not rec or not rec.delayed:
        return None
    d = int(rec.options.get("merge_delay") or 0)
    layout = UnitLayout(tuple(name for name, _ in rec.units), tuple(4 * n for _, n in rec.units), frozenset(), rec.world)
    per = [sum(layout.op_bytes(late_op(*late_run(e), d, late_part(e))) for e in its) for its in rec.delayed]
    return max(sum(per[(h - k) % len(per)] for k in range(d)) for h in range(len(per)))


def times_to_target(reps: dict) -> tuple[float | None, dict]:
    """(target, {label: [seconds per repetition or None]}) on the smoothed training loss
    (target.py): the target is the highest final value among the timed runs, so
    every one of them reaches it."""
    curves = {(r, label): train_loss_points(segs[label].iterations)
              for r, segs in reps.items() for label in records.ordered(segs) if label in TIMED}
    if not curves:  # a job of the ideal-link segments alone (--only nosync@ideal plain@ideal)
        return None, {}
    target = max(points[-1][1] for points in curves.values())
    out: dict = {}
    for (r, label), points in curves.items():
        out.setdefault(label, []).append(time_to_target(points, target))
    return target, out


def model_section(model: str, reps: dict) -> tuple[dict, list[dict]]:
    """The template's context and the csv rows for one model."""
    stats = per_rep(reps)
    paper = paper_ratios(model)
    ours_authors = {label: median_spread([authors_on_ours(segs).get(label) for segs in reps.values()]) for label in AUTHORS_KEYS}
    target, ttt = times_to_target(reps)
    ttt_ratio = {label: [a / b for a, b in zip(ttt[label], ttt.get(REFERENCE, [])) if a and b] for label in ttt}
    some = next(iter(reps.values()))
    # the header's run: a timed one (the calibration run is shorter and has no algorithm of its own)
    head = some.get(REFERENCE) or some.get(bp.NOSYNC) or next(r for label, r in some.items() if label != "calibration")
    comm_backward = [s["ssgd"].mean_wait / s["ssgd"].mean_backward for s in reps.values() if "ssgd" in s]
    ctx = {"model": model, "record": head, "batch": batch(head.raw), "reps": len(reps), "calib": head.calibration(),
           "comm_backward": median_spread(comm_backward), "emulation": emulation(head.raw, records.raw(some)),
           "compute_split": compute_split(records.raw(some)), "target": target, "rows": [], "varied": {}, "memory": {}}
    rows = []
    for label in records.ordered(stats):
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
    ctx["rows"] = rows
    ran = {label for s in reps.values() for label in s}
    bases = {label: VARIES[label] for label in TIMED if label in OPT_IN and label in ran and VARIES[label] != label}
    ctx["varied"] = {f"{label} / {base}": v for label, base in bases.items()
                     if (v := ratio_over(reps, label, base))}
    ctx["ideal_times"] = {label: median_spread([s[label].mean_iteration for s in reps.values() if label in s])
                          for label in IDEAL if label in ran or label not in OPT_IN}
    ctx["overhead"] = engine_overhead(records.raw_reps(reps))
    ctx["phases"] = {k: fmt_ms(v) for k, v in phase_overhead(records.raw_reps(reps)).items()}
    measured = [r for s in reps.values() for label, r in s.items() if label.endswith("@memory")]
    memory = {r.label[: -len("@memory")]: r.peak_bytes for r in measured}
    if memory:
        # as each record says it measured (CPU records before 2026-11-29 counted the profiler's own
        # events, which miss a free made on gloo's thread: dreamddp/bench/memory.py)
        notes = sorted({r.memory_note for r in measured} - {""})
        ratio = lambda peak, ref: peak / memory[ref] if memory.get(ref) else None  # noqa: E731
        ctx["memory"] = {"how": "; ".join(notes) or "not recorded",
                         "rows": [(label, peak / 2**20, ratio(peak, "plain@ideal"), ratio(peak, "nosync@ideal"))
                                  for label, peak in memory.items()]}
        late = in_flight_bytes(some.get("dreamddp+delay@memory") or some.get("dreamddp+delay"))
        if late and memory.get("dreamddp+delay") and memory.get("plain@ideal"):
            ctx["memory"]["delay"] = ((memory["dreamddp+delay"] - memory["plain@ideal"]) / 2**20, late / 2**20)
    return ctx, rows


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


def write(runs: str, out: str, data: dict | None = None, *, title: str | None = None, made_by_line: str | None = None,
          mix: bool = False, figure: bool = True) -> list[dict]:
    """``out``/README.md (the result card first, then each model's details), bench.csv and the
    card's loss_vs_time.png from the records under ``runs`` (``data``: ``load(runs)`` where the
    caller has it); returns the table's rows (medians with their spread)."""
    from dreamddp.reports import card

    if not (Path(runs) / "bench.json").is_file():
        raise SystemExit(f"report: {runs}: no bench.json (not a folder dreamddp-bench run wrote)")
    found = records.bench(runs)
    mixed = records.check_provenance(found.records(), mix, f"report {out}")
    args = found.args
    data = found.runs if data is None else data
    seconds = sum(job_seconds(segs) for reps in data.values() for segs in reps.values())
    sections, rows = [], []
    for model, reps in data.items():
        section, model_rows = model_section(model, reps)
        sections.append(section)
        rows += model_rows
    chunk = int(args.get("chunk") or 0)
    interleave = "one H-window" if chunk in (0, int(args.get("H") or 0)) else \
        ("one iteration" if chunk == 1 else f"{chunk} iterations")
    shown = [r for r in found.records() if r.label in TIMED]
    write_readme(out, "bench.md.j2", title=title or f"Benchmark: algorithms side by side (`--preset {args.get('preset', 'compute')}`)",
                 mixed=mixed, made_by=made_by_line or made_by(args), minutes=seconds / 60, interleave=interleave,
                 cards=card.card_tables(shown) if shown else [], sections=sections)
    if rows:
        write_csv(os.path.join(out, "bench.csv"), [{k: (v[0] if isinstance(v, tuple) else v) for k, v in r.items()}
                                                   for r in rows])
    if figure and shown:
        card.write_figure(shown, Path(out) / "loss_vs_time.png")
    return rows
