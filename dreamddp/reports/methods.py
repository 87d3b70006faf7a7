"""``dreamddp-bench card TIME QUALITY --out DIR``: the methods the field moved to, one card per link rate.

TIME is a ``dreamddp-bench run`` folder at one comm/backward ratio (``make bench-methods``'
``results/bench/methods/time/ratio<r>``: the compute presets); QUALITY is the same methods
trained for longer on the small presets, one seed per repetition
(``results/bench/methods/quality``).  Per model, one row per method: its iteration time and the
bytes it puts on the wire per iteration at that ratio, each over DreamDDP's inside one
repetition; its final training and evaluation loss at equal iterations, and their difference
from DreamDDP's in the same seed; the training seconds to the quality runs' loss target (those
ran at their own ratio, which the card names); and the claim of the method's source paper,
to read the measured columns against (passed in: a study file holds them, ``--claims``).  Medians over repetitions, min-max in brackets.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from dreamddp.atomic import write_csv
from dreamddp.reports import bench as report
from dreamddp.reports import records
from dreamddp.reports.render import table as render_table
from dreamddp.reports.render import write_readme
from dreamddp.bench.segments import TIMED
from dreamddp.reports.spread import fmt_spread, median_spread
from dreamddp.reports.target import SMOOTH

REFERENCE = report.REFERENCE  # DreamDDP


def _records(reps: dict, label: str) -> list[records.Record]:
    return [s[label] for s in reps.values() if label in s]


def wire_per_iteration(rec: records.Record) -> float:
    """Wire bytes per worker per timed iteration (records.py: the one definition)."""
    return rec.wire_per_iteration()


def final_train(rec: records.Record) -> float:
    return rec.final_loss()


def final_eval(rec: records.Record) -> float | None:
    return rec.final_eval()


def _difference(reps: dict, label: str, of):
    """``of(label) - of(REFERENCE)`` inside each repetition (one seed), then the median and spread."""
    pairs = [(of(s[label]), of(s[REFERENCE])) for s in reps.values() if label in s and REFERENCE in s]
    return median_spread([a - b for a, b in pairs if a is not None and b is not None])


def rows(time_runs: str, quality_runs: str, claims: dict[str, str] | None = None) -> list[dict]:
    times, quality = report.load(time_runs), report.load(quality_runs)
    out = []
    for model in times:
        treps, qreps = times[model], quality.get(model, {})
        target, ttt = report.times_to_target(qreps) if qreps else (None, {})
        labels = [lb for reps in (treps, qreps) for s in reps.values() for lb in s if lb in TIMED]
        for label in records.ordered(labels):
            tmine, qmine = _records(treps, label), _records(qreps, label)
            out.append({
                "model": model, "method": label, "time_reps": len(tmine), "quality_reps": len(qmine),
                "iteration_s": median_spread(r.mean_iteration for r in tmine),
                "x_dreamddp": report.ratio_over(treps, label, REFERENCE),
                "wire_mib": median_spread(r.wire_per_iteration() / 2**20 for r in tmine),
                "wire_x_dreamddp": report.ratio_over(treps, label, REFERENCE, of=wire_per_iteration),
                "train_loss": median_spread(r.final_loss() for r in qmine),
                "train_minus_dreamddp": _difference(qreps, label, final_train),
                "eval_loss": median_spread(r.final_eval() for r in qmine),
                "eval_minus_dreamddp": _difference(qreps, label, final_eval),
                "loss_target": target, "time_to_target_s": median_spread(ttt.get(label, [])),
                "claim": (claims or {}).get(label, ""),
            })
    return out


def write(time_dir: str, quality_dir: str, out: str, *, claims: dict[str, str] | None = None, title: str | None = None,
          made_by: str | None = None, mix: bool = False) -> list[str]:
    time_runs, quality_runs = str(Path(time_dir) / "runs"), str(Path(quality_dir) / "runs")
    for d in (time_runs, quality_runs):
        if not (Path(d) / "bench.json").is_file():
            raise SystemExit(f"card: {d}: no bench.json (not a folder dreamddp-bench run wrote)")
    tbench, qbench = records.bench(time_runs), records.bench(quality_runs)
    mixed = records.check_provenance(tbench.records() + (qbench.records() if quality_runs != time_runs else []),
                                     mix, f"card {out}")
    table = rows(time_runs, quality_runs, claims)
    same = Path(time_dir).resolve() == Path(quality_dir).resolve()
    models = []
    for model in dict.fromkeys(r["model"] for r in table):
        mine = [r for r in table if r["model"] == model]
        target = mine[0]["loss_target"]
        card = render_table(["method", "iteration s", "x DreamDDP", "wire MiB/it", "train loss", "eval loss",
                             f"time to loss {target:.3f} (s)" if target is not None else "time to target (s)",
                             "the paper's claim"],
                            [[r["method"], fmt_spread(r["iteration_s"]), fmt_spread(r["x_dreamddp"], 2),
                              fmt_spread(r["wire_mib"], 3), fmt_spread(r["train_loss"], 3), fmt_spread(r["eval_loss"], 3),
                              fmt_spread(r["time_to_target_s"], 1), r["claim"]] for r in mine])
        against = render_table(["method", "wire x DreamDDP", "train - DreamDDP", "eval - DreamDDP"],
                               [[r["method"], fmt_spread(r["wire_x_dreamddp"], 3), fmt_spread(r["train_minus_dreamddp"], 3),
                                 fmt_spread(r["eval_minus_dreamddp"], 3)] for r in mine])
        models.append({"name": model, "card": card, "against": against})
    ratio = float(tbench.args.get("ratio"))
    readme = write_readme(out, "methods_card.md.j2", title=title or f"The methods the field moved to, at comm/backward {ratio:g}",
                          mixed=mixed, made_by=made_by or f"dreamddp-bench card {time_dir} {quality_dir} --out {out}",
                          time_dir=time_dir, quality_dir=quality_dir, same=same, ratio=ratio,
                          qratio=float(qbench.args.get("ratio")), iterations=qbench.args.get("iterations"),
                          rel_time=os.path.relpath(time_dir, out), rel_quality=os.path.relpath(quality_dir, out),
                          smooth=SMOOTH, models=models)
    write_csv(Path(out) / "card.csv", [{k: (v[0] if isinstance(v, tuple) else v) for k, v in r.items()} for r in table])
    return [readme, str(Path(out) / "card.csv")]


def load_claims(path: str | None) -> dict[str, str]:
    """{method: its source paper's claim} from a YAML/JSON file: the mapping itself, or a study
    file's ``claims`` key."""
    if not path:
        return {}
    import yaml

    data = yaml.safe_load(Path(path).read_text()) or {}
    data = data.get("claims", data) if isinstance(data, dict) else data
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise SystemExit(f"card: --claims {path}: expected a mapping of method -> claim (or a claims: key)")
    return {str(k): v for k, v in data.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="dreamddp-bench card", description=__doc__.split("\n\n")[0])
    p.add_argument("time_dir", help="a dreamddp-bench run folder at one ratio (iteration time, bytes)")
    p.add_argument("quality_dir", help="a dreamddp-bench run folder of the same methods trained longer (loss)")
    p.add_argument("--out", required=True, help="the card's folder: README.md and card.csv")
    p.add_argument("--claims", help="YAML/JSON: method -> its source paper's claim (a study file's claims: key)")
    p.add_argument("--mix", action="store_true", help="report records made by different code (the header lists them)")
    args = p.parse_args(argv)
    print(write(args.time_dir, args.quality_dir, args.out, claims=load_claims(args.claims), mix=args.mix)[0])
    return 0
