"""Reports' words live in jinja2 templates (templates/); Python hands them rows and numbers.

Every template extends ``_report.md.j2``: the title, the "Made by" line and, where a report mixes
code versions, the list of them (records.check_provenance)."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2

from dreamddp.atomic import write_text
from dreamddp.reports.spread import fmt_spread


def _fixed(value, digits: int = 2, none: str = "n/a") -> str:
    return none if value is None else f"{value:.{digits}f}"


def _pct(value, digits: int = 1, sign: bool = False) -> str:
    return "n/a" if value is None else f"{value:{'+' if sign else ''}.{digits}%}"


_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                          undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                          trim_blocks=True, lstrip_blocks=True, autoescape=False)
_ENV.filters.update(sp=fmt_spread, fixed=_fixed, pct=_pct, g=lambda v: f"{v:g}")


def render(template: str, **context) -> str:
    text = _ENV.get_template(template).render(**context)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip("\n") + "\n"  # one blank line between blocks


def write_readme(out: str | Path, template: str, **context) -> str:
    path = Path(out) / "README.md"
    write_text(str(path), render(template, **context))
    return str(path)


def table(header: list[str], rows: list[list[str]]) -> dict:
    """A markdown table for templates' ``md_table`` macro: columns whose every cell is n/a dropped."""
    keep = [i for i in range(len(header)) if not rows or any(r[i] not in ("n/a", "") for r in rows)]
    return {"header": [header[i] for i in keep], "rows": [[r[i] for i in keep] for r in rows]}
