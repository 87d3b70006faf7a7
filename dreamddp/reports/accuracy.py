"""The simulator-accuracy study's rows and report: for every timed run of a benchmark job, the
simulator's prediction from that job's measurements alone against the measured mean iteration
(the study's description: dreamddp/bench/accuracy.py, which runs the jobs and calls this).
"""

from __future__ import annotations

import collections
import os
from dataclasses import replace

from dreamddp.atomic import write_csv, write_text
from dreamddp.bench import regime as bench_regime
from dreamddp.reports import bench as bench_report
from dreamddp.reports import predict as bp
from dreamddp.reports.accuracy_measures import TIE, accuracy, by_job, median_ranking, ranking

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
            chunk, regime = _job_chunk(segs), bench_regime.compute_split(segs)
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
                            "link_only_s": link_only.mean_iter, "in_run_s": in_run, **_in_run_parts(rec),
                            "late_ms": None if (late := bench_report.lateness(rec)) is None else 1e3 * late,
                            "backward_x_reference": bp.backward_over_reference(rec, segs, profile),
                            "nosync_x_plain": None if plain_backward is None else nosync_backward / plain_backward,
                            "ring_kinds_error": None if ring is None else ring / measured - 1,
                            "step_at_end_error": None if at_end is None else at_end / measured - 1})
    return out


def _in_run_parts(rec: dict) -> dict:
    """The in-run prediction's error split in two, each over the measured iteration: its start-up
    profile's compute (forward, backward, step) against the run's own (iteration less waits), and
    its waits against the run's; and whether that profile's step counts the whole pass outside
    forward and backward (profiles with ``optimizer_time``) or the optimizer step alone."""
    predicted, profile = rec["summary"].get("predicted"), rec["extra"].get("profile")
    if not predicted or not profile:
        return {"in_run_compute_gap": None, "in_run_wait_gap": None, "in_run_whole_step": None}
    measured = rec["summary"]["mean_iteration_time"]
    start_up = profile["forward_total"] + profile["backward_total"] + profile["step_time"]
    return {"in_run_compute_gap": (start_up - bp.own_compute_time(rec)) / measured,
            "in_run_wait_gap": (predicted["mean_wait"] - rec["summary"]["mean_wait"]) / measured,
            "in_run_whole_step": profile.get("optimizer_time") is not None}


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


def _job_chunk(segs: dict) -> int:
    """Iterations of one run per turn in the job these records come from (its spec.json)."""
    return bp.job_chunk(next(iter(segs.values())))


def _interleaving(rows: list[dict]) -> str:
    """How each ratio's jobs were interleaved, in words."""
    turns = collections.defaultdict(set)
    for r in rows:
        turns[r["chunk"]].add(r["ratio"])
    words = lambda c: "one iteration per turn" if c == 1 else f"{c} iterations per turn"  # noqa: E731
    return "; ".join(f"{words(c)} at comm/backward {', '.join(f'{x:g}' for x in sorted(rs))}"
                     for c, rs in sorted(turns.items()))


def report(rows: list[dict], out: str, seconds: float | None, argv: list[str]) -> None:
    med, p95, right, ties, n = accuracy(rows)
    ranks = ranking(rows)
    over_reps = median_ranking(rows)
    lines = ["# Simulator accuracy: predicted vs measured iteration time", "",
             f"Made by `dreamddp-bench accuracy {' '.join(argv)}`"
             + (f" ({seconds / 60:.0f} min on this host" + (" for the jobs it ran; `--resume` kept the ones "
                                                             "completed before with the same code" if "--resume" in argv
                                                             else "") + ")" if seconds else "") + ". "
             "Per model and comm/backward ratio, a benchmark job runs every algorithm interleaved (2 workers, "
             "one per core, the compute presets, H=10; one job per repetition, column rep; "
             + ("`--from-bench`: that ratio's jobs are `make bench`'s own; " if "--from-bench" in argv else "")
             + f"runs interleaved {_interleaving(rows)}); the prediction of each run uses only that job's measurements: DreamDDP's per-unit "
             "profile, the steady compute of the job's two compute-only runs, pooled (nosync: the engine with "
             "nothing to sync; plain: no engine; both on the ideal link, interleaved with the rest) and every "
             "rank's compute per iteration in them (the simulator draws whole measured iterations, every rank's "
             "together: a sync point waits for the slowest rank), the "
             "recorded link (rate and measured alpha), the run's own plan, and the real transfer its deferred carrier runs when a worker first waits (gloo's "
             "collectives of 256 KiB to 16 MiB probed at the run's start-up, each kind on its own where the record "
             "has them: on a fast emulated link it, not the link, is what a wait waits for), and the job's turns "
             "(each starts at a barrier outside the timed iterations, where the ranks line up, their links paused: "
             "the simulator lines them up there too and reports rank 0's iterations, the record's). *no skew*: the same without the ranks' spread. *link only*: no skew "
             "and no real transfer. *nosync only*: the error with nosync alone as the compute reference (one run's "
             "compute drifts with the host: two halve it). *in-run*: the run's own prediction from its start-up "
             "profile (DreamDDP runs). *ranks apart*: the error with each rank's compute drawn on its own (from "
             "its quantiles) instead of together. *host us/op*: the engine's host seconds per launch / per "
             "completion the prediction charges (the run's untimed first iterations); *no host*: the error "
             "without them.", "",
             f"**{len(rows)} runs: median absolute error {med:.1%}, 95th percentile {p95:.1%}; the simulator "
             f"orders the algorithms as measured in {right} of {n} configurations, and in {ties} of {n} when runs "
             f"measured within {TIE:.0%} of each other (the repetitions' spread) count as ties.**", "",
             "| model | comm/backward | rep | algorithm | measured s | predicted s | error | ranks apart | no skew s "
             "| link only s | nosync only | in-run s | waited beyond the link (ms) | backward x reference | own compute s "
             "| host us/op | no host |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        in_run = "n/a" if r["in_run_s"] is None else f"{r['in_run_s']:.4f}"
        late = "n/a" if r["late_ms"] is None else f"{r['late_ms']:.1f}"
        apart = "n/a" if r["apart_error"] is None else f"{r['apart_error']:+.1%}"
        host = ("n/a" if r["host_launch_us"] is None
                else f"{r['host_launch_us']:.0f} / {r['host_complete_us']:.0f}")
        no_host = "n/a" if r["host_launch_us"] is None else f"{r['no_host_error']:+.1%}"
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
