"""``dreamddp-bench report DIR``: a benchmark's reports again from its run records.

``DIR`` is a folder ``dreamddp-bench run`` wrote: ``DIR/runs/`` (README.md and bench.csv
from report.py), or, for ``--link tc``, ``DIR/tc/runs/`` and ``DIR/emulated/runs/`` (each
link's report, then the side-by-side README from tc_report.py), or a study's folder of such
folders (``make bench-latency``'s ``DIR/<ms>ms``: each one's report, then DIR/README.md from
sweep_report.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dreamddp.reports import bench as report, sweep as sweep_report, tc as tc_report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dreamddp-bench report", description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", help="the folder dreamddp-bench run wrote")
    out = Path(parser.parse_args(argv).out_dir)
    if (out / "tc" / "runs" / "bench.json").is_file():
        trees = [str(out / link / "runs") for link in ("tc", "emulated")]
        for tree in trees:
            report.write(tree, str(Path(tree).parent))
        print(tc_report.write(str(out), trees))
        return 0
    if not (out / "runs" / "bench.json").is_file() and out.is_dir() and sweep_report.folders(out):
        print(sweep_report.write(str(out)))
        return 0
    if not (out / "runs" / "bench.json").is_file():
        parser.error(f"{out}: no runs/bench.json (not a folder dreamddp-bench run wrote)")
    report.write(str(out / "runs"), str(out))
    print(out / "README.md")
    return 0
