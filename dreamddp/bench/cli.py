"""``dreamddp-bench``: one command for the benchmark's studies (runners/<study>.yaml).

    dreamddp-bench run runners/quickstart.yaml        # make run
    dreamddp-bench run runners/headline.yaml --dry-run  # its jobs, and what --resume would keep
    dreamddp-bench report runners/headline.yaml       # its reports again from the committed records
    dreamddp-bench report results/bench/headline      # one folder's report from its records
    dreamddp-bench gpu --out gpu_out                  # runners/gpu.yaml's steps, with gpu's own options
    dreamddp-bench link --backend tc --gbps 1         # gloo's all-reduce on a link vs the ring formula
    dreamddp-bench card TIME QUALITY --out DIR         # one methods card from two run folders

``dreamddp-bench SUBCOMMAND --help`` gives each one's options.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module under dreamddp.bench, its function that takes argv, what it does)
SUBCOMMANDS = {
    "run": ("study_run", "main", "a study file's jobs (models x runs x regime x repetitions), then its reports"),
    "report": ("study_run", "report_main", "a study's reports (or one run folder's) again from its run records"),
    "gpu": ("gpu", "main", "the measurements of a lent GPU (CUDA tests, profiles, every algorithm), or their reports"),
    "card": ("dreamddp.reports.methods", "main",
             "the methods the field moved to: time and bytes at one ratio beside quality and the papers' claims"),
    "link": ("link", "main", "gloo's all-reduce time under a link backend against the ring formula"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="dreamddp-bench", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.split("\n")[2:10]))
    sub = p.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    for name, (_, _, help_) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    args = p.parse_known_args(argv[:1])[0]  # the subcommand's own parser takes the rest (its --help included)
    module, function, _ = SUBCOMMANDS[args.command]
    module = importlib.import_module(module if "." in module else f"dreamddp.bench.{module}")
    return getattr(module, function)(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
