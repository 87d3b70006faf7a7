"""``results/README.md``: what each folder under results/ holds and the command that makes it.

    dreamddp-results index --results results      # part of make reports

Every report's heading and "Made by" command are read from the report itself, so the
index says what was run, not what someone remembers running.
"""

from __future__ import annotations

import re
from pathlib import Path

from dreamddp.reports.render import write_readme

# The folders a results tree holds (docs/benchmark.md), what each is, and the make target behind it.
FOLDERS = {
    "bench": ("algorithms side by side (iteration time, bounds, predictions, memory)", "make bench, bench-large, bench-skew"),
    "simulator": ("the simulator's predicted iteration time against the measured one", "make simulator-accuracy"),
    "gpu": ("the benchmark on lent GPUs, one folder per device kind", "make gpu on the device, then make gpu-reports"),
    "runs": ("compact run records of the CPU studies, the input of tables/ and figures/", "make paper-cpu"),
    "tables": ("speedup tables (CSV and Markdown) from runs/", "make figures"),
    "figures": ("the paper's figures from runs/", "make figures"),
    "scheduler": ("the scheduler against the exact optimum: on the authors' profile, and on ours (measured/)",
                  "make scheduler-reference, make figures"),
}
_MADE_BY = re.compile(r"Made by `([^`]+)`")


def _report(readme: Path, root: Path) -> tuple[str, str, str | None]:
    """(path under root, title, the "Made by" command) of one report."""
    text = readme.read_text()
    title = next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")), readme.parent.name)
    made = _MADE_BY.search(text)
    return readme.relative_to(root).as_posix(), title, made.group(1) if made else None


def write_index(root: Path) -> Path:
    folders = [(name, what, how) for name, (what, how) in FOLDERS.items() if (root / name).is_dir()]
    reports = [_report(p, root) for p in sorted(p for p in root.rglob("README.md") if p.parent != root)]
    return Path(write_readme(root, "index.md.j2", folders=folders, reports=reports))
