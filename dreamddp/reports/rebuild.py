"""``dreamddp-bench report DIR [--mix]``: a benchmark's reports again from its run records.
DIR: a ``dreamddp-bench run`` folder (kind bench), its ``--link tc`` one (tc) or a study's folder of them (sweep)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dreamddp.reports import write_report
from dreamddp.reports.sweep import folders


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dreamddp-bench report", description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", help="the folder dreamddp-bench run wrote")
    parser.add_argument("--mix", action="store_true",
                        help="report records made by different code (the header lists them)")
    args = parser.parse_args(argv)
    out = Path(args.out_dir)
    if (out / "tc" / "runs" / "bench.json").is_file():
        kind = "tc"
    elif (out / "runs" / "bench.json").is_file():
        kind = "bench"
    elif out.is_dir() and folders(out):
        kind = "sweep"
    else:
        parser.error(f"{out}: no runs/bench.json (not a folder dreamddp-bench run wrote)")
    print(write_report(kind, str(out), [str(out)], mix=args.mix)[0])
    return 0
