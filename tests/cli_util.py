"""How tests start dreamddp-run: the installed console script, as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RUN = [str(Path(sys.executable).with_name("dreamddp-run"))]
if not Path(RUN[0]).exists():  # not installed as a script: the module works the same
    RUN = [sys.executable, "-m", "dreamddp.cli"]


def dreamddp_run(args: list[str], cwd=None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(RUN + list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout)
