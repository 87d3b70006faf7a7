"""What the benchmark runners share: one training job as a subprocess, and tables.

Each benchmark runs ``python -m dreamddp.cli`` jobs back to back on the same
machine and compares their run records; keeping the launch and the table
writing here means every runner measures and reports the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from dreamddp.atomic import write_csv, write_text


def run_training(run_dir: str, overrides: list[str], label: str = "") -> dict:
    """Run one job into ``run_dir`` (its log kept there); return its run record.

    Adds ``_dir``, ``_wall`` (seconds) and ``_peak_rss`` (bytes: the largest
    resident set of any process of the job, from ``wait4`` on the reaped tree).
    """
    run_dir = os.path.abspath(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    cmd = [sys.executable, "-m", "dreamddp.cli", *overrides, "train.progress=false", f"hydra.run.dir={run_dir}"]
    log_path = os.path.join(run_dir, "bench.log")
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        with open(log_path) as f:
            sys.stderr.write(f.read()[-4000:])
        raise SystemExit(f"bench: {label or ' '.join(overrides)} failed (exit {code}); log in {log_path}")
    with open(os.path.join(run_dir, "run.json")) as f:
        rec = json.load(f)
    rec.update(_dir=run_dir, _wall=time.perf_counter() - t0, _peak_rss=usage.ru_maxrss * 1024)  # Linux: KiB
    return rec


def write_tables(out_dir: str, stem: str, header: str, rows: list[dict]) -> None:
    """``<stem>.csv`` and ``<stem>.md`` (the header line above a Markdown table)."""
    cols = list(rows[0])
    write_csv(os.path.join(out_dir, f"{stem}.csv"), rows, cols)
    lines = [header, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(f"{r[c]:.4f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |" for r in rows]
    write_text(os.path.join(out_dir, f"{stem}.md"), "\n".join(lines) + "\n")
