"""Reports: run records -> the result card, tables, figures and every README under results/.

``write_report`` is the one entry point other code calls; records.py is the typed reader (the
one place a record's keys are read), templates/ hold the words.  Old modules: results/ (cli =
``dreamddp-results``) and the report writers of bench/ live here now.
"""

from __future__ import annotations

from pathlib import Path

KINDS = ("bench", "tc", "sweep", "methods_card", "accuracy", "accuracy_tc", "gpu")


def write_report(kind: str, out: str, inputs: list[str], *, claims: dict[str, str] | None = None,
                 title: str | None = None, made_by: str | None = None, mix: bool = False) -> list[str]:
    """Write the report of ``kind`` from the records under ``inputs`` into ``out``; returns the
    paths written.  Records of different code in one report are refused unless ``mix``
    (records.check_provenance); ``made_by`` replaces the report's "Made by" command."""
    if kind not in KINDS:
        raise ValueError(f"report kind {kind!r}: choose from {', '.join(KINDS)}")
    need = {"methods_card": 2, "gpu": 2}.get(kind, 1)
    if len(inputs) < need or (kind not in ("accuracy",) and len(inputs) != need):
        raise ValueError(f"report {kind}: inputs takes {need} folder{'s' if need > 1 else ''}, got {len(inputs)}")
    for d in inputs:
        if not Path(d).is_dir():
            raise FileNotFoundError(f"report {kind}: input {d}: no such folder")
    opts = {"title": title, "made_by": made_by, "mix": mix}
    if kind == "bench":
        from dreamddp.reports import bench

        runs = str(Path(inputs[0]) / "runs")
        bench.write(runs, out, title=title, made_by_line=made_by, mix=mix)
        return [str(Path(out) / name) for name in ("README.md", "bench.csv", "loss_vs_time.png") if (Path(out) / name).is_file()]
    if kind == "tc":
        from dreamddp.reports import tc

        return tc.write_all(inputs[0], out, **opts)
    if kind == "sweep":
        from dreamddp.reports import sweep

        return sweep.write(inputs[0], out, **opts)
    if kind == "methods_card":
        from dreamddp.reports import methods

        return methods.write(inputs[0], inputs[1], out, claims=claims or {}, **opts)
    if kind == "accuracy":
        from dreamddp.reports import accuracy

        return accuracy.write(inputs, out, **opts)
    if kind == "accuracy_tc":
        from dreamddp.reports import accuracy_tc

        return accuracy_tc.write(inputs[0], out, **opts)
    from dreamddp.reports import gpu

    return gpu.write(Path(inputs[0]), Path(inputs[1]), **opts)
