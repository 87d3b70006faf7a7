"""``dreamddp-bench accuracy``: how well the simulator predicts what the engine measures.

One benchmark job (dreamddp-bench run: every algorithm in one process group,
interleaved window by window) per model and link rate, the rate set as the
all-reduce of all parameters over the steady backward pass (``--ratios``).
For every timed run the simulator predicts its mean iteration time from the
same job's measurements only (dreamddp/reports/predict.py: DreamDDP's per-unit
profile, the compute of the job's two compute-only runs (nosync and plain,
pooled) and every rank's compute per iteration in them, drawn whole measured iterations at a
time, every rank's together (records with ``compute_by_rank`` series; older ones: each rank on
its own, from its quantiles), the recorded link, the run's own plan); beside it the same with
each rank drawn on its own, and the run's own in-run prediction (its start-up profile,
``summary.predicted``) where it made one.
The table: predicted vs measured per run, median and 95th-percentile absolute
error, and whether the simulator orders the algorithms as measured in every
configuration (where it does not, the swapped pairs and how far apart they
were measured).

    dreamddp-bench accuracy --reps 3 --chunk 1 --out results/simulator   # make simulator-accuracy
    dreamddp-bench accuracy --report-only --out results/simulator        # the README again from the records
    dreamddp-bench accuracy --from-bench results/bench/headline          # ratio 7: make bench's own jobs
    dreamddp-bench accuracy --real-link results/bench/tc --out results/simulator/tc   # against tc
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from dreamddp.bench import jobs
from dreamddp.reports import write_report
from dreamddp.atomic import write_text


def _bench_ratio(folder: str, models: list[str]) -> float:
    """The ratio a ``make bench`` output ran at, if it is this study's kind of job (the same
    defaults but the ratio and the repetitions, every model)."""
    made = json.loads((Path(folder) / "runs" / "bench.json").read_text())["args"]
    ours = vars(jobs.parse_args(["--models", *models]))
    differs = [k for k in ("preset", "nproc", "H", "iterations", "calibration_iterations", "profile_iterations",
                           "only", "set", "quick") if made.get(k) != ours[k]]
    if differs or not set(models) <= set(made["models"]):
        raise SystemExit(f"accuracy: --from-bench {folder}: not this study's job "
                         f"({', '.join(differs) or 'models'} differ)")
    return float(made["ratio"])


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="dreamddp-bench accuracy", description=__doc__.split("\n\n")[0])
    p.add_argument("--ratios", nargs="+", type=float, default=[2.0, 4.0, 7.0])
    p.add_argument("--models", nargs="+", default=["gpt2", "resnet18"])
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--out", default="results/simulator")
    p.add_argument("--report-only", action="store_true", help="rebuild the README from the records in --out")
    p.add_argument("--resume", action="store_true", help="keep the jobs already completed (dreamddp-bench run --resume)")
    p.add_argument("--from-bench", metavar="DIR",
                   help="a `make bench` output (results/bench/headline): the ratio it ran at is read from its records "
                        "(every repetition) instead of being run again")
    p.add_argument("--chunk", type=int, default=0,
                   help="iterations of one run per turn (dreamddp-bench run --chunk; 0: one H-window)")
    p.add_argument("--real-link", metavar="DIR",
                   help="a `dreamddp-bench run --link tc` output: its runs' a-priori and same-job predictions against "
                        "the real link, written to --out (dreamddp/reports/accuracy_tc.py); runs nothing")
    p.add_argument("--mix", action="store_true", help="report records made by different code (the header lists them)")
    args = p.parse_args(argv)
    if args.real_link:
        print(write_report("accuracy_tc", args.out, [args.real_link], mix=args.mix)[0])
        return 0
    start = time.perf_counter()
    reused = _bench_ratio(args.from_bench, args.models) if args.from_bench else None
    ratios = [r for r in args.ratios if reused is None or r != reused]
    folder = lambda ratio: os.path.join(args.out, f"ratio{ratio:g}")  # noqa: E731
    # Repetitions go round the ratios (every ratio's repetition k before any's k+1), so a study
    # stopped part way, then resumed or reported, has every ratio measured as often.
    for k in range(0 if args.report_only else args.reps):
        for ratio in ratios:
            jobs.run_jobs(jobs.parse_args(["--models", *args.models, "--reps", str(args.reps), "--ratio", str(ratio),
                                             "--chunk", str(args.chunk), "--out", folder(ratio)]
                                            + (["--resume"] if args.resume else [])), reps=[k])
    folders = [args.from_bench if ratio == reused else folder(ratio) for ratio in args.ratios]
    made = Path(args.out) / "made.json"
    if not (args.report_only and made.is_file()):  # the report's "Made by" line reads it
        write_text(str(made), json.dumps({"seconds": time.perf_counter() - start, "argv": argv}))
    found = [f for f in folders if os.path.isdir(f)] or [args.out]  # none: the report says there are no records
    print(write_report("accuracy", args.out, found, mix=args.mix)[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
