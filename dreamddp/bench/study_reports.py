"""A study's ``report:`` entries made from its records: the one place bench calls ``dreamddp.reports.write_report``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from dreamddp.atomic import write_text
from dreamddp.study import Study, resolve_input
from dreamddp.reports import NO_RECORDS, write_report


def write_all(study: Study, made_by: str | None, seconds: float | None = None, mix: bool = False) -> list[str]:
    """Every report of ``study``.  ``made_by``: the command that just ran it; None when remaking reports
    from records, whose bench.json says what made them."""
    written: list[str] = []
    for rep in study.reports:
        out = os.path.normpath(os.path.join(study.out, rep.out))
        inputs = [resolve_input(study, study.out, i) for i in rep.inputs]
        missing = None if rep.kind in NO_RECORDS else next((i for i in inputs if not os.path.isdir(i)), None)
        if missing is not None:  # a study not run here (make run's outputs/, bench-tc off root)
            print(f"report {rep.kind} -> {out}: skipped, no records in {missing}", file=sys.stderr)
            continue
        if rep.kind == "accuracy":  # one input folder per ratio (its parts)
            if made_by is not None:  # its made.json: a run's seconds and command, kept by a remake
                os.makedirs(out, exist_ok=True)
                write_text(os.path.join(out, "made.json"),
                           json.dumps({"seconds": seconds, "argv": made_by.split()[2:], "made_by": made_by}))
            inputs = [os.path.join(inputs[0], f"ratio{r:g}") for r in rep.ratios] or inputs
        by = made_by or recorded_made_by(inputs)  # from the folders read (another study's may sit below)
        written += write_report(rep.kind, out, inputs, claims=study.claims if isinstance(study.claims, dict) else None,
                                title=rep.title, made_by=by, mix=mix or rep.mix)
    return written


def recorded_made_by(inputs: list[str]) -> str | None:
    """The command a study's records say made them (bench.json's made_by); None for older records."""
    for folder in inputs:
        for made in sorted(Path(folder).glob("**/runs/bench.json")):
            by = json.loads(made.read_text()).get("made_by")
            if by:
                return by
    return None
