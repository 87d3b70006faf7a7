"""Which rank failed first, and why: reports from the workers, exit statuses from their launcher.

A worker that raises writes its exception to ``<run dir>/failures/rank<NNNNN>.json``
first thing (:func:`report`).  A worker killed by a signal cannot write anything, so
the process that started the workers records how each one ended, in the file the
``DREAMDDP_EXITS`` environment variable names: ``python -m dreamddp.run.failures
TORCHRUN-ARGS`` is torchrun plus that file (its agent's per-rank exit codes and
signals), and the shaped-namespace launcher writes the same (dreamddp.netshape.spawn).

When the workers are gone the launcher turns both into one line for the run record
(:func:`root_cause`).  A dead peer makes the others fail too ("connection reset by
peer", or a collective that timed out), so the classes are ranked:

1. an exception of the worker's own (a bug, an injected fault, out of memory);
2. a collective that timed out (``cluster.timeout_s``): the ranks that never
   reported are the ones that stopped answering;
3. a rank killed by a signal ("rank 1: killed by SIGKILL");
4. a lost-peer error, then a bare non-zero exit status.

Within a class the earliest wins.  Reports carry the torchrun restart they belong
to, and only the last attempt counts.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Optional

from dreamddp.atomic import write_json
from dreamddp.procs import wake_terminated

SUBDIR = "failures"
EXITS_ENV = "DREAMDDP_EXITS"  # where a launcher writes its workers' exit statuses
EXITS_NAME = "exits.json"

_COMM = re.compile(r"gloo|nccl|c10d|ProcessGroup|DistBackendError|DistNetworkError|DistStoreError", re.I)
_TIMEOUT = re.compile(r"timed out|timeout", re.I)
_MAX_TEXT = 400


@dataclass(frozen=True)
class Failure:
    rank: int
    reason: str
    kind: str  # exception | hang | signal | peer | exit

    @property
    def message(self) -> str:
        return f"rank {self.rank}: {self.reason}"

    def as_dict(self) -> dict:
        return {"rank": self.rank, "reason": self.reason, "kind": self.kind}


def failures_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / SUBDIR


def exits_path(run_dir: str | os.PathLike) -> Path:
    return failures_dir(run_dir) / EXITS_NAME


def attempt(environ: Optional[Mapping[str, str]] = None) -> int:
    """This worker's torchrun restart (0 for the first start)."""
    env = os.environ if environ is None else environ
    return int(env.get("TORCHELASTIC_RESTART_COUNT") or 0)


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line, bounded."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


def classify(exc: BaseException) -> str:
    """own | timeout | peer: whether ``exc`` is the worker's own or the process group's."""
    names = {c.__name__ for c in type(exc).__mro__}
    text = f"{type(exc).__name__}: {exc}"
    if not (names & {"DistError", "DistBackendError", "DistNetworkError", "DistStoreError"} or _COMM.search(text)):
        return "own"
    return "timeout" if _TIMEOUT.search(text) else "peer"


def report(run_dir: str | os.PathLike, rank: int, exc: BaseException) -> None:
    """A worker's exception, on file before it exits (never raises: the original error matters more)."""
    try:
        write_json(failures_dir(run_dir) / f"rank{rank:05d}.json", {
            "rank": rank, "attempt": attempt(), "time": time.time(), "error": one_line(exc), "kind": classify(exc),
        })
    except OSError:
        pass


def write_exits(path: str | os.PathLike, attempt_no: int, exits: Iterable[tuple[int, int, float]]) -> None:
    """A launcher's record of the ranks that ended badly: (rank, exit code or -signal, time)."""
    rows = []
    for rank, code, when in exits:
        sig = None
        if code < 0:
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = f"signal {-code}"
        rows.append({"rank": int(rank), "exitcode": int(code), "signal": sig, "time": float(when)})
    write_json(path, {"attempt": int(attempt_no), "exits": rows})


def clear(run_dir: str | os.PathLike) -> None:
    """Forget reports of an earlier launch into the same run directory (a requeued job)."""
    d = failures_dir(run_dir)
    if d.is_dir():
        for p in d.iterdir():
            if p.suffix == ".json":
                p.unlink(missing_ok=True)


def _read(path: Path) -> Optional[dict]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def root_cause(run_dir: str | os.PathLike, world_size: int, timeout_s: float | None = None) -> Optional[Failure]:
    """The first failure of the last attempt, from the reports and the launcher's exits file."""
    d = failures_dir(run_dir)
    exits_data = _read(d / EXITS_NAME) or {}
    reports = [r for r in (_read(p) for p in sorted(d.glob("rank*.json"))) if r and "rank" in r] if d.is_dir() else []
    last = exits_data.get("attempt", max((r.get("attempt", 0) for r in reports), default=0))
    reports = sorted((r for r in reports if r.get("attempt", 0) == last), key=lambda r: r.get("time", 0.0))
    exits = sorted(exits_data.get("exits", []), key=lambda e: e.get("time", 0.0))
    reported = {r["rank"] for r in reports}

    own = [r for r in reports if r.get("kind") == "own"]
    if own:
        return Failure(own[0]["rank"], own[0]["error"], "exception")
    timeouts = [r for r in reports if r.get("kind") == "timeout"]
    if timeouts:
        first = timeouts[0]
        limit = f"cluster.timeout_s={timeout_s:g}" if timeout_s is not None else "the process-group timeout"
        silent = [r for r in range(world_size) if r not in reported]
        if silent:
            return Failure(silent[0], f"stopped answering (rank {first['rank']} waited {limit} in a collective: "
                                      f"{first['error']})", "hang")
        return Failure(first["rank"], f"collective timed out after {limit}: {first['error']}", "hang")
    signalled = [e for e in exits if e.get("signal") and e["rank"] not in reported]
    if signalled:
        return Failure(signalled[0]["rank"], f"killed by {signalled[0]['signal']}", "signal")
    peers = [r for r in reports if r.get("kind") == "peer"]
    if peers:
        return Failure(peers[0]["rank"], peers[0]["error"], "peer")
    exited = [e for e in exits if e.get("exitcode", 0) > 0 and e["rank"] not in reported]
    if exited:
        return Failure(exited[0]["rank"], f"exited with status {exited[0]['exitcode']}", "exit")
    return None


def torchrun(argv: list[str]) -> int:
    """torchrun with ``argv``; when workers fail, their exit codes and signals go to ``$DREAMDDP_EXITS``."""
    from torch.distributed import run as elastic_run
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    args = elastic_run.parse_args(argv)
    done = threading.Event()  # a frozen worker dies at torchrun's SIGTERM, not 30 s later at its SIGKILL
    threading.Thread(target=wake_terminated, args=(os.getpid(), done), daemon=True).start()
    try:
        elastic_run.run(args)
    except ChildFailedError as exc:
        path = os.environ.get(EXITS_ENV)
        if path:  # the failures of the last attempt: torchrun gives up once its restarts are spent
            write_exits(path, args.max_restarts, ((rank, f.exitcode, f.timestamp) for rank, f in exc.failures.items()))
        print(f"torchrun: workers failed\n{exc}", file=sys.stderr, flush=True)
        return 1
    except SignalException as exc:
        return 128 + int(exc.sigval)
    finally:
        done.set()
    return 0


if __name__ == "__main__":
    sys.exit(torchrun(sys.argv[1:]))
