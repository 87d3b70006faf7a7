"""The run record: one ``run.json`` per run, the only input of the results tools.

Rank 0 holds a ``RunRecord``.  The file is always complete JSON: every write goes
to a temporary file in the same directory, is fsync'ed, then atomically renamed
over ``run.json``, so a reader (or a crash) never sees half a record.  It is
written when the run starts (status "running"), at most every ``flush_seconds``
or ``flush_iterations`` while iterations arrive, and at the end ("completed",
"failed", or "preempted": stopped on request after a checkpoint, see
dreamddp.run.preempt).  The launcher marks a record failed when workers die without
doing so, naming the rank that failed first (dreamddp.run.failures).

A run that continues from a checkpoint of its own run directory (a torchrun
restart, a requeued SLURM job) keeps the record's rows before the checkpoint and
lists each restart under ``extra.restarts``, so the record reads as one run.
"""

from __future__ import annotations

import json
import os
import platform
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from dreamddp.atomic import write_json
from dreamddp.provenance import provenance

RECORD_NAME = "run.json"
# Compact: the per-iteration rows make the record the largest file a run writes, and
# indented it was a third larger (slower periodic flushes; and the committed records must
# travel to a lent GPU machine within 64 MiB).  `python -m json.tool run.json` indents it.
RECORD_INDENT = None
SCHEMA_VERSION = 1
STATUSES = ("running", "completed", "failed", "preempted")
# What the warm-up passes measured (the link's calibration, the start-up profile): a run resumed
# in its own directory keeps them in its record, since it reuses what they decided (checkpoint.SetUp)
WARMUP_FACTS = ("link_calibration", "profile")


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("torch", "transformers", "hydra-core", "omegaconf", "wandb", "dreamddp"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def _hardware() -> dict[str, Any]:
    cpu = platform.processor() or None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = None
    gpus: list[str] = []
    try:
        import torch

        if torch.cuda.is_available():
            gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        pass
    return {
        "hostname": platform.node(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_bytes": memory,
        "gpus": gpus,
    }


def load_record(path: str | os.PathLike) -> dict:
    """Read a run record; ``path`` may be the run directory or the run.json file."""
    p = Path(path)
    if p.is_dir():
        p = p / RECORD_NAME
    with open(p) as fh:
        return json.load(fh)


class RunRecord:
    """Accumulates one run's numbers on rank 0 and keeps run.json current."""

    def __init__(
        self,
        run_dir: str,
        cfg: DictConfig,
        flush_seconds: float = 10.0,
        flush_iterations: int = 100,
    ) -> None:
        self.path = Path(run_dir) / RECORD_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.flush_seconds = flush_seconds
        self.flush_iterations = flush_iterations
        self._last_flush = 0.0
        self._unflushed = 0
        made_by = dict(provenance())
        self.data: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "status": "running",
            "error": None,
            "start_time": time.time(),
            "end_time": None,
            "run_dir": str(Path(run_dir).resolve()),
            "config": OmegaConf.to_container(cfg, resolve=True),
            "git_sha": made_by["git_sha"],  # also at the top level, where older readers look
            "provenance": made_by,
            "versions": _versions(),
            "hardware": _hardware(),
            "iterations": [],
            "evals": [],
            "divergence": [],
            "extra": {},
            "summary": {},
        }
        self._continue_same_run(cfg)
        self.flush()

    def _continue_same_run(self, cfg: DictConfig) -> None:
        """Resuming from a checkpoint inside this run directory: keep what came before it."""
        resume = OmegaConf.select(cfg, "train.resume")
        if not resume:
            return
        ckpt = Path(resume).resolve()
        if self.path.parent.resolve() not in ckpt.parents:
            return  # another run's checkpoint: this is a new run with a record of its own
        try:
            previous = load_record(self.path)
            step = int(json.loads((ckpt / "meta.json").read_text())["step"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        before = lambda rows: [r for r in rows if r.get("iteration", step) < step]  # noqa: E731
        old_extra = previous.get("extra") or {}
        self.data.update(start_time=previous.get("start_time", self.data["start_time"]),
                         iterations=before(previous.get("iterations", [])), evals=before(previous.get("evals", [])),
                         divergence=before(previous.get("divergence", [])))
        self.data["extra"]["checkpoints"] = [c for c in old_extra.get("checkpoints", []) if c.get("step", 0) <= step]
        for key in WARMUP_FACTS:  # measured once at the run's start; a resume reuses, never re-measures, them
            if key in old_extra:
                self.data["extra"][key] = old_extra[key]
        self.data["extra"]["restarts"] = [*old_extra.get("restarts", []), {
            "step": step, "time": time.time(), "previous_status": previous.get("status"),
            "previous_error": previous.get("error")}]

    @property
    def status(self) -> str:
        return self.data["status"]

    def add_iteration(self, row: dict) -> None:
        """One iteration's timings/bytes/loss (+ any extra keys); flushed periodically."""
        if "iteration" not in row:
            raise ValueError("add_iteration: row needs an 'iteration' key")
        self.data["iterations"].append(dict(row))
        self._unflushed += 1
        due = time.monotonic() - self._last_flush >= self.flush_seconds
        if due or self._unflushed >= self.flush_iterations:
            self.flush()

    def add_eval(self, row: dict) -> None:
        self.data["evals"].append(dict(row))

    def add_divergence(self, row: dict) -> None:
        self.data["divergence"].append(dict(row))

    def add_checkpoint(self, row: dict) -> None:
        """A complete checkpoint, on file at once: it is what a resumed run starts from."""
        self.data["extra"].setdefault("checkpoints", []).append(dict(row))
        self.flush()

    def set(self, key: str, value: Any) -> None:
        """Store run-level facts (link, schedule, profile, predicted times) under extra."""
        self.data["extra"][key] = value

    def finish(self, summary: dict) -> None:
        self.data["summary"] = dict(summary)
        self._close("completed", None)

    def fail(self, message: str) -> None:
        self._close("failed", message)

    def preempt(self, message: str) -> None:
        """A checkpoint-and-stop request was served: the run is not over, nor failed."""
        self._close("preempted", message)

    def _close(self, status: str, error: str | None) -> None:
        self.data.update(status=status, error=error, end_time=time.time())
        self.flush()

    def flush(self) -> None:
        write_json(self.path, self.data, indent=RECORD_INDENT)
        self._last_flush = time.monotonic()
        self._unflushed = 0


def mark_failed(run_dir: str, cfg: DictConfig, message: str, failure: dict | None = None) -> bool:
    """Launcher side: make sure a run whose workers died ends as "failed".

    Returns True when it wrote something: a record still "running" is closed,
    a missing one is created (config, versions, hardware) so the failure is on file.
    With ``failure`` (the first failure across ranks, dreamddp.run.failures) a record
    rank 0 already closed as failed gets that error instead of rank 0's own view,
    which is kept as ``extra.failure.rank0_error``.
    """
    path = Path(run_dir) / RECORD_NAME
    try:
        data = load_record(path)
    except (OSError, json.JSONDecodeError):
        record = RunRecord(run_dir, cfg)
        if failure is not None:
            record.set("failure", dict(failure))
        record.fail(message)
        return True
    status = data.get("status")
    if status in ("completed", "preempted") or (status == "failed" and failure is None):
        return False
    if failure is not None:
        extra = data.setdefault("extra", {})
        extra["failure"] = {**failure, **({"rank0_error": data.get("error")} if status == "failed" else {})}
    data.update(status="failed", error=message, end_time=data.get("end_time") or time.time())
    write_json(path, data, indent=RECORD_INDENT)
    return True
