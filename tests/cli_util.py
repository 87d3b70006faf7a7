"""How tests start dreamddp-run: the installed console script, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

RUN = [str(Path(sys.executable).with_name("dreamddp-run"))]
if not Path(RUN[0]).exists():  # not installed as a script: the module works the same
    RUN = [sys.executable, "-m", "dreamddp.cli"]


def dreamddp_run(args: list[str], cwd=None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(RUN + list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout)


def train_completed(run_dir: Path, args: list[str], timeout: float = 300) -> dict:
    """Run a job into ``run_dir`` that must complete; its output is kept beside
    it (``<run_dir>.log``) for a failure's cause.  Returns the run record."""
    proc = dreamddp_run([*args, f"hydra.run.dir={run_dir}"], timeout=timeout)
    (run_dir.parent / f"{run_dir.name}.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "completed", record["error"]
    return record


def processes_mentioning(text: str) -> list[int]:
    """Live processes (other than this one) whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found
