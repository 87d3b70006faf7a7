"""``dreamddp-bench report DIR [--mix]``: a benchmark's reports again from its run records.

``DIR`` is a folder ``dreamddp-bench run`` wrote: ``DIR/runs/`` (README.md, bench.csv and the
card's loss_vs_time.png: kind "bench"), or, for ``--link tc``, ``DIR/tc/runs/`` and
``DIR/emulated/runs/`` (each link's report, then the side-by-side README: kind "tc"), or a study's
folder of such folders (``make bench-latency``'s ``DIR/<ms>ms``: each one's report, then
DIR/README.md: kind "sweep").  Records of different code are refused unless ``--mix``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dreamddp.reports import write_report
from dreamddp.reports.sweep import folders


def kind_of(out: Path) -> str | None:
    if (out / "tc" / "runs" / "bench.json").is_file():
        return "tc"
    if (out / "runs" / "bench.json").is_file():
        return "bench"
    return "sweep" if out.is_dir() and folders(out) else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dreamddp-bench report", description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", help="the folder dreamddp-bench run wrote")
    parser.add_argument("--mix", action="store_true", help="report records made by different code (the header lists them)")
    args = parser.parse_args(argv)
    out = Path(args.out_dir)
    kind = kind_of(out)
    if kind is None:
        parser.error(f"{out}: no runs/bench.json (not a folder dreamddp-bench run wrote)")
    print(write_report(kind, str(out), [str(out)], mix=args.mix)[0])
    return 0
