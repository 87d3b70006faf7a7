"""``results/README.md`` (``dreamddp-results index --results results``): what each folder under results/
holds, and each report's heading and "Made by" command as read from the report itself."""

from __future__ import annotations

import re
from pathlib import Path

from dreamddp.reports.render import write_readme

_MADE_BY = re.compile(r"Made by `([^`]+)`")


def _report(readme: Path, root: Path) -> tuple[str, str, str | None]:
    """(path under root, title, the "Made by" command) of one report."""
    text = readme.read_text()
    title = next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")), readme.parent.name)
    made = _MADE_BY.search(text)
    return readme.relative_to(root).as_posix(), title, made.group(1) if made else None


def write_index(root: Path) -> Path:
    reports = [_report(p, root) for p in sorted(p for p in root.rglob("README.md") if p.parent != root)]
    folders = {p.name for p in root.iterdir() if p.is_dir()}
    return Path(write_readme(root, "index.md.j2", folders=folders, reports=reports))
