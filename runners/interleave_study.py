"""How finely to interleave the benchmark's runs: one H-window per turn, or one iteration.

``make bench`` interleaves its runs one H-window at a time (``--chunk`` = H):
every algorithm samples the same slow and fast spells of a shared host.  With
44 iterations per run (``--preset compute``, as these jobs run) that is 4 timed
windows per run (make bench's: 2 on GPT-2, 3 on ResNet-18), and this host's slow
spells last seconds: a spell that falls on one run's window moves that run's
mean compute by several percent, and the simulator, which charges every run
the compute-only runs' compute, reads it as its own error.  This study runs
the same benchmark job with one iteration per turn and with one window per
turn, alternating, and compares within each job how far each algorithm's
backward pass (no wait falls in it) strays from the compute-only runs', and
the simulator's error.

    python runners/interleave_study.py [--reps 3] [--model gpt2] [--out results/interleave]

Writes ``<out>/README.md`` and ``<out>/interleave.csv``; the jobs are
``runners/bench.py`` jobs under ``<out>/chunk<c>/rep<k>/`` (``--resume`` keeps
the completed ones).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

import bench_predict as bp
from bench_regime import compute_split
from bench_report import load, per_rep
from benchlib import write_tables

from dreamddp.atomic import write_text

# the algorithms whose differences the headline reads, and the two compute-only runs
ONLY = ["nosync@ideal", "plain@ideal", "flsgd", "plsgd_enp", "streaming_diloco", "dreamddp", "dreamddp+general",
        "dreamddp+delay"]


def job_dir(out: str, chunk: int, rep: int) -> str:
    return os.path.join(out, f"chunk{chunk}", f"rep{rep}")


def run_job(args, chunk: int, rep: int) -> None:
    cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "bench.py"), "--models", args.model, "--reps", "1",
           "--no-memory", "--H", str(args.H), "--chunk", str(chunk), "--port", str(args.port + 2 * rep + (chunk == 1)),
           "--out", job_dir(args.out, chunk, rep), "--only", *ONLY, *(["--resume"] if args.resume else [])]
    print(f"interleave: chunk {chunk}, repetition {rep}", flush=True)
    subprocess.run(cmd, check=True)


def job_row(chunk: int, rep: int, segs: dict) -> dict:
    """One job: the compute-only runs against each other, every algorithm's backward against them,
    and the simulator's error."""
    rows = per_rep({0: segs})
    algos = [label for label in rows if label not in bp.COMPUTE_ONLY]
    stray = [abs(rows[label][0]["compute_over"] - 1) for label in algos]
    error = [abs(rows[label][0]["predicted"] / rows[label][0]["measured"] - 1) for label in algos]
    nosync, plain = (bp.timed_mean(segs[label], "backward") for label in bp.COMPUTE_ONLY)
    return {"chunk": chunk, "rep": rep, "algorithms": len(algos), "nosync_over_plain_backward": nosync / plain,
            "backward_stray_mean": statistics.fmean(stray), "backward_stray_max": max(stray),
            "error_median": statistics.median(error), "error_max": max(error)}


def report(args, chunks: list[int]) -> None:
    rows, splits = [], []
    for rep in range(args.reps):
        for chunk in chunks:
            runs = load(os.path.join(job_dir(args.out, chunk, rep), "runs"))
            if args.model in runs and 0 in runs[args.model]:
                rows.append(job_row(chunk, rep, runs[args.model][0]))
                splits.append(f"- chunk {chunk}, repetition {rep}: {compute_split(runs[args.model][0])}")
    if not rows:
        raise SystemExit(f"interleave: no completed job under {args.out}")
    write_tables(args.out, "interleave", "Per job (one benchmark job each; fractions, not percent):", rows)
    per_job = open(os.path.join(args.out, "interleave.md")).read()
    lines = ["# Interleaving the benchmark's runs: one iteration or one H-window per turn", "",
             f"Made by `python runners/interleave_study.py --reps {args.reps} --model {args.model} --H {args.H}`: "
             f"{args.model}, model.size=compute, 2 workers on 2 cores, comm/backward 7, H={args.H}; each job is "
             f"`runners/bench.py --only {' '.join(ONLY)} --chunk <c>`, run alternately with c=1 (one iteration per "
             f"turn) and c={args.H} (one H-window per turn, `make bench`'s default).", "",
             "Columns: *nosync_over_plain_backward*, the two compute-only runs' backward passes against each other "
             "(the same compute: 1 is exact); *backward_stray*, over the other algorithms of the job, |their backward "
             "over the compute-only runs' - 1| (no wait falls in backward, so what strays is compute the host ran at "
             "another speed); *error*, |the simulator's prediction over the measured iteration - 1| "
             "(runners/bench_predict.py, as `make bench` predicts).", "",
             "| chunk | jobs | median backward_stray_mean | median backward_stray_max | largest backward_stray_max "
             "| median error_median | median error_max | largest error_max |",
             "|---|---|---|---|---|---|---|---|"]
    for chunk in chunks:
        mine = [r for r in rows if r["chunk"] == chunk]
        if not mine:
            continue
        med = lambda key: statistics.median(r[key] for r in mine)  # noqa: E731
        top = lambda key: max(r[key] for r in mine)  # noqa: E731
        lines.append(f"| {chunk} | {len(mine)} | {med('backward_stray_mean'):.3f} | {med('backward_stray_max'):.3f} | "
                     f"{top('backward_stray_max'):.3f} | {med('error_median'):.3f} | {med('error_max'):.3f} | "
                     f"{top('error_max'):.3f} |")
    lines += ["", "The regime of each job, its compute-only run's steady split (the paper models' on a GPU: backward "
              "about 2x forward, the step small):", "", *splits]
    write_text(os.path.join(args.out, "README.md"), "\n".join(lines) + "\n\n" + per_job)
    print(f"{args.out}/README.md")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=3, help="jobs per interleaving")
    p.add_argument("--model", default="gpt2", choices=["gpt2", "resnet18"])
    p.add_argument("--H", type=int, default=10)
    p.add_argument("--port", type=int, default=29800)
    p.add_argument("--out", default="results/interleave")
    p.add_argument("--resume", action="store_true", help="keep the jobs already completed")
    p.add_argument("--report-only", action="store_true", help="the tables again from the jobs' records")
    args = p.parse_args()
    chunks = [1, args.H]
    if not args.report_only:
        for rep in range(args.reps):
            for chunk in chunks:
                run_job(args, chunk, rep)
    report(args, chunks)


if __name__ == "__main__":
    main()
