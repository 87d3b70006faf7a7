"""``dreamddp-bench card TIME QUALITY --out DIR``: the methods the field moved to, one card per link rate.

TIME is a ``dreamddp-bench run`` folder at one comm/backward ratio (iteration time, wire bytes);
QUALITY the same methods trained longer, one seed per repetition (losses, time to target).  Each
is taken against DreamDDP's inside one repetition, beside the method's paper's claim (``--claims``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from dreamddp.atomic import write_csv
from dreamddp.reports import bench as report
from dreamddp.reports import records, versions
from dreamddp.reports.render import spread_table, write_readme
from dreamddp.reports.labels import TIMED
from dreamddp.reports.spread import median_spread, medians
from dreamddp.reports.target import SMOOTH

REFERENCE = report.REFERENCE  # DreamDDP


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
            tmine = [s[label] for s in treps.values() if label in s]
            qmine = [s[label] for s in qreps.values() if label in s]
            out.append({
                "model": model, "method": label, "time_reps": len(tmine), "quality_reps": len(qmine),
                "iteration_s": median_spread(r.mean_iteration for r in tmine),
                "x_dreamddp": report.ratio_over(treps, label, REFERENCE),
                "wire_mib": median_spread(r.wire_per_iteration() / 2**20 for r in tmine),
                "wire_x_dreamddp": report.ratio_over(treps, label, REFERENCE, of=records.Record.wire_per_iteration),
                "train_loss": median_spread(r.final_loss() for r in qmine),
                "train_minus_dreamddp": _difference(qreps, label, records.Record.final_loss),
                "eval_loss": median_spread(r.final_eval() for r in qmine),
                "eval_minus_dreamddp": _difference(qreps, label, records.Record.final_eval),
                "loss_target": target, "time_to_target_s": median_spread(ttt.get(label, [])),
                "claim": (claims or {}).get(label, ""),
            })
    return out


def write(time_dir: str, quality_dir: str, out: str, *, claims: dict[str, str] | None = None, title: str | None = None,
          made_by: str | None = None, mix: bool = False) -> list[str]:
    time_runs, quality_runs = str(Path(time_dir) / "runs"), str(Path(quality_dir) / "runs")
    tbench, qbench = records.bench_of(time_runs, "card"), records.bench_of(quality_runs, "card")
    mixed, code = versions.check_provenance(tbench.records() + (qbench.records() if quality_runs != time_runs else []),
                                     mix, f"card {out}")
    table = rows(time_runs, quality_runs, claims)
    models = []
    for model in dict.fromkeys(r["model"] for r in table):
        mine = [r for r in table if r["model"] == model]
        target = mine[0]["loss_target"]
        ttt = f"time to loss {target:.3f} (s)" if target is not None else "time to target (s)"
        card = spread_table(mine, [("method", "method", None), ("iteration s", "iteration_s", 3),
                                   ("x DreamDDP", "x_dreamddp", 2), ("wire MiB/it", "wire_mib", 3),
                                   ("train loss", "train_loss", 3), ("eval loss", "eval_loss", 3),
                                   (ttt, "time_to_target_s", 1), ("the paper's claim", "claim", None)])
        against = spread_table(mine, [("method", "method", None), ("wire x DreamDDP", "wire_x_dreamddp", 3),
                                      ("train - DreamDDP", "train_minus_dreamddp", 3),
                                      ("eval - DreamDDP", "eval_minus_dreamddp", 3)])
        models.append({"name": model, "card": card, "against": against})
    ratio = float(tbench.args.get("ratio"))
    readme = write_readme(out, "methods_card.md.j2", title=title,
                          mixed=mixed, code=code, made_by=made_by or f"dreamddp-bench card {time_dir} {quality_dir} --out {out}",
                          time_dir=time_dir, quality_dir=quality_dir, ratio=ratio,
                          same=Path(time_dir).resolve() == Path(quality_dir).resolve(),
                          qratio=float(qbench.args.get("ratio")), iterations=qbench.args.get("iterations"),
                          rel_time=os.path.relpath(time_dir, out), rel_quality=os.path.relpath(quality_dir, out),
                          smooth=SMOOTH, models=models)
    write_csv(Path(out) / "card.csv", medians(table))
    return [readme, str(Path(out) / "card.csv")]


def load_claims(path: str | None) -> dict[str, str]:
    """{method: its source paper's claim} from a YAML/JSON file: the mapping, or a study file's ``claims``."""
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
