"""When a worker dies, hangs or is preempted: the job ends cleanly, says who and why, and goes on by itself.

End to end through dreamddp-run with a fault injected into one worker
(DREAMDDP_FAULT, dreamddp/faults.py): raised, SIGKILLed or SIGSTOPped, mid-run
under each link backend and during DreamDDP's start-up profiling.  Each job must
end within 60 s of the fault with a non-zero status, a run record "failed" that
names the rank and the reason, and nothing left running (no worker, no tc
namespace).  Then: torchrun restarts resume from the newest checkpoint and end
bitwise where an uninterrupted run ends, and SIGUSR1 to dreamddp-run checkpoints,
stops ("preempted", exit 75).  Plus the pieces:
the root-cause ranking, the fault grammar, orphans and frozen processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from cli_util import RUN, processes_mentioning
from dreamddp import faults, procs
from dreamddp.run import failures
from dreamddp.run.checkpoint import step_dir
from test_netshape import _tc_skip_reason

SMALL = ["model=gpt2", "data=synthetic", "train.batch_size=2", "data.block_size=32", "train.progress=false",
         "train.eval_every=0", "data.eval_batches=1", "cluster.nproc=2"]
PROFILE = ["algo=dreamddp", "algo.H=2", "warmup.profile_iterations=3"]


class Job:
    """dreamddp-run in a subprocess, its output read as it comes (to time the fault)."""

    def __init__(self, run_dir: Path, args: list[str], env: dict | None = None):
        self.run_dir, self.lines, self.fired = run_dir, [], None
        self.proc = subprocess.Popen([*RUN, *args, f"hydra.run.dir={run_dir}"], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})})
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if self.fired is None and line.startswith(f"{faults.ENV}: "):
                self.fired = time.monotonic()
            self.lines.append(line)

    def wait(self, timeout: float = 400) -> int:
        rc = self.proc.wait(timeout=timeout)
        self.ended = time.monotonic()
        self._reader.join(timeout=10)
        (self.run_dir.parent / f"{self.run_dir.name}.log").write_text("".join(self.lines))
        return rc

    @property
    def output(self) -> str:
        return "".join(self.lines)[-4000:]

    def record(self) -> dict:
        return json.loads((self.run_dir / "run.json").read_text())


def _nothing_left(run_dir: Path, launcher_pid: int) -> None:
    deadline = time.monotonic() + 15  # a killed process may linger a moment as a zombie on a loaded box
    while processes_mentioning(str(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(str(run_dir)) == []
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"-{launcher_pid}-" not in namespaces


# --- a worker dies or hangs: the job ends, says who and why, leaves nothing --------
FAULTS = [  # (id, overrides, DREAMDDP_FAULT, failed rank, reason)
    ("ideal-raise", ["bandwidth=ideal"], "rank=1,iteration=3,kind=raise", 1,
     "RuntimeError: injected fault (DREAMDDP_FAULT) at iteration 3"),
    ("emulated-kill", ["bandwidth=1gbit"], "rank=1,iteration=3,kind=kill", 1, "killed by SIGKILL"),
    ("profiling-kill", [*PROFILE, "bandwidth=1gbit"], "rank=1,forward=4,kind=kill", 1, "killed by SIGKILL"),
    ("profiling-raise-rank0", [*PROFILE, "bandwidth=ideal"], "rank=0,forward=3,kind=raise", 0,
     "RuntimeError: injected fault (DREAMDDP_FAULT) at forward pass 3"),
    ("tc-kill", ["bandwidth=tc_1gbit"], "rank=1,iteration=3,kind=kill", 1, "killed by SIGKILL"),
    ("tc-raise", ["bandwidth=tc_1gbit"], "rank=0,iteration=2,kind=raise", 0,
     "RuntimeError: injected fault (DREAMDDP_FAULT) at iteration 2"),
    ("stopped-peer-times-out", ["bandwidth=ideal", "cluster.timeout_s=8"], "rank=1,iteration=3,kind=stop", 1,
     "stopped answering (rank 0 waited cluster.timeout_s=8 in a collective"),
]

# make test keeps one case of each way to fail (raise, kill, stop) and of each link; make test-all all.
SLOW_FAULTS = {"profiling-raise-rank0", "tc-raise"}


def _marks(fault_id: str) -> list:
    return ([pytest.mark.tc] if fault_id.startswith("tc-") else []) + \
        ([pytest.mark.slow] if fault_id in SLOW_FAULTS else [])


@pytest.mark.parametrize("overrides,fault,rank,reason",
                         [pytest.param(*f[1:], marks=_marks(f[0])) for f in FAULTS],
                         ids=[f[0] for f in FAULTS])
def test_a_failed_worker_ends_the_job_with_its_rank_and_reason(tmp_path, overrides, fault, rank, reason):
    if any(o.startswith("bandwidth=tc") for o in overrides) and _tc_skip_reason():
        pytest.skip(_tc_skip_reason())
    run_dir = tmp_path / "run"
    job = Job(run_dir, [*SMALL, "train.iterations=40", *overrides], {faults.ENV: fault})
    rc = job.wait()
    assert rc != 0, job.output
    assert job.fired is not None, job.output
    assert job.ended - job.fired < 60, f"the job took {job.ended - job.fired:.0f} s to end after the fault"
    record = job.record()
    assert record["status"] == "failed"
    assert record["error"].startswith(f"rank {rank}: {reason}"), record["error"]
    assert record["extra"]["failure"]["rank"] == rank
    if "forward=" in fault:  # during the start-up profile: no schedule yet, no training iteration
        assert record["iterations"] == [] and "schedule" not in record["extra"]
    assert f"workers failed: rank {rank}: " in job.output
    _nothing_left(run_dir, job.proc.pid)


# --- torchrun restarts: resume from the newest checkpoint, bitwise --------------
def _training_state(path: Path) -> dict:
    """A worker file without ``setup``: what warm-up measured (link timings) differs between any two runs."""
    state = torch.load(path, weights_only=True)
    state.pop("setup")
    return state


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


def test_restarted_workers_resume_and_end_bitwise_where_an_uninterrupted_run_does(tmp_path):
    args = [*SMALL, "algo=flsgd", "algo.H=2", "train.iterations=6", "train.checkpoint_every=3"]
    reference = Job(tmp_path / "a", args)
    assert reference.wait() == 0, reference.output
    job = Job(tmp_path / "b", [*args, "cluster.max_restarts=1"], {faults.ENV: "rank=1,iteration=4,kind=kill"})
    assert job.wait() == 0, job.output
    assert job.fired is not None
    record = job.record()
    assert record["status"] == "completed", record["error"]
    assert [r["iteration"] for r in record["iterations"]] == list(range(6))  # one run, no gap, no repeat
    (restart,) = record["extra"]["restarts"]
    assert restart["step"] == 3 and record["extra"]["resumed_from"]["step"] == 3
    for rank in (0, 1):
        name = f"rank{rank:05d}.pt"
        assert _same(_training_state(step_dir(tmp_path / "a", 6) / name),
                     _training_state(step_dir(tmp_path / "b", 6) / name)), f"rank {rank} differs"
    _nothing_left(tmp_path / "b", job.proc.pid)


@pytest.mark.slow  # the restart-and-resume case above covers the restart path
def test_a_worker_lost_after_the_last_checkpoint_is_restarted_to_finish_the_run(tmp_path):
    """Killed after the final checkpoint (in the run's summary), the restarted workers find a
    checkpoint at train.iterations: nothing is left to train, and they finish the run from it
    instead of failing every restart on "nothing left"."""
    args = [*SMALL, "algo=flsgd", "algo.H=2", "train.iterations=6", "train.checkpoint_every=3",
            "cluster.max_restarts=1"]
    job = Job(tmp_path / "b", args, {faults.ENV: "rank=1,finish=1,kind=kill"})
    assert job.wait() == 0, job.output
    assert job.fired is not None
    record = job.record()
    assert record["status"] == "completed", record["error"]
    assert [r["iteration"] for r in record["iterations"]] == list(range(6))
    (restart,) = record["extra"]["restarts"]
    assert restart["step"] == 6 and record["extra"]["resumed_from"]["step"] == 6
    _nothing_left(tmp_path / "b", job.proc.pid)


# --- preemption: SIGUSR1 -> checkpoint, stop, exit 75 --------------------------------
def test_sigusr1_checkpoints_and_stops(tmp_path):
    run_dir = tmp_path / "run"
    args = [*SMALL, "train.iterations=12", "bandwidth=1gbit", "bandwidth.gbps=0.05", "cluster.preemptible=true"]
    job = Job(run_dir, args)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # training has started once the set-up is on record
        try:
            if "units" in job.record()["extra"]:
                break
        except (OSError, ValueError):
            pass
        assert job.proc.poll() is None, job.output
        time.sleep(0.2)
    job.proc.send_signal(signal.SIGUSR1)
    assert job.wait() == 75, job.output
    record = job.record()
    assert record["status"] == "preempted", record["error"]
    step = record["extra"]["checkpoints"][-1]["step"]
    assert step < 12 and (step_dir(run_dir, step) / "meta.json").is_file()
    assert not (run_dir / "checkpoint-request").exists()
    _nothing_left(run_dir, job.proc.pid)  # continuing it: test_slurm.py (a requeued job) and the restart test


# --- the pieces -----------------------------------------------------------------
def _report(d: Path, rank: int, error: str, kind: str, when: float, attempt: int = 0) -> None:
    (d / "failures").mkdir(parents=True, exist_ok=True)
    (d / "failures" / f"rank{rank:05d}.json").write_text(json.dumps(
        {"rank": rank, "attempt": attempt, "time": when, "error": error, "kind": kind}))


def test_root_cause_ranks_own_errors_then_hangs_then_signals_then_lost_peers(tmp_path):
    assert failures.root_cause(tmp_path, 2) is None
    _report(tmp_path, 0, "RuntimeError: [gloo] Connection reset by peer", "peer", 10.0)
    assert failures.root_cause(tmp_path, 2).message == "rank 0: RuntimeError: [gloo] Connection reset by peer"
    failures.write_exits(failures.exits_path(tmp_path), 0, [(1, -9, 11.0), (0, 1, 11.0)])
    assert failures.root_cause(tmp_path, 2).message == "rank 1: killed by SIGKILL"  # the cause, not the symptom
    _report(tmp_path, 1, "ValueError: bad batch", "own", 12.0)
    cause = failures.root_cause(tmp_path, 2)
    assert (cause.rank, cause.reason, cause.kind) == (1, "ValueError: bad batch", "exception")
    hang = tmp_path / "hang"
    _report(hang, 0, "RuntimeError: Timed out waiting 8000ms for recv", "timeout", 10.0)
    assert failures.root_cause(hang, 3, 8.0).message.startswith(
        "rank 1: stopped answering (rank 0 waited cluster.timeout_s=8 in a collective")
    stale = tmp_path / "restart"  # only the last attempt counts
    _report(stale, 1, "RuntimeError: first attempt", "own", 1.0, attempt=0)
    failures.write_exits(failures.exits_path(stale), 1, [(0, 1, 5.0)])
    assert failures.root_cause(stale, 2).message == "rank 0: exited with status 1"


def test_classify_and_one_line():
    assert failures.classify(RuntimeError("injected fault")) == "own"
    assert failures.classify(RuntimeError("[gloo/transport/tcp/pair.cc:537] Connection reset by peer")) == "peer"
    assert failures.classify(RuntimeError("[gloo/unbound_buffer.cc:78] Timed out waiting 10ms for recv")) == "timeout"
    assert failures.one_line(ValueError("a\n  b")) == "ValueError: a b"
    assert len(failures.one_line(RuntimeError("x" * 5000))) <= 400


@pytest.mark.parametrize("text,match", [
    ("rank=1,iteration=3,kind=boom", "kind must be one of raise, kill, stop"),
    ("rank=1,kind=raise", "give exactly one of iteration=, forward= and finish=1"),
    ("rank=1,iteration=3,finish=1", "give exactly one of iteration=, forward= and finish=1"),
    ("rank=x,iteration=3", "are integers"),
    ("rank=1,when=3", "bad item 'when=3'"),
])
def test_fault_grammar_is_refused_in_one_line(text, match):
    with pytest.raises(ValueError, match=match):
        faults.parse(text)


def test_fault_fires_only_on_its_rank_and_attempt():
    env = {faults.ENV: "rank=1,iteration=4,kind=kill,attempt=1"}
    assert faults.planned(0, env) is None and faults.planned(1, env) is None
    assert faults.planned(1, {**env, "TORCHELASTIC_RESTART_COUNT": "1"}).iteration == 4
    model = torch.nn.Linear(2, 2)
    os.environ[faults.ENV] = "rank=0,forward=2,kind=raise"
    try:
        faults.arm_forward(model, 0)
        model(torch.zeros(1, 2))
        with pytest.raises(RuntimeError, match="injected fault .* at forward pass 2"):
            model(torch.zeros(1, 2))
        model(torch.zeros(1, 2))  # fired once, then gone
    finally:
        del os.environ[faults.ENV]


def test_no_leftovers_kills_orphans_and_spares_older_children():
    marker = f"dreamddp-orphan-{os.getpid()}-{time.time_ns()}"
    older = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    orphaner = textwrap.dedent(f"""
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "{marker}"], start_new_session=True)
    """)  # the parent exits at once: its child is an orphan in a session of its own
    try:
        with procs.no_leftovers(grace_s=0.5):
            subprocess.run([sys.executable, "-c", orphaner], check=True, timeout=60)
            assert processes_mentioning(marker)
        assert processes_mentioning(marker) == []
        assert older.poll() is None
    finally:
        older.kill()
        older.wait()


def test_a_frozen_process_dies_at_sigterm_when_woken():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    done = threading.Event()
    waker = threading.Thread(target=procs.wake_terminated, args=(os.getpid(), done, 0.1), daemon=True)
    waker.start()
    try:
        time.sleep(0.5)
        proc.send_signal(signal.SIGSTOP)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)  # pending: a stopped process acts on nothing but KILL and CONT
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        done.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
