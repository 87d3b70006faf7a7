"""``dreamddp-bench``: one command for the benchmark's jobs.

    dreamddp-bench run --preset quickstart        # make run
    dreamddp-bench run --preset headline          # make bench
    dreamddp-bench report results/bench/headline  # rebuild a report from its records
    dreamddp-bench accuracy --reps 3 --chunk 1    # make simulator-accuracy
    dreamddp-bench gpu --out gpu_out              # make gpu, on a machine with a GPU
    dreamddp-bench link --backend tc --gbps 1     # gloo's all-reduce on a link vs the ring formula
    dreamddp-bench card TIME QUALITY --out DIR     # make bench-methods' card per link rate

``dreamddp-bench SUBCOMMAND --help`` gives each one's options.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module under dreamddp.bench, or a dotted path, whose main(argv) runs it, what it does)
SUBCOMMANDS = {
    "run": ("jobs", "algorithms side by side, interleaved and repeated, then the report and the result card"),
    "report": ("dreamddp.reports.rebuild", "rebuild a benchmark's README.md and bench.csv from its run records"),
    "accuracy": ("accuracy", "the simulator's predicted iteration time against the measured one"),
    "gpu": ("gpu", "the measurements of a lent GPU (CUDA tests, profiles, every algorithm), or their reports"),
    "card": ("dreamddp.reports.methods", "the methods the field moved to: time and bytes at one ratio beside quality and the papers' claims"),
    "link": ("link", "gloo's all-reduce time under a link backend against the ring formula"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="dreamddp-bench", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.split("\n")[2:10]))
    sub = p.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    for name, (_, help_) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    # the subcommand's own parser takes the rest (its --help included)
    args, rest = p.parse_known_args(argv[:1])
    name = SUBCOMMANDS[args.command][0]
    module = importlib.import_module(name if "." in name else f"dreamddp.bench.{name}")
    return module.main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
