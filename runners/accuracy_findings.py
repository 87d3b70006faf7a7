"""The simulator accuracy report's paragraphs: each states one measured finding over the study's
rows (runners/simulator_accuracy.py builds the rows and the tables), with the counterfactual
column it reads beside the prediction's error."""

from __future__ import annotations

import collections
import statistics

import bench_predict as bp
from accuracy_measures import FAR, TIE, accuracy, by_job, flipped_elsewhere
from dreamddp.run.summary import quantile


def kinds_line(rows: list[dict]) -> str:
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
                   f"in forward, after the collective's wait: DeAR's all-gather, overlap_forward's average), "
                   f"the median absolute error is "
                   f"{errors('error', at_end):.1%}; charged at the iteration's step instead, where it would hide "
                   f"behind the link, {errors('step_at_end_error', at_end):.1%}.")
    return " ".join(out)


def compute_line(rows: list[dict]) -> str:
    """The measured cause the model leaves out: compute that runs slower than the reference's."""
    slow = [r for r in rows if r["backward_x_reference"] > 1 + bp.SLOW]
    rest = [r for r in rows if r["backward_x_reference"] <= 1 + bp.SLOW]
    if not slow or not rest:
        return ""
    med = lambda rs: statistics.median(r["error"] for r in rs)  # noqa: E731
    counts = collections.Counter(r["algorithm"] for r in slow)
    return (f"The simulator charges every run the compute-only runs' compute. Measured, {len(slow)} runs computed "
            f"slower: their backward pass (no waits in it), less the host work of the launches in it (which the "
            f"prediction charges as the engine's), took more than {bp.SLOW:.0%} longer than the compute-only "
            f"runs' in the same job "
            f"({', '.join(f'{a} {n}' for a, n in sorted(counts.items(), key=lambda an: (-an[1], an[0])))} of "
            f"{len(rows) // len({r['algorithm'] for r in rows})} configurations). Their median error is "
            f"{med(slow):+.1%}, against {med(rest):+.1%} for the other {len(rest)} runs: column *backward x reference*."
            + reference_drift(rows))


def reference_drift(rows: list[dict]) -> str:
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


def own_compute_line(rows: list[dict]) -> str:
    """The same predictions charged each run's own measured compute: what error is the
    communication model's once compute noise is taken out."""
    med, p95, right, ties, n = accuracy(rows, "own_error", "own_compute_s")
    return (f"Charged each run's own compute instead (its iteration less its waits: a diagnostic, not a prediction, "
            f"column *own compute s*), the error is median {med:.1%}, 95th percentile {p95:.1%}, and the order is right "
            f"in {right} of {n} configurations ({ties} of {n} with ties): what remains is "
            "the model of the link, the skew and the real transfer; the rest of the error above is compute that "
            "ran at a different speed in a different run.")


def pairs_line(pair: dict, over_reps: list[dict]) -> str:
    """The ranking counted by pairs, and over the repetitions' medians: a configuration's order
    fails on one pair of its 45, however close that pair ran."""
    line = (f"Counted by pairs of runs in one configuration, the simulator orders {pair['right']} of {pair['n']} "
            f"as measured ({pair['right'] / pair['n']:.0%}), and {pair['right_apart']} of the {pair['apart']} pairs "
            f"measured at least {TIE:.0%} apart ({pair['right_apart'] / max(pair['apart'], 1):.0%}). ")
    line += (f"Misordered pairs measured {FAR:.0%} or more apart, with each run's backward (less the host work of "
             f"its launches there, charged as the engine's) over the compute-only runs' (the compute the prediction "
             f"charged): {'; '.join(pair['far'])}." if pair["far"]
             else f"No misordered pair was measured {FAR:.0%} or more apart.")
    if over_reps:
        right = sum(r["right"] for r in over_reps)
        ties = sum(r["right_but_ties"] for r in over_reps)
        line += (f" Over the repetitions (each algorithm's median measured time against its median prediction, "
                 f"both over their job's geometric mean measured time, so a slower hour of the host divides out), "
                 f"the order is right in {right} of {len(over_reps)} configurations run more than once, and in "
                 f"{ties} of {len(over_reps)} counting runs within {TIE:.0%} as ties: the table below.")
    return line


def misses_line(rows: list[dict]) -> str:
    """The pairs that fail a configuration even counting ties, against the other repetitions."""
    found = flipped_elsewhere(rows)
    if not found["misses"]:
        return ""
    head = (f"The {len(found['misses'])} misordered pairs measured {TIE:.0%} or more apart "
            f"({'; '.join(found['misses'])}): ")
    if not found["flipped"]:
        return head + ("every other repetition of the same model and ratio measured them in the same order: "
                       "there the simulator's order is wrong, not the measurement's.")
    return head + (f"another repetition of the same model and ratio measured {len(found['flipped'])} of them the "
                   f"other way round, as the simulator ordered them ({'; '.join(found['flipped'])}).")


def exact_line(rows: list[dict]) -> str:
    """What keeps configurations from the exact order: a misordered pair whose measured order
    another repetition reverses has no measured order a prediction could meet; the others did
    repeat, and there the simulator's order is wrong."""
    found = flipped_elsewhere(rows, min_gap=0.0)
    if not found["misses"]:
        return ""
    line = (f"The {len(found['misses'])} misordered pairs that keep configurations from the exact order were "
            f"measured at most {max(found['gaps']):.1%} apart; another repetition of the same model and ratio measured "
            f"{len(found['flipped'])} of them the other way round, as the simulator ordered them: their measured "
            "order does not repeat, and no prediction can meet it.")
    if found["held"]:
        held = sum(map(len, found["held"].values()))
        line += ((f" The other {held} were" if held > 1 else " The other one was") + " measured in the same order in "
                 "every repetition, and there the simulator's order is wrong: "
                 + "; ".join(f"{name} (misordered in {len(gaps)} repetition{'s' if len(gaps) > 1 else ''}, measured "
                             f"{', '.join(f'{g:.1%}' for g in gaps)} apart)" for name, gaps in found["held"].items())
                 + ".")
    return line


def skew_line(rows: list[dict]) -> str:
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


def host_line(rows: list[dict]) -> str:
    """What charging the engine's host work per op changes, for the runs whose records time it."""
    timed = [r for r in rows if r["host_launch_us"] is not None]
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


def nosync_only_line(rows: list[dict]) -> str:
    """What the same predictions give with one compute-only run (nosync) as the reference."""
    errors = [abs(r["nosync_only_error"]) for r in rows]
    return (f"With nosync alone as the compute reference (column *nosync only*) the error is median "
            f"{statistics.median(errors):.1%}, 95th percentile {quantile(sorted(errors), 0.95):.1%}: the difference is "
            "the reference's own drift (one run's compute moves with the host), which pooling the two compute-only runs reduces.")


def in_run_line(rows: list[dict]) -> str:
    """How well the runs' own in-run predictions (start-up profile alone) do, and which part of
    their error is compute (the profile's against the run's) and which the waits."""
    mine = [r for r in rows if r["in_run_s"] is not None and r["in_run_compute_gap"] is not None]
    if not mine:
        return ""
    errors = [r["in_run_s"] / r["measured_s"] - 1 for r in mine]
    absolute = sorted(abs(e) for e in errors)
    older = sum(not r["in_run_whole_step"] for r in mine)
    return (f"The runs' own in-run predictions (column *in-run s*: {len(mine)} runs of "
            f"{', '.join(sorted({r['algorithm'] for r in mine}))}, from the start-up profile alone, before any "
            f"training iteration): median absolute error {statistics.median(absolute):.1%}, 95th percentile "
            f"{quantile(absolute, 0.95):.1%}, median {statistics.median(errors):+.1%}. Of each run's error, its "
            f"start-up profile's compute against the run's own compute gives median "
            f"{statistics.median(r['in_run_compute_gap'] for r in mine):+.1%} of the iteration, the predicted waits "
            f"against the measured (the link, and the skew drawn from a few start-up passes, each rank on its own) "
            f"{statistics.median(r['in_run_wait_gap'] for r in mine):+.1%}."
            + (f" {older} of these runs profiled the optimizer step alone as the step, leaving out the engine's "
               "per-iteration work around it that every iteration pays (the profiler counts the whole pass outside "
               "forward and backward since)." if older else "")
            + _in_run_tail(mine, errors))


TAIL = 0.08  # the 95th-percentile target: the runs the in-run tail is made of


def _in_run_tail(rows: list[dict], errors: list[float]) -> str:
    """What the in-run predictions' worst runs (off by more than TAIL) are off by, and how much
    of it is the start-up profile's compute against the run's own."""
    tail = [(r, e) for r, e in zip(rows, errors) if abs(e) > TAIL]
    if not tail:
        return ""
    error = statistics.median(e for _, e in tail)
    compute = statistics.median(r["in_run_compute_gap"] for r, _ in tail)
    waits = statistics.median(r["in_run_wait_gap"] for r, _ in tail)
    runs, are = ("1 run", "is") if len(tail) == 1 else (f"{len(tail)} runs", "are")
    return (f" The {runs} off by more than {TAIL:.0%} {are} off by median {error:+.1%}, of which their "
            f"start-up profile's compute gives {compute:+.1%} and the waits {waits:+.1%}"
            + (": most of their error is the host's speed at start-up (a few passes) against its speed over the "
               "run, which the predictions above take from the job's compute-only runs instead."
               if abs(compute) >= abs(error) / 2 else "."))
