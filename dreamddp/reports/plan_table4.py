"""``runners/plan_table4.yaml``'s report: Streaming DiLoCo's Table 4 recomputed by the planner
(dreamddp/planner/table4.py) from the setup the paper states, beside its published values.  Its
input is that setup (dreamddp/planner/streaming_diloco_table4.yaml), not run records."""

from __future__ import annotations

from pathlib import Path


def write(out: str, *, title: str | None = None, made_by: str | None = None, mix: bool = False) -> list[str]:
    from dreamddp.planner.table4 import write_report

    write_report(out, made_by or "dreamddp-bench run runners/plan_table4.yaml")
    return [str(p) for p in sorted(Path(out).iterdir()) if p.is_file()]
