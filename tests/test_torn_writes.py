"""A process killed while writing leaves the previous good file readable.

A writer in a subprocess rewrites one file in a loop (a run record, a
checkpoint worker file, a results table), each version large enough that a
write takes a while, and is SIGKILLed as soon as its next version is being
written.  The file must then hold one complete version; the kill must have
landed mid-write at least once (a temporary file left beside it), or the test
proved nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

WRITERS = {
    # name -> (loop body writing version ``v`` of the target, reader returning the version found)
    "run.json": (
        """
        from omegaconf import OmegaConf
        from dreamddp.run.record import RunRecord
        rec = RunRecord(str(target.parent), OmegaConf.create({"x": 1}), flush_seconds=1e9, flush_iterations=10**9)
        rows = [{"iteration": i, "loss": float(i), "pad": "x" * 200} for i in range(20000)]
        rec.data["iterations"] = rows
        while True:
            v += 1
            rec.data["extra"]["version"] = v
            rec.flush()
        """,
        lambda path: json.loads(path.read_text())["extra"].get("version", 0),  # 0: the record's first write
    ),
    "rank00000.pt": (
        """
        import torch
        from dreamddp.run.checkpoint import save
        big = torch.zeros(4_000_000)
        while True:
            v += 1
            big.fill_(v)
            save(str(target.parents[2]), 1, 0, {"v": v, "t": big}, {"world_size": 1}, keep=0)
        """,
        lambda path: _torch_version(path),
    ),
    "table.csv": (
        """
        from dreamddp.reports.tables import COLUMNS, write_csv
        while True:
            v += 1
            write_csv([{k: v for k in COLUMNS} for _ in range(20000)], target)
        """,
        lambda path: _csv_version(path),
    ),
}


def _torch_version(path: Path) -> int:
    import torch

    state = torch.load(path, weights_only=True)
    assert bool((state["t"] == state["v"]).all())
    return state["v"]


def _csv_version(path: Path) -> int:
    lines = path.read_text().splitlines()
    assert len(lines) == 20001 and lines[-1].count(",") == lines[0].count(",")
    values = {cell for line in lines[1:] for cell in line.split(",")}
    assert len(values) == 1
    return int(values.pop())


def _target(tmp_path: Path, name: str) -> Path:
    if name == "rank00000.pt":
        return tmp_path / "run" / "checkpoints" / "step-0000001" / name
    return tmp_path / "run" / name


def _leftovers(target: Path) -> list[str]:
    """The target's own temporary files (checkpoint.save: <name>.tmp; dreamddp.atomic: .<name>.*.tmp)."""
    return [p.name for p in target.parent.iterdir()
            if p.name.endswith(".tmp") and p.name.lstrip(".").startswith(target.name)]


@pytest.mark.parametrize("name", list(WRITERS))
def test_a_killed_writer_leaves_the_previous_file_whole(tmp_path, name):
    body, version = WRITERS[name]
    target = _target(tmp_path, name)
    script = f"from pathlib import Path\ntarget = Path({str(target)!r})\nv = 0\n" + textwrap.dedent(body)
    torn = 0
    for attempt in range(8):
        for p in _leftovers(target) if target.parent.is_dir() else []:
            (target.parent / p).unlink()
        proc = subprocess.Popen([sys.executable, "-c", script])
        try:
            deadline = time.monotonic() + 120
            while not target.exists() and time.monotonic() < deadline:  # a first version in place
                assert proc.poll() is None, "the writer died"
                time.sleep(0.05)
            while not _leftovers(target) and time.monotonic() < deadline:  # the next one being written
                pass
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        assert version(target) >= 0  # complete, whatever the moment of the kill
        torn += bool(_leftovers(target))
        if torn:
            break
    assert torn, "no kill landed mid-write"


def test_results_tools_skip_and_report_incomplete_records(tmp_path):
    from test_results import record

    done = record("ssgd", [1.0] * 3, [(2, 3.0)])
    for name, text in (("done", json.dumps(done)),
                       ("torn", json.dumps(record("flsgd", [1.0] * 3, [(2, 3.0)]))[:500]),
                       ("running", json.dumps(record("dreamddp", [1.0] * 3, [(2, 3.0)], status="running")))):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "run.json").write_text(text)
    p = subprocess.run([sys.executable, "-m", "dreamddp.reports", "tables", "--runs", str(tmp_path / "runs"),
                        "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "WANDB_MODE": "disabled"})
    assert p.returncode == 0, p.stderr
    skipped = sorted(line for line in p.stderr.splitlines() if line.startswith("skipped "))
    assert len(skipped) == 2, p.stderr
    assert "running/run.json: status running" in skipped[0]
    assert "torn/run.json: not complete JSON" in skipped[1]
    table = (tmp_path / "out" / "tables" / "convergence_cpu.csv").read_text()
    assert "ssgd" in table and "flsgd" not in table and "dreamddp" not in table
