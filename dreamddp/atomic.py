"""Files that are always either the old or the new version, never half-written.

Every write goes to a temporary file in the same directory, is fsync'ed, then
renamed over the target (``os.replace`` is atomic on POSIX), so a reader, a
crash or a kill mid-write never sees a partial file.  Run records, checkpoint
markers, profiles, schedules and results tables (``write_csv``) all go through here.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path


def write_text(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | os.PathLike, data, indent: int | None = 1) -> None:
    """``data`` as JSON (non-JSON values via ``str``), atomically; ``indent=None``: compact."""
    separators = (",", ":") if indent is None else None
    write_text(path, json.dumps(data, indent=indent, separators=separators, default=str) + "\n")


def write_csv(path: str | os.PathLike, rows: list[dict], columns: list[str] | None = None) -> None:
    """``rows`` as CSV with a header (``columns``, default the first row's keys; a missing or
    None value is an empty cell), atomically."""
    columns = list(columns or rows[0])
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
    w.writeheader()
    w.writerows({k: ("" if r.get(k) is None else r[k]) for k in columns} for r in rows)
    write_text(path, buf.getvalue())
