"""``dreamddp-results``: run records -> the result card, compact copies, tables, figures, W&B table, provenance.

    dreamddp-results card RUNS... [--figure loss.png] [--csv card.csv]
    dreamddp-results collect|tables|figures|wandb --runs RUNS... [--out results] [--target gpt2/tiny=6.5]
    dreamddp-results scheduler-reference | index --results results | provenance results

``--runs`` takes directories (searched for run.json and compact records), run.json files or W&B
offline run dirs; ``figures`` writes the tables too.  Errors print ``error: <one line>``, status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dreamddp.reports.card import print_card
from dreamddp.reports.collect import collect, write_compact
from dreamddp.reports.figures import make_figures
from dreamddp.reports.index import write_index
from dreamddp.reports.versions import mixed_folders
from dreamddp.reports.scheduler import make_scheduler_figures, reference_study
from dreamddp.reports.tables import HIGHER_IS_BETTER, write_tables
from dreamddp.reports.wandb_table import log_tables


def _targets(items: list[str]) -> dict:
    """``6.5`` (every model) or ``gpt2/tiny=6.5`` -> {"*": 6.5} / {"gpt2/tiny": 6.5}."""
    out = {}
    for item in items:
        model, _, value = item.rpartition("=")
        try:
            out[model or "*"] = float(value)
        except ValueError:
            raise ValueError(f"--target {item}: expected VALUE or MODEL=VALUE, e.g. gpt2/tiny=6.5") from None
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dreamddp-results", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("card", help="the result card of any run records, a sweep or a benchmark folder")
    c.add_argument("runs", nargs="+", help="run dirs, run.json files, compact records, sweep or benchmark folders")
    c.add_argument("--figure", default=None, help="loss vs training seconds (default: loss_vs_time.png in the first RUNS dir)")
    c.add_argument("--no-figure", action="store_true")
    c.add_argument("--csv", default=None, help="also write the card's rows here")
    c.add_argument("--mix", action="store_true", help="allow records of different code (the card lists them)")
    v = sub.add_parser("provenance", help="each benchmark folder under a results tree whose records mix code versions")
    v.add_argument("results", nargs="?", default="results")
    r = sub.add_parser("scheduler-reference", help="scheduler vs exact optimum on an authors' profile (paper Figs. 15, 16)")
    r.add_argument("--profile", default=None, help="profile dir (default: the authors' A6000 ResNet-18)")
    r.add_argument("--H", type=int, default=5)
    r.add_argument("--out", default="results/scheduler")
    i = sub.add_parser("index", help="results/README.md: every folder and report under a results tree")
    i.add_argument("--results", default="results")
    for name, help_ in (("collect", "write compact copies of the run records"),
                        ("tables", "speedup tables (CSV + Markdown)"),
                        ("figures", "tables, figures and the measured-profile scheduler study"),
                        ("wandb", "log the speedup tables as W&B Tables")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("--runs", nargs="+", required=True, help="run dirs, run.json files, compact records")
        s.add_argument("--metric", default="loss", choices=sorted(HIGHER_IS_BETTER), help="time-to-target metric")
        s.add_argument("--target", action="append", default=[], metavar="[MODEL=]VALUE",
                       help="target value (default: the worst final value among the compared runs)")
        s.add_argument("--include-failed", action="store_true", help="also use runs not completed")
        if name == "wandb":
            s.add_argument("--dir", default="multirun/wandb-summary", help="where W&B writes its files")
            s.add_argument("--mode", default="offline", choices=("offline", "online"))
            s.add_argument("--project", default="dreamddp")
        else:
            s.add_argument("--out", default="results", help="output directory")
    return p


def run(args: argparse.Namespace) -> list[Path]:
    if args.command == "card":
        first = Path(args.runs[0])
        figure = None if args.no_figure else args.figure or (first if first.is_dir() else first.parent) / "loss_vs_time.png"
        print_card(args.runs, figure, args.csv, mix=args.mix)
        return []
    if args.command == "provenance":
        for folder, found in mixed_folders(Path(args.results)).items():
            print(f"{folder}: " + "; ".join(f"{p.name()} ({len(runs)} runs)" for p, runs in found.items()))
        return []
    if args.command == "index":
        if not Path(args.results).is_dir():
            raise FileNotFoundError(f"--results {args.results}: no such folder")
        return [write_index(Path(args.results))]
    if args.command == "scheduler-reference":
        return reference_study(Path(args.out), Path(args.profile) if args.profile else None, args.H)
    statuses = ("completed", "failed", "running", "preempted") if args.include_failed else ("completed",)
    skipped: list[tuple[Path, str]] = []
    runs = collect(args.runs, statuses, skipped)
    for path, why in skipped:
        print(f"skipped {path}: {why}", file=sys.stderr)
    if not runs:
        raise ValueError(f"no {'/'.join(statuses)} run records under {' '.join(args.runs)}")
    targets = _targets(args.target)
    print(f"{len(runs)} runs in {len({(r['study'], r['scale']) for r in runs})} studies")
    if args.command == "collect":
        return write_compact(runs, Path(args.out))
    if args.command == "wandb":
        return [Path(d) for d in log_tables(runs, Path(args.dir), args.mode, args.project, args.metric, targets)]
    written = write_tables(runs, Path(args.out), args.metric, targets)
    if args.command == "figures":
        written += make_figures(runs, Path(args.out)) + make_scheduler_figures(runs, Path(args.out))
    return written


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        written = run(args)
    except (ValueError, FileNotFoundError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0
