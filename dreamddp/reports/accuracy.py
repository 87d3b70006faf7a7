"""The simulator-accuracy study's rows and report: each timed run's prediction from its job's
measurements alone against its measured mean iteration (``dreamddp-bench run runners/accuracy.yaml`` runs the jobs)."""

from __future__ import annotations

import collections
import json
import os
import statistics
from dataclasses import replace
from pathlib import Path

from dreamddp.atomic import write_csv
from dreamddp.reports import regime as job_regime
from dreamddp.reports import bench as bench_report
from dreamddp.reports import predict as bp
from dreamddp.reports import records, versions
from dreamddp.reports.accuracy_measures import TIE, accuracy, by_job, median_ranking, ranking
from dreamddp.reports.render import write_readme


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
            alone = bp.steady_profile(segs, (bp.NOSYNC,))  # nosync alone as the reference
            alone_skew = bp.reference_skew(segs, alone, labels=(bp.NOSYNC,))
            nosync_backward = segs[bp.NOSYNC].timed_mean("backward")
            plain_backward = segs["plain@ideal"].timed_mean("backward") if "plain@ideal" in segs else None
            chunk = next(iter(segs.values())).job_chunk()
            regime = job_regime.compute_split(segs)
            for label in records.ordered(lb for lb in segs if lb in bench_report.TIMED):
                rec = segs[label]
                measured = rec.mean_iteration
                error = lambda s: None if s is None else s / measured - 1  # noqa: E731
                predicted = bp.predict(rec, profile, skew)
                drawn_apart = None if apart is None else bp.predict(rec, profile, apart)
                own = bp.predict(rec, bp.own_compute(rec, profile), skew)
                link_only = bp.plan_run(rec, profile, host=True)
                host = bp.engine_host(rec)
                no_host = predicted if host is None else bp.predict(rec, profile, skew, host=False)
                ring, at_end = _counterfactuals(rec, profile, skew, [op for ops in link_only.ops for op in ops])
                late = bench_report.lateness(rec)
                out.append({"model": model, "ratio": ratio, "rep": rep, "chunk": chunk, "regime": regime,
                            "algorithm": label, "measured_s": measured, "predicted_s": predicted,
                            "error": error(predicted), "skew_drawn": "together" if together else "apart",
                            "apart_s": drawn_apart, "apart_error": error(drawn_apart), "rank_correlation": corr,
                            "syncs_every_iteration": all(r.bytes > 0 for r in rec.timed()),
                            "own_compute_s": own, "own_error": error(own),
                            "nosync_only_error": error(bp.predict(rec, alone, alone_skew)),
                            "no_skew_s": bp.plan_bound(rec, profile, real=True, host=True),
                            "host_launch_us": None if host is None else 1e6 * host[0],
                            "host_complete_us": None if host is None else 1e6 * host[1],
                            "no_host_s": no_host, "no_host_error": error(no_host),
                            "link_only_s": link_only.mean_iter, "in_run_s": rec.predicted_mean,
                            **_in_run_parts(rec), "late_ms": None if late is None else 1e3 * late,
                            "backward_x_reference": bp.backward_over_reference(rec, segs, profile),
                            "nosync_x_plain": None if plain_backward is None else nosync_backward / plain_backward,
                            "ring_kinds_error": error(ring), "step_at_end_error": error(at_end)})
    return out


def _in_run_parts(rec: records.Record) -> dict:
    """The in-run prediction's error split, over the measured iteration: start-up compute against
    the run's own, predicted waits against the run's; and whether its step is the whole rest."""
    if not rec.prediction or not rec.profile:
        return {"in_run_compute_gap": None, "in_run_wait_gap": None, "in_run_whole_step": None}
    own = statistics.fmean(r.time - r.wait for r in rec.timed())
    return {"in_run_compute_gap": (rec.startup_compute() - own) / rec.mean_iteration,
            "in_run_wait_gap": (rec.predicted_wait - rec.mean_wait) / rec.mean_iteration,
            "in_run_whole_step": rec.startup_whole_step()}


def _counterfactuals(rec: records.Record, profile, skew, ops: list) -> tuple[float | None, float | None]:
    """The prediction with reduce-scatters and all-gathers timed as a ring from the all-reduce's
    probes, and with the whole step at the iteration's end; None where the plan has no such op."""
    ring = at_end = None
    probed_all_reduce = rec.without_kind_probes()
    if probed_all_reduce and any(op.collective != "all_reduce" for op in ops):
        ring = bp.predict(probed_all_reduce, profile, skew)
    if any(op.steps for op in ops):
        at_end = bp.predict(rec, replace(profile, optimizer_time=0.0), skew)
    return ring, at_end


def _interleaving(rows: list[dict]) -> str:
    turns = collections.defaultdict(set)
    for r in rows:
        turns[r["chunk"]].add(r["ratio"])
    words = lambda c: "one iteration per turn" if c == 1 else f"{c} iterations per turn"  # noqa: E731
    return "; ".join(f"{words(c)} at comm/backward {', '.join(f'{x:g}' for x in sorted(rs))}"
                     for c, rs in sorted(turns.items()))


def write(inputs: list[str], out: str, *, title: str | None = None, made_by: str | None = None,
          mix: bool = False) -> list[str]:
    """README.md and accuracy.csv over benchmark folders (``runs/bench.json`` gives the ratio) or
    folders of them (``ratio<r>/``); ``out``/made.json, where dreamddp-bench left it, says what ran."""
    is_bench = lambda d: (Path(d) / "runs" / "bench.json").is_file()  # noqa: E731
    folders = [Path(d) for d in inputs if is_bench(d)]
    folders += [sub for d in inputs if not is_bench(d) for sub in sorted(Path(d).glob("ratio*")) if is_bench(sub)]
    benches = [records.bench(d / "runs") for d in folders]
    mixed, code = versions.check_provenance([r for b in benches for r in b.records()], mix, f"report {out}")
    rows = [row for d, b in zip(folders, benches) for row in rows_of(str(d / "runs"), float(b.args["ratio"]))]
    if not rows:
        raise SystemExit(f"accuracy: no run records under {', '.join(inputs)}")
    made = Path(out) / "made.json"
    ran = json.loads(made.read_text()) if made.is_file() else {"seconds": None, "argv": ["--report-only", "--out", out]}
    argv = ran["argv"]
    med, p95, right, ties, n = accuracy(rows)
    readme = write_readme(out, "accuracy.md.j2", title=title or "Simulator accuracy: predicted vs measured iteration time",
                          mixed=mixed, code=code, made_by=made_by or f"dreamddp-bench accuracy {' '.join(argv)}",
                          seconds=ran["seconds"], resumed="--resume" in argv, from_bench="--from-bench" in argv,
                          interleaving=_interleaving(rows), rows=rows, median=med, p95=p95, right=right, ties=ties,
                          n=n, tie=TIE, ranks=ranking(rows), over_reps=median_ranking(rows),
                          worst=sorted(rows, key=lambda r: -abs(r["error"]))[:5],
                          regimes=[(job, runs[0]["regime"]) for job, runs in by_job(rows).items()])
    write_csv(os.path.join(out, "accuracy.csv"), rows, [k for k in rows[0] if k != "regime"])  # the README has it
    return [readme, os.path.join(out, "accuracy.csv")]
