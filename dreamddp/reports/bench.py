"""``dreamddp-bench report DIR``: a benchmark's run records -> ``DIR/README.md`` and ``DIR/bench.csv``.

Medians are over repetitions with the min-max spread; a ratio is taken inside one repetition (one
job, one link rate) before its median.  Bounds and predictions: dreamddp/reports/predict.py.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import replace
from pathlib import Path

from dreamddp.algorithms import ALGORITHMS
from dreamddp.atomic import write_csv
from dreamddp.reports.overhead import engine_overhead, fmt_ms, phase_overhead
from dreamddp.reports.regime import batch, compute_split, emulation
from dreamddp.reports.labels import IDEAL, OPT_IN, TIMED, VARIES
from dreamddp.engine.layout import UnitLayout
from dreamddp.reports import card, records, versions
from dreamddp.reports import predict as bp
from dreamddp.reports.render import write_readme
from dreamddp.reports.spread import median_spread, medians
from dreamddp.reports.target import time_to_target, train_loss_points
from dreamddp.schedule.authors_model import modelled_times
from dreamddp.schedule.compare import paper_32gpu_profile
from dreamddp.schedule.delay import late_op
from dreamddp.schedule.schedule_file import late_part, late_run

REFERENCE = bp.REFERENCE
REFERENCES = ("dreamddp", "flsgd")  # the algorithms the side-by-side reports divide by
# {algorithm: the DreamDDP artifact's name for it} (modelled_times.json), DreamDDP's own left out
_AUTHORS = {name: ALGORITHMS.get(name).display.authors_key for name in records.ordered(ALGORITHMS)}
AUTHORS_KEYS = {name: key for name, key in _AUTHORS.items() if key and name != REFERENCE}


def load(runs: str) -> dict:
    """{model: {rep: {segment: records.Record}}} of every completed segment."""
    return records.bench(runs).runs


def ratio_over(reps: dict, label: str, ref: str, of=lambda rec: rec.mean_iteration):
    """``label``'s ``of`` over ``ref``'s inside each repetition, then its median and spread
    (None where no repetition has both)."""
    return median_spread([of(s[label]) / of(s[ref]) for s in reps.values() if label in s and ref in s])


def _over_dreamddp(times: dict) -> dict:
    """Baseline / DreamDDP from the authors' modelled times (their names: AUTHORS_KEYS)."""
    return {label: times[theirs] / times[_AUTHORS[REFERENCE]] for label, theirs in AUTHORS_KEYS.items()}


def paper_ratios(model: str) -> dict:
    """Baseline / DreamDDP under the authors' model on their profile (H=10)."""
    try:
        profile = paper_32gpu_profile(model)
    except (KeyError, FileNotFoundError):
        return {}
    return _over_dreamddp(modelled_times(profile, 10)["algorithm_times"])


def authors_on_ours(segs: dict) -> dict:
    """Baseline / DreamDDP under the authors' model on THIS job's profile and link: beside the
    measured ratios it shows what leaving the forward pass out of their model does to the gain."""
    profile = bp.steady_profile(segs)
    rec = segs.get(REFERENCE)
    if profile is None or rec is None:
        return {}
    link = rec.link_model()
    comm = {u: link.seconds("all_reduce", profile.nbytes[u], rec.world) for u in profile.units}
    return _over_dreamddp(modelled_times(replace(profile, comm=comm), rec.H)["algorithm_times"])


def lateness(rec: records.Record) -> float | None:
    """Median over sampled iterations of the longest a worker was blocked after a collective's link
    deadline: its wait beyond the link model (the slowest rank, the backend's own transfer)."""
    late = [max(events) for r in rec.timed()
            if (events := [max(0.0, min(c - d, b)) for c, d, b in r.collectives if c is not None])]
    return statistics.median(late) if late else None


def per_rep(reps: dict) -> dict:
    """Per repetition and segment: measured, predicted, bounds (seconds), ratios."""
    out: dict = {}
    for segs in reps.values():
        profile = bp.steady_profile(segs)
        skew = bp.reference_skew(segs, profile) if profile else None
        for label in records.ordered(lb for lb in segs if lb in TIMED):
            rec = segs[label]
            row = {"measured": rec.mean_iteration, "late": lateness(rec), "probed": rec.real_transfer() is not None}
            if REFERENCE in segs:
                row["x_dreamddp"] = rec.mean_iteration / segs[REFERENCE].mean_iteration
            if any(label in segs for label in bp.COMPUTE_ONLY):
                row.update(compute_over=bp.backward_over_reference(rec, segs, profile),
                           forward_over=bp.forward_over_reference(rec, segs),
                           compute_excess=bp.compute_excess(rec, segs, profile),
                           excess_of=" and ".join(bp.compute_phases(rec)),
                           host_charged=bp.host_charged(rec, profile, bp.compute_phases(rec)))
            if profile is not None:
                row.update(predicted=bp.predict(rec, profile, skew), plan_bound=bp.plan_bound(rec, profile),
                           plan_real=bp.plan_bound(rec, profile, real=True),
                           plan_host=bp.plan_bound(rec, profile, real=True, host=True),
                           bound=bp.structure_bound(rec, profile),
                           any_bound=bp.structure_bound(rec, profile, any_assignment=True),
                           compute=bp.compute_time(profile), forward_steps=bp.forward_steps(rec, profile))
            out.setdefault(label, []).append(row)
    return out


def in_flight_bytes(rec: records.Record | None) -> int | None:
    """The most parameter bytes a delayed-merge plan has in flight at once: the late collectives
    launched in the last ``merge_delay`` iterations (each holds a copy of its units)."""
    if not rec or not rec.delayed:
        return None
    d = int(rec.option("merge_delay") or 0)
    names = tuple(name for name, _ in rec.units)
    layout = UnitLayout(names, tuple(4 * n for _, n in rec.units), frozenset(), rec.world)
    per = [sum(layout.op_bytes(late_op(*late_run(e), d, late_part(e))) for e in its) for its in rec.delayed]
    return max(sum(per[(h - k) % len(per)] for k in range(d)) for h in range(len(per)))


def times_to_target(reps: dict) -> tuple[float | None, dict]:
    """(target, {label: [seconds per repetition or None]}) on the smoothed training loss; the target
    is the highest final value among the timed runs, so every one of them reaches it."""
    curves = {(r, label): train_loss_points(segs[label].iterations)
              for r, segs in reps.items() for label in records.ordered(segs) if label in TIMED}
    if not curves:  # a job of the ideal-link segments alone (--only nosync@ideal plain@ideal)
        return None, {}
    target = max(points[-1][1] for points in curves.values())
    out: dict = {}
    for (r, label), points in curves.items():
        out.setdefault(label, []).append(time_to_target(points, target))
    return target, out


def _memory(reps: dict, some: dict) -> dict:
    """Peak memory per @memory segment, over plain's and nosync's, and dreamddp+delay's extra."""
    measured = [r for s in reps.values() for label, r in s.items() if label.endswith("@memory")]
    memory = {r.label[: -len("@memory")]: r.peak_bytes for r in measured}
    if not memory:
        return {}
    # as each record says it measured (CPU records before 2026-11-29 missed frees on gloo's thread)
    notes = sorted({r.memory_note or "" for r in measured} - {""})
    ratio = lambda peak, ref: peak / memory[ref] if memory.get(ref) else None  # noqa: E731
    out = {"how": "; ".join(notes) or "not recorded",
           "rows": [(label, peak / 2**20, ratio(peak, "plain@ideal"), ratio(peak, "nosync@ideal"))
                    for label, peak in memory.items()]}
    late = in_flight_bytes(some.get("dreamddp+delay@memory") or some.get("dreamddp+delay"))
    if late and memory.get("dreamddp+delay") and memory.get("plain@ideal"):
        out["delay"] = ((memory["dreamddp+delay"] - memory["plain@ideal"]) / 2**20, late / 2**20)
    return out


def model_section(model: str, reps: dict) -> tuple[dict, list[dict]]:
    """The template's context and the csv rows for one model."""
    stats = per_rep(reps)
    paper = paper_ratios(model)
    ours = [authors_on_ours(segs) for segs in reps.values()]
    ours_authors = {label: median_spread([o.get(label) for o in ours]) for label in AUTHORS_KEYS}
    target, ttt = times_to_target(reps)
    ttt_ratio = {label: [a / b for a, b in zip(ttt[label], ttt.get(REFERENCE, [])) if a and b] for label in ttt}
    some = next(iter(reps.values()))
    # the header's run: a timed one (the calibration run is shorter and has no algorithm of its own)
    head = some.get(REFERENCE) or some.get(bp.NOSYNC) or next(r for label, r in some.items() if label != "calibration")
    comm_backward = [s["ssgd"].mean_wait / s["ssgd"].mean_backward for s in reps.values() if "ssgd" in s]
    rows = []
    for label in records.ordered(stats):
        st = stats[label]
        col = lambda key: median_spread([s.get(key) for s in st])  # noqa: E731
        ratio = lambda key: median_spread([s[key] / s["measured"] for s in st if s.get(key)])  # noqa: E731
        steps = [s["forward_steps"] for s in st if s.get("forward_steps")]
        rows.append({"model": model, "algorithm": label, "iteration_s": col("measured"),
                     "x_dreamddp": col("x_dreamddp"), "paper_x_dreamddp": paper.get(label),
                     "authors_model_x_dreamddp": ours_authors.get(label),
                     "bound_s": col("bound"), "bound_over_measured": ratio("bound"),
                     "any_bound_s": col("any_bound"), "any_bound_over_measured": ratio("any_bound"),
                     "plan_over_measured": ratio("plan_bound"), "plan_real_over_measured": ratio("plan_real"),
                     "plan_host_over_measured": ratio("plan_host"), "predicted_over_measured": ratio("predicted"),
                     "late_ms": median_spread([1e3 * s["late"] for s in st if s.get("late") is not None]),
                     "time_to_target_s": median_spread(ttt.get(label, [])),
                     "ttt_x_dreamddp": median_spread(ttt_ratio.get(label, [])),
                     "compute_s": col("compute"), "probed": all(s["probed"] for s in st),
                     "compute_over": col("compute_over"), "forward_over": col("forward_over"),
                     "compute_excess_s": col("compute_excess"), "host_charged_s": col("host_charged"),
                     "excess_of": st[0].get("excess_of"),
                     "forward_steps_ms": median_spread([1e3 * s[0] for s in steps]),
                     "forward_steps_charged_ms": median_spread([1e3 * s[1] for s in steps])})
    ran = {label for s in reps.values() for label in s}
    bases = {label: VARIES[label] for label in TIMED if label in OPT_IN and label in ran and VARIES[label] != label}
    ctx = {"model": model, "record": head, "batch": batch(head), "reps": len(reps), "calib": head.calibration(),
           "comm_backward": median_spread(comm_backward), "emulation": emulation(head, some),
           "compute_split": compute_split(some), "target": target, "rows": rows,
           "varied": {f"{label} / {base}": v for label, base in bases.items() if (v := ratio_over(reps, label, base))},
           "ideal_times": {label: median_spread([s[label].mean_iteration for s in reps.values() if label in s])
                           for label in IDEAL if label in ran or label not in OPT_IN},
           "overhead": engine_overhead(reps),
           "phases": {k: fmt_ms(v) for k, v in phase_overhead(reps).items()},
           "memory": _memory(reps, some)}
    return ctx, rows


def made_by(found, args: dict | None = None) -> str:
    """The command that made ``found``'s records: bench.json's, or, for records made before study
    files, the runner of their commit with its options as given (its defaults left out): that
    commit's runner was not always ``dreamddp-bench``."""
    if found.made_by:
        return found.made_by
    args = found.args if args is None else args
    commit = next((r.provenance.git_sha for r in found.records() if r.provenance.git_sha), None) or "unknown"
    flags = []
    for k, v in args.items():
        if k not in ("out", "quick", "target") and v is not None and v is not False and v != []:
            value = "" if v is True else " " + (" ".join(map(str, v)) if isinstance(v, list) else str(v))
            flags.append("--" + k.replace("_", "-") + value)
    return f"the benchmark runner at commit {commit[:10]}: " + " ".join(flags)


def write(runs: str, out: str, data: dict | None = None, *, title: str | None = None, made_by_line: str | None = None,
          mix: bool = False, figure: bool = True) -> list[dict]:
    """``out``/README.md (the result card first, then each model's details), bench.csv and the
    card's loss_vs_time.png from the records under ``runs`` (``data``: ``load(runs)`` where the
    caller has it); returns the table's rows (medians with their spread)."""
    found = records.bench_of(runs, "report")
    mixed, code = versions.check_provenance(found.records(), mix, f"report {out}")
    args = found.args
    data = found.runs if data is None else data
    # each job from its first segment's start to its last one's end (a job kept by --resume counts as it took)
    seconds = sum(max(r.end_time for r in segs.values()) - min(r.start_time for r in segs.values())
                  for reps in data.values() for segs in reps.values())
    sections = [model_section(model, reps) for model, reps in data.items()]
    rows = [row for _, model_rows in sections for row in model_rows]
    shown = [r for r in found.records() if r.label in TIMED]
    write_readme(out, "bench.md.j2", title=title, preset=args.get("preset", "compute"), mixed=mixed, code=code,
                 made_by=made_by_line or made_by(found, args), minutes=seconds / 60,
                 chunk=int(args.get("chunk") or 0), H=int(args.get("H") or 0),
                 cards=card.card_tables(shown) if shown else [], sections=[ctx for ctx, _ in sections])
    if rows:
        write_csv(os.path.join(out, "bench.csv"), medians(rows))
    if figure and shown:
        card.write_figure(shown, Path(out) / "loss_vs_time.png")
    return rows
