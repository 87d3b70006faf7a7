"""Reports: run records -> the result card, tables, figures and every README under results/.
``write_report`` is the one entry point other code calls; records.py is the typed reader (the one
place a record's keys are read), templates/ hold the words."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

KINDS = ("bench", "tc", "sweep", "methods_card", "accuracy", "accuracy_tc", "gpu", "plan_table4")
NO_RECORDS = ("plan_table4",)  # kinds made from no run records: their inputs are not read


def write_report(kind: str, out: str, inputs: list[str], *, claims: dict[str, str] | None = None,
                 title: str | None = None, made_by: str | None = None, mix: bool = False) -> list[str]:
    """Write the report of ``kind`` from the records under ``inputs`` into ``out``; returns the
    paths written.  Records of different code in one report are refused unless ``mix``
    (versions.check_provenance); ``made_by`` replaces the report's "Made by" command."""
    if kind not in KINDS:
        raise ValueError(f"report kind {kind!r}: choose from {', '.join(KINDS)}")
    if kind in NO_RECORDS:
        return import_module(f"dreamddp.reports.{kind}").write(out, title=title, made_by=made_by, mix=mix)
    need = {"methods_card": 2, "gpu": 2}.get(kind, 1)
    if len(inputs) < need or (kind not in ("accuracy", "accuracy_tc") and len(inputs) != need):
        raise ValueError(f"report {kind}: inputs takes {need} folder{'s' if need > 1 else ''}, got {len(inputs)}")
    for d in inputs:
        if not Path(d).is_dir():
            raise FileNotFoundError(f"report {kind}: input {d}: no such folder")
    opts = {"title": title, "made_by": made_by, "mix": mix}
    # imported here: only the asked kind's writer (and its plotting) loads
    writer = import_module(f"dreamddp.reports.{'methods' if kind == 'methods_card' else kind}")
    if kind == "bench":
        writer.write(str(Path(inputs[0]) / "runs"), out, title=title, made_by_line=made_by, mix=mix)
        made = [Path(out) / name for name in ("README.md", "bench.csv", "loss_vs_time.png")]
        return [str(p) for p in made if p.is_file()]
    if kind == "tc":
        return writer.write_all(inputs[0], out, **opts)
    if kind == "sweep":
        return writer.write(inputs[0], out, **opts)
    if kind == "methods_card":
        return writer.write(inputs[0], inputs[1], out, claims=claims or {}, **opts)
    if kind in ("accuracy", "accuracy_tc"):
        return writer.write(inputs, out, **opts)
    return writer.write(Path(inputs[0]), Path(inputs[1]), **opts)
