"""A study's ``report:`` entries made from its records: the one place that calls the report writers.

``dreamddp.reports.write_report(kind, out, inputs, *, claims, title, made_by, mix)`` is the
writers' entry point; until that package is on this branch, ``_legacy`` calls today's writers
under dreamddp/bench/ with the same arguments (the integrator deletes ``_legacy`` at the merge).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from pathlib import Path

from dreamddp.bench.study import Report, Study, resolve_input


def write_all(study: Study, made_by: str | None, seconds: float | None = None) -> list[str]:
    """Every report of ``study`` (``made_by``: the command that just ran it; None when remaking
    reports from committed records, whose bench.json says what made them)."""
    written: list[str] = []
    for rep in study.reports:
        out = os.path.normpath(os.path.join(study.out, rep.out))
        inputs = [resolve_input(study, study.out, i) for i in rep.inputs]
        missing = next((i for i in inputs if not os.path.isdir(i)), None)
        if missing is not None:  # a study not run here (make run's outputs/, bench-tc off root)
            print(f"report {rep.kind} -> {out}: skipped, no records in {missing}", file=sys.stderr)
            continue
        claims = study.claims if isinstance(study.claims, dict) else None
        by = made_by or recorded_made_by(inputs)
        if rep.kind == "accuracy":
            _made_json(out, made_by, seconds)
        written += write_report(rep.kind, out, inputs, claims=claims, title=rep.title, made_by=by,
                                ratios=list(rep.ratios))
    return written


def recorded_made_by(inputs: list[str]) -> str | None:
    """The command a study's records say made them (bench.json's made_by, records made from a
    study file); None for older records (the writers rebuild theirs from bench.json's args)."""
    for folder in inputs:
        for made in sorted(Path(folder).glob("**/runs/bench.json")):
            by = json.loads(made.read_text()).get("made_by")
            if by:
                return by
    return None


def _made_json(out: str, made_by: str | None, seconds: float | None) -> None:
    """The accuracy report's made.json (seconds of jobs, the command): written by a run, kept by a
    remake from the records."""
    if made_by is None:
        return
    from dreamddp.atomic import write_text

    os.makedirs(out, exist_ok=True)
    write_text(os.path.join(out, "made.json"),
               json.dumps({"seconds": seconds, "argv": made_by.split()[2:], "made_by": made_by}))


def write_report(kind: str, out: str, inputs: list[str], *, claims: dict | None = None, title: str | None = None,
                 made_by: str | None = None, ratios: list[float] | None = None) -> list[str]:
    try:
        from dreamddp.reports import write_report as writer  # the reports package, once merged
    except ImportError:
        writer = _legacy
    extra = {"ratios": ratios} if "ratios" in inspect.signature(writer).parameters else {}
    return writer(kind, out, inputs, claims=claims, title=title, made_by=made_by, **extra)


def _legacy(kind: str, out: str, inputs: list[str], *, claims=None, title=None, made_by=None, mix=False,
            ratios=None) -> list[str]:
    """Today's writers (dreamddp/bench/{report,tc_report,sweep_report,methods_card,accuracy,gpu}.py)."""
    from dreamddp.bench import report

    if kind == "bench":
        report.write(str(Path(inputs[0]) / "runs"), out)
        return [str(Path(out) / "README.md")]
    if kind == "tc":
        from dreamddp.bench import tc_report

        trees = [str(Path(inputs[0]) / link / "runs") for link in ("tc", "emulated")]
        for tree in trees:
            report.write(tree, str(Path(tree).parent))
        return [tc_report.write(inputs[0], trees)]
    if kind == "sweep":
        from dreamddp.bench import sweep_report

        return [sweep_report.write(inputs[0])]
    if kind == "methods_card":
        from dreamddp.bench import methods_card

        if claims is not None:
            methods_card.CLAIMS = dict(claims)  # the study's claims, keyed by label
        return [methods_card.write(inputs[0], inputs[1], out)]
    if kind == "accuracy":
        from dreamddp.bench import accuracy

        return [accuracy.remake(inputs[0], ratios or [], out)]
    if kind == "accuracy_tc":
        from dreamddp.bench import accuracy, accuracy_tc

        return [accuracy_tc.write(inputs[0], out, accuracy.rows_of)]
    if kind == "gpu":
        from dreamddp.bench import gpu

        return [str(p) for p in gpu.reports(Path(inputs[0]), Path(inputs[1]))]
    raise ValueError(f"report kind {kind!r}: no writer")
