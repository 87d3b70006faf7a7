"""Reports' words live in jinja2 templates (templates/); Python hands them rows and numbers.
Every template extends ``_report.md.j2``: the title, the "Made by" line, the code versions mixed."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2

from dreamddp.atomic import write_text
from dreamddp.reports.spread import fmt_spread


def _fixed(value, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                          undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                          trim_blocks=True, lstrip_blocks=True, autoescape=False)
_ENV.filters.update(sp=fmt_spread, fixed=_fixed, g=lambda v: f"{v:g}",
                    pct=lambda v, digits=1, sign=False: "n/a" if v is None else f"{v:{'+' if sign else ''}.{digits}%}")


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


def spread_table(rows: list[dict], columns: list[tuple], collapse: bool = False) -> dict:
    """``table`` of ``rows`` by (header, key, digits) columns: a spread or a number at ``digits``
    (n/a where None; ``collapse``: fmt_spread's), the value as it is where digits is None."""
    def cell(value, digits):
        if digits is None:
            return str(value)
        return fmt_spread(value, digits, collapse) if isinstance(value, tuple) else _fixed(value, digits)
    return table([c[0] for c in columns], [[cell(r[key], digits) for _, key, digits in columns] for r in rows])
