"""How well the simulator predicts what the engine measures: ``results/simulator/README.md``.

One benchmark job (runners/bench.py: every algorithm in one process group,
interleaved window by window) per model and link rate, the rate set as the
all-reduce of all parameters over the steady backward pass (``--ratios``).
For every timed run the simulator predicts its mean iteration time from the
same job's measurements only (runners/bench_predict.py: DreamDDP's per-unit
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

    python runners/simulator_accuracy.py --reps 3 --chunk 1   # make simulator-accuracy
    python runners/simulator_accuracy.py --report-only        # rebuild the README from the records
    python runners/simulator_accuracy.py --from-bench results/bench   # ratio 7: make bench's own jobs
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import bench
import bench_predict as bp
import bench_report
from accuracy_measures import FAR, TIE, accuracy, by_job, median_ranking, pairs, ranking

from dreamddp.atomic import write_csv, write_text
from dreamddp.run.summary import quantile

TARGETS = {"median": 0.03, "p95": 0.08}


def rows_of(runs_dir: str, ratio: float) -> list[dict]:
    out = []
    for model, reps in bench_report.load(runs_dir).items():
        for rep, segs in reps.items():
            profile = bp.steady_profile(segs)
            if profile is None:
                continue
            skew = bp.reference_skew(segs, profile)  # the ranks drawn together where the records allow
            together = skew is not None and skew.joint
            apart = bp.reference_skew(segs, profile, together=False) if together else None
            corr = bp.rank_correlation(segs)
            # what nosync alone as the reference would predict (the pooled reference's module docstring)
            alone = bp.steady_profile(segs, (bp.NOSYNC,))
            alone_skew = bp.reference_skew(segs, alone, labels=(bp.NOSYNC,))
            nosync_backward = bp.timed_mean(segs[bp.NOSYNC], "backward")
            # plain@ideal is the job's other compute-only run: how far the reference itself drifted
            plain_backward = bp.timed_mean(segs["plain@ideal"], "backward") if "plain@ideal" in segs else None
            chunk, regime = _job_chunk(segs), bench_report._split(segs)
            for label in bench_report.TIMED:
                rec = segs.get(label)
                if rec is None:
                    continue
                measured = rec["summary"]["mean_iteration_time"]
                predicted = bp.predict(rec, profile, skew)
                drawn_apart = None if apart is None else bp.predict(rec, profile, apart)
                own = bp.predict(rec, bp.own_compute(rec, profile), skew)
                in_run = (rec["summary"].get("predicted") or {}).get("mean_iteration_time")
                link_only = bp.plan_run(rec, profile, host=True)
                host = bp.engine_host(rec)
                no_host = predicted if host is None else bp.predict(rec, profile, skew, host=False)
                ring, at_end = _counterfactuals(rec, profile, skew, [op for ops in link_only.ops for op in ops])
                out.append({"model": model, "ratio": ratio, "rep": rep, "chunk": chunk, "regime": regime, "algorithm": label, "measured_s": measured,
                            "predicted_s": predicted, "error": predicted / measured - 1,
                            "skew_drawn": "together" if together else "apart",
                            "apart_s": drawn_apart,
                            "apart_error": None if drawn_apart is None else drawn_apart / measured - 1,
                            "rank_correlation": corr,
                            "syncs_every_iteration": all(r["bytes"] > 0 for r in bp.timed(rec)),
                            "own_compute_s": own, "own_error": own / measured - 1,
                            "nosync_only_error": bp.predict(rec, alone, alone_skew) / measured - 1,
                            "no_skew_s": bp.plan_bound(rec, profile, real=True, host=True),
                            "host_launch_us": None if host is None else 1e6 * host[0],
                            "host_complete_us": None if host is None else 1e6 * host[1],
                            "no_host_s": no_host, "no_host_error": no_host / measured - 1,
                            "link_only_s": link_only.mean_iter, "in_run_s": in_run,
                            "late_ms": None if (late := bench_report.lateness(rec)) is None else 1e3 * late,
                            "backward_x_reference": bp.backward_over_reference(rec, segs),
                            "nosync_x_plain": None if plain_backward is None else nosync_backward / plain_backward,
                            "ring_kinds_error": None if ring is None else ring / measured - 1,
                            "step_at_end_error": None if at_end is None else at_end / measured - 1})
    return out


def _counterfactuals(rec: dict, profile, skew, ops: list) -> tuple[float | None, float | None]:
    """For a plan (``ops``: what it launches in a window) with reduce-scatters or all-gathers,
    the prediction with their real transfer scaled from the all-reduce's as a ring (records with
    their own probes only); for a plan whose ops apply the step where they complete
    (SyncOp.steps), with the whole step charged at the iteration's step instead.  None where
    the run has no such op."""
    link = rec["extra"]["link"]
    ring = at_end = None
    if link.get("real_transfer_kinds_ms") and any(op.collective != "all_reduce" for op in ops):
        stripped = {k: v for k, v in link.items() if k != "real_transfer_kinds_ms"}
        ring = bp.predict({**rec, "extra": {**rec["extra"], "link": stripped}}, profile, skew)
    if any(op.steps for op in ops):
        at_end = bp.predict(rec, replace(profile, optimizer_time=0.0), skew)
    return ring, at_end


def _kinds_line(rows: list[dict]) -> str:
    """What per-kind real transfer and the step where it runs change, for the runs they concern."""
    def errors(field, rs):
        return statistics.median(abs(r[field]) for r in rs)
    out = []
    ring = [r for r in rows if r["ring_kinds_error"] is not None]
    if ring:
        out.append(f"Real transfer by kind: for the {len(ring)} runs whose plans reduce-scatter or all-gather "
                   f"({', '.join(sorted({r['algorithm'] for r in ring}))}), each kind timed by its own start-up probe "
                   f"gives a median absolute error of {errors('error', ring):.1%}; the all-reduce's probe scaled "
                   f"as a ring would (gloo's reduce-scatter is not half its all-reduce) {errors('ring_kinds_error', ring):.1%}.")
    at_end = [r for r in rows if r["step_at_end_error"] is not None]
    if at_end:
        out.append(f"The optimizer step where the engine runs it: for the {len(at_end)} runs whose plans step a "
                   f"group where its collective completes ({', '.join(sorted({r['algorithm'] for r in at_end}))}: "
                   f"in forward, after the group's all-gather), the median absolute error is "
                   f"{errors('error', at_end):.1%}; charged at the iteration's step instead, where it would hide "
                   f"behind the link, {errors('step_at_end_error', at_end):.1%}.")
    return " ".join(out)


def _job_chunk(segs: dict) -> int:
    """Iterations of one run per turn in the job these records come from (its spec.json)."""
    spec = Path(next(iter(segs.values()))["_dir"]).parent / "spec.json"
    return json.loads(spec.read_text())["chunk"]


def _interleaving(rows: list[dict]) -> str:
    """How each ratio's jobs were interleaved, in words."""
    turns = collections.defaultdict(set)
    for r in rows:
        turns[r["chunk"]].add(r["ratio"])
    words = lambda c: "one iteration per turn" if c == 1 else f"{c} iterations per turn"  # noqa: E731
    return "; ".join(f"{words(c)} at comm/backward {', '.join(f'{x:g}' for x in sorted(rs))}"
                     for c, rs in sorted(turns.items()))


def _compute_line(rows: list[dict]) -> str:
    """The measured cause the model leaves out: compute that runs slower than the reference's."""
    slow = [r for r in rows if r["backward_x_reference"] > 1 + bp.SLOW]
    rest = [r for r in rows if r["backward_x_reference"] <= 1 + bp.SLOW]
    if not slow or not rest:
        return ""
    med = lambda rs: statistics.median(r["error"] for r in rs)  # noqa: E731
    counts = collections.Counter(r["algorithm"] for r in slow)
    return (f"The simulator charges every run the compute-only runs' compute. Measured, {len(slow)} runs computed "
            f"slower: their backward pass (no waits in it) took more than {bp.SLOW:.0%} longer than the compute-only "
            f"runs' in the same job "
            f"({', '.join(f'{a} {n}' for a, n in sorted(counts.items(), key=lambda an: (-an[1], an[0])))} of "
            f"{len(rows) // len({r['algorithm'] for r in rows})} configurations). Their median error is "
            f"{med(slow):+.1%}, against {med(rest):+.1%} for the other {len(rest)} runs: column *backward x reference*."
            + _reference_drift(rows))


def _reference_drift(rows: list[dict]) -> str:
    """Configurations whose two compute-only runs disagree (nosync's backward over plain's): with
    either one alone as the reference every prediction in them would be off by about as much;
    pooled, by about half (column *nosync only*: the error with nosync alone)."""
    jobs = by_job(rows)  # nosync_x_plain is the job's: every row of it holds the same
    drift = {k: runs[0]["nosync_x_plain"] for k, runs in jobs.items()}
    off = {k: v for k, v in drift.items() if v and abs(v - 1) > bp.SLOW}
    if not off:
        return ""
    return (" The reference drifts too: in " + "; ".join(
        f"{m} at comm/backward {ratio:g} (rep {rep}) nosync's backward ran {v - 1:+.1%} over plain's (the job's "
        f"two compute-only runs), and the median error there is "
        f"{statistics.median(r['error'] for r in jobs[(m, ratio, rep)]):+.1%}"
        for (m, ratio, rep), v in off.items()) + ".")


def _own_compute_line(rows: list[dict]) -> str:
    """The same predictions charged each run's own measured compute: what error is the
    communication model's once compute noise is taken out."""
    med, p95, right, ties, n = accuracy(rows, "own_error", "own_compute_s")
    return (f"Charged each run's own compute instead (its iteration less its waits: a diagnostic, not a prediction, "
            f"column *own compute s*), the error is median {med:.1%}, 95th percentile {p95:.1%}, and the order is right "
            f"in {right} of {n} configurations ({ties} of {n} with ties): what remains is "
            "the model of the link, the skew and the real transfer; the rest of the error above is compute that "
            "ran at a different speed in a different run.")


def _pairs_line(pair: dict, over_reps: list[dict]) -> str:
    """The ranking counted by pairs, and over the repetitions' medians: a configuration's order
    fails on one pair of its 45, however close that pair ran."""
    line = (f"Counted by pairs of runs in one configuration, the simulator orders {pair['right']} of {pair['n']} "
            f"as measured ({pair['right'] / pair['n']:.0%}), and {pair['right_apart']} of the {pair['apart']} pairs "
            f"measured at least {TIE:.0%} apart ({pair['right_apart'] / max(pair['apart'], 1):.0%}). ")
    line += (f"Misordered pairs measured {FAR:.0%} or more apart, with each run's backward over the compute-only "
             f"runs' (the compute the prediction charged): {'; '.join(pair['far'])}." if pair["far"]
             else f"No misordered pair was measured {FAR:.0%} or more apart.")
    if over_reps:
        right = sum(r["right"] for r in over_reps)
        ties = sum(r["right_but_ties"] for r in over_reps)
        line += (f" Over the repetitions (each algorithm's median measured time against its median prediction, "
                 f"both over their job's geometric mean measured time, so a slower hour of the host divides out), "
                 f"the order is right in {right} of {len(over_reps)} configurations run more than once, and in "
                 f"{ties} of {len(over_reps)} counting runs within {TIE:.0%} as ties: the table below.")
    return line


def _skew_line(rows: list[dict]) -> str:
    """What drawing the ranks together changes against drawing each on its own, which charges
    as skew a slow spell of the host that slowed every rank."""
    both = [r for r in rows if r["apart_error"] is not None]
    if not both:
        return ("The records hold no per-iteration series of the ranks' compute (made before they were kept): "
                "each rank's compute is drawn on its own, from its quantiles.")
    med, p95, right, ties, n = accuracy(both)
    a_med, a_p95, a_right, a_ties, _ = accuracy(both, "apart_error", "apart_s")
    corr = sorted(runs[0]["rank_correlation"] for runs in by_job(both).values())
    runs = lambda rs: f"{len(rs)} run{'s' if len(rs) != 1 else ''}"  # noqa: E731

    def skew_ms(rs, field):  # what the skew adds to the no-skew plan, ms per iteration, mean over runs
        return 1e3 * statistics.fmean(r[field] - r["no_skew_s"] for r in rs)
    parts = [(f"in every iteration ({runs(rs)})" if every else f"less often ({runs(rs)})",
              skew_ms(rs, "predicted_s"), skew_ms(rs, "apart_s"))
             for every in (True, False) if (rs := [r for r in both if r["syncs_every_iteration"] is every])]
    together = statistics.median(corr) >= 0.3
    return (f"The ranks' compute {'does not vary independently' if together else 'varies about independently'}: in "
            f"the compute-only runs their compute per iteration correlates {statistics.median(corr):.2f} (median over "
            f"jobs; {corr[0]:.2f} to {corr[-1]:.2f})"
            + (": a slow spell of the host slows both workers, and no worker waits for the other through it. "
               if together else ". ") + "The prediction "
            "draws the ranks' compute together, whole measured iterations (the records' `compute_by_rank` series). "
            f"Drawn each rank on its own, from its quantiles (column *ranks apart*), the error would be median "
            f"{a_med:.1%} (together: {med:.1%}), 95th percentile {a_p95:.1%} ({p95:.1%}), the order right in "
            f"{a_right} of {n} configurations ({right}), {a_ties} of {n} with ties ({ties}). What the skew adds to "
            "the plan's time per iteration, together against apart, for runs that wait "
            + "; for runs that wait ".join(f"{what}: {t:.1f} ms against {a:.1f} ms" for what, t, a in parts) + ".")


def _host_line(rows: list[dict]) -> str:
    """What charging the engine's host work per op changes, for the runs whose records time it."""
    timed = [r for r in rows if r.get("host_launch_us") is not None]
    if not timed:
        return ""
    med, p95, right, ties, n = accuracy(rows)
    h_med, h_p95, h_right, h_ties, _ = accuracy(rows, "no_host_error", "no_host_s")
    launch = statistics.median(r["host_launch_us"] for r in timed)
    complete = statistics.median(r["host_complete_us"] for r in timed)
    return (f"The engine's host work per op: each run's record times its launches and completions (waits and "
            f"optimizer steps excluded); the prediction charges each launch and each completion the run's mean over "
            f"its untimed first iterations (median over runs: {launch:.0f} us per launch, {complete:.0f} us per "
            f"completion; column *host us/op*; runs that launched nothing in those iterations, {len(rows) - len(timed)} "
            f"of {len(rows)}, are charged none), a launch in backward delaying the gradients after it. Without it "
            f"(column *no host*) the error would be median {h_med:.1%} (with it: {med:.1%}), 95th percentile "
            f"{h_p95:.1%} ({p95:.1%}), the order right in {h_right} of {n} configurations ({right}), {h_ties} of {n} "
            f"with ties ({ties}).")


def _nosync_only_line(rows: list[dict]) -> str:
    """What the same predictions give with one compute-only run (nosync) as the reference."""
    errors = [abs(r["nosync_only_error"]) for r in rows]
    return (f"With nosync alone as the compute reference (column *nosync only*) the error is median "
            f"{statistics.median(errors):.1%}, 95th percentile {quantile(sorted(errors), 0.95):.1%}: the difference is "
            "the reference's own drift (one run's compute moves with the host), which pooling the two compute-only runs reduces.")


def report(rows: list[dict], out: str, seconds: float | None, argv: list[str]) -> None:
    med, p95, right, ties, n = accuracy(rows)
    ranks = ranking(rows)
    pair = pairs(rows)
    over_reps = median_ranking(rows)
    lines = ["# Simulator accuracy: predicted vs measured iteration time", "",
             f"Made by `python runners/simulator_accuracy.py {' '.join(argv)}`"
             + (f" ({seconds / 60:.0f} min on this host" + (" for the jobs it ran; `--resume` kept the ones "
                                                             "completed before with the same code" if "--resume" in argv
                                                             else "") + ")" if seconds else "") + ". "
             "Per model and comm/backward ratio, a benchmark job runs every algorithm interleaved (2 workers, "
             "one per core, the compute presets, whose forward / backward / step split is results/bench/compute_split.md's, H=10; one job per repetition, column rep; "
             + ("`--from-bench`: that ratio's jobs are `make bench`'s own; " if "--from-bench" in argv else "")
             + f"runs interleaved {_interleaving(rows)}); the prediction of each run uses only that job's measurements: DreamDDP's per-unit "
             "profile, the steady compute of the job's two compute-only runs, pooled (nosync: the engine with "
             "nothing to sync; plain: no engine; both on the ideal link, interleaved with the rest) and every "
             "rank's compute per iteration in them (the simulator draws whole measured iterations, every rank's "
             "together: a sync point waits for the slowest rank), the "
             "recorded link (rate and measured alpha), the run's own plan, and the real transfer its deferred carrier runs when a worker first waits (gloo's "
             "collectives of 256 KiB to 16 MiB probed at the run's start-up, each kind on its own where the record "
             "has them: on a fast emulated link it, not the link, is what a wait waits for). *no skew*: the same without the ranks' spread. *link only*: no skew "
             "and no real transfer. *nosync only*: the error with nosync alone as the compute reference (one run's "
             "compute drifts with the host: two halve it). *in-run*: the run's own prediction from its start-up "
             "profile (DreamDDP runs). *ranks apart*: the error with each rank's compute drawn on its own (from "
             "its quantiles) instead of together. *host us/op*: the engine's host seconds per launch / per "
             "completion the prediction charges (the run's untimed first iterations); *no host*: the error "
             "without them.", "",
             f"**{len(rows)} runs: median absolute error {med:.1%} (target {TARGETS['median']:.0%}), 95th percentile "
             f"{p95:.1%} (target {TARGETS['p95']:.0%}); the simulator orders the algorithms as measured in "
             f"{right} of {n} configurations, and in {ties} of {n} when runs measured within {TIE:.0%} of each "
             "other (the repetitions' spread) count as ties.**", "", _pairs_line(pair, over_reps), "",
             _compute_line(rows), "", _skew_line(rows), "",
             _nosync_only_line(rows), "", _own_compute_line(rows), "",
             *([line, ""] if (line := _host_line(rows)) else []),
             *([line, ""] if (line := _kinds_line(rows)) else []),
             "| model | comm/backward | rep | algorithm | measured s | predicted s | error | ranks apart | no skew s "
             "| link only s | nosync only | in-run s | waited beyond the link (ms) | backward x reference | own compute s "
             "| host us/op | no host |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        in_run = "n/a" if r["in_run_s"] is None else f"{r['in_run_s']:.4f}"
        late = "n/a" if r["late_ms"] is None else f"{r['late_ms']:.1f}"
        apart = "n/a" if r["apart_error"] is None else f"{r['apart_error']:+.1%}"
        host = ("n/a" if r.get("host_launch_us") is None
                else f"{r['host_launch_us']:.0f} / {r['host_complete_us']:.0f}")
        no_host = "n/a" if r.get("host_launch_us") is None else f"{r['no_host_error']:+.1%}"
        lines.append(f"| {r['model']} | {r['ratio']:g} | {r['rep']} | {r['algorithm']} | {r['measured_s']:.4f} | "
                     f"{r['predicted_s']:.4f} | {r['error']:+.1%} | {apart} | {r['no_skew_s']:.4f} | {r['link_only_s']:.4f} | "
                     f"{r['nosync_only_error']:+.1%} | {in_run} | {late} | {r['backward_x_reference']:.3f} | "
                     f"{r['own_compute_s']:.4f} ({r['own_error']:+.1%}) | {host} | {no_host} |")
    lines += ["", "Ranking, per configuration:", "",
              f"| model | comm/backward | rep | same order | same order, ties within {TIE:.0%} | swapped pairs (measured gap) |",
              "|---|---|---|---|---|---|"]
    for r in ranks:
        lines.append(f"| {r['model']} | {r['ratio']:g} | {r['rep']} | {'yes' if r['right'] else 'NO'} | "
                     f"{'yes' if r['right_but_ties'] else 'NO'} | {'; '.join(r['swapped']) or '-'} |")
    if over_reps:
        lines += ["", "Ranking over the repetitions (each algorithm's median measured time against its median "
                  "prediction, both over their job's geometric mean measured time):", "",
                  f"| model | comm/backward | repetitions | same order | same order, ties within {TIE:.0%} | "
                  "swapped pairs (measured gap of the medians) |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['model']} | {r['ratio']:g} | {r['reps']} | {'yes' if r['right'] else 'NO'} | "
                  f"{'yes' if r['right_but_ties'] else 'NO'} | {'; '.join(r['swapped']) or '-'} |" for r in over_reps]
    worst = sorted(rows, key=lambda r: -abs(r["error"]))[:5]
    lines += ["", "Largest errors and what was measured beside them (waited beyond the link model: the slowest "
              "rank and the backend's own transfer at the wait, which the prediction's skew and real transfer "
              "should cover):", ""]
    lines += [f"- {r['model']} {r['ratio']:g} {r['algorithm']}: {r['error']:+.1%}; no skew {r['no_skew_s'] / r['measured_s'] - 1:+.1%}"
              + ("" if r["late_ms"] is None else f"; waited beyond the link {r['late_ms']:.1f} ms per iteration")
              + f"; backward {r['backward_x_reference'] - 1:+.1%} over the compute-only runs'" for r in worst]
    lines += ["", "The regime of each job, its compute-only run's steady split (2 workers, one per core; the paper "
              "models' on a GPU: backward about 2x forward, the step small):", ""]
    lines += [f"- {m} at comm/backward {x:g}, repetition {k}: {runs[0]['regime']}"
              for (m, x, k), runs in by_job(rows).items()]
    write_text(os.path.join(out, "README.md"), "\n".join(lines) + "\n")
    write_csv(os.path.join(out, "accuracy.csv"), rows, [k for k in rows[0] if k != "regime"])  # the README has it


def _bench_ratio(folder: str, models: list[str]) -> float:
    """The ratio a ``make bench`` output ran at, if it is this study's kind of job (the same
    defaults but the ratio and the repetitions, every model)."""
    made = json.loads((Path(folder) / "runs" / "bench.json").read_text())["args"]
    ours = vars(bench.parse_args(["--models", *models]))
    differs = [k for k in ("preset", "nproc", "H", "iterations", "calibration_iterations", "profile_iterations",
                           "only", "set", "quick") if made.get(k) != ours[k]]
    if differs or not set(models) <= set(made["models"]):
        raise SystemExit(f"simulator_accuracy: --from-bench {folder}: not this study's job "
                         f"({', '.join(differs) or 'models'} differ)")
    return float(made["ratio"])


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ratios", nargs="+", type=float, default=[2.0, 4.0, 7.0])
    p.add_argument("--models", nargs="+", default=["gpt2", "resnet18"])
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--out", default="results/simulator")
    p.add_argument("--report-only", action="store_true", help="rebuild the README from the records in --out")
    p.add_argument("--resume", action="store_true", help="keep the jobs already completed (runners/bench.py --resume)")
    p.add_argument("--from-bench", metavar="DIR",
                   help="a `make bench` output (results/bench): the ratio it ran at is read from its records "
                        "(every repetition) instead of being run again")
    p.add_argument("--chunk", type=int, default=0,
                   help="iterations of one run per turn (runners/bench.py --chunk; 0: one H-window)")
    args = p.parse_args(argv)
    start, rows = time.perf_counter(), []
    reused = _bench_ratio(args.from_bench, args.models) if args.from_bench else None
    ratios = [r for r in args.ratios if reused is None or r != reused]
    folder = lambda ratio: os.path.join(args.out, f"ratio{ratio:g}")  # noqa: E731
    # Repetitions go round the ratios (every ratio's repetition k before any's k+1), so a study
    # stopped part way, then resumed or reported, has every ratio measured as often.
    for k in range(0 if args.report_only else args.reps):
        for ratio in ratios:
            bench.run_jobs(bench.parse_args(["--models", *args.models, "--reps", str(args.reps), "--ratio", str(ratio),
                                             "--chunk", str(args.chunk), "--out", folder(ratio)]
                                            + (["--resume"] if args.resume else [])), reps=[k])
    for ratio in args.ratios:
        rows += rows_of(os.path.join(args.from_bench if ratio == reused else folder(ratio), "runs"), ratio)
    if not rows:
        raise SystemExit(f"simulator_accuracy: no run records under {args.out}")
    made = Path(args.out) / "made.json"
    if args.report_only and made.is_file():
        made_by = json.loads(made.read_text())
        seconds, argv = made_by["seconds"], made_by["argv"]
    else:
        seconds = time.perf_counter() - start
        write_text(str(made), json.dumps({"seconds": seconds, "argv": argv}))
    report(rows, args.out, seconds, argv)
    print(f"{args.out}/README.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
