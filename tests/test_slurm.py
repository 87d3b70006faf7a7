"""A real SLURM on this host (slurm/local/*.sh): sweeps through submitit, the sbatch template.

Each SLURM job is one task (hydra-submitit-launcher's default shape); inside
it dreamddp-run sees SLURM_NTASKS=1 and starts cluster.nproc workers with
torchrun.  A second cluster of two nodes (two slurmd on this host, one CPU
each, DREAMDDP_SLURM_NODES=2) runs the multi-node shapes: slurm/dreamddp.sbatch
with one torchrun agent per node, and slurm_gpu's one task per worker.  The
clusters are started for this module and always stopped.  Skipped, with the
reason, where not root or slurm-wlm cannot be installed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LOCAL = REPO / "slurm" / "local"


def _have_slurm() -> bool:
    return all(shutil.which(c, path=os.environ.get("PATH", "") + ":/usr/sbin") for c in ("slurmctld", "slurmd", "sbatch", "munged"))


def _local_cluster(tmp_path_factory, nodes: int, port: int):
    if os.geteuid() != 0:
        pytest.skip("a local SLURM needs root (slurmd runs job steps as the submitting user)")
    if not _have_slurm():
        p = subprocess.run([str(LOCAL / "install.sh")], capture_output=True, text=True, timeout=900)
        if p.returncode != 0 or not _have_slurm():
            pytest.skip(f"slurm-wlm could not be installed: {(p.stderr or p.stdout).strip()[-300:]}")
    if (os.cpu_count() or 1) < nodes:
        pytest.skip(f"{nodes} local SLURM nodes need a CPU each; this host has {os.cpu_count()}")
    state = tmp_path_factory.mktemp(f"slurm{nodes}")
    env = {**os.environ, "DREAMDDP_SLURM_DIR": str(state), "DREAMDDP_SLURM_PORT": str(port),
           "DREAMDDP_SLURM_NODES": str(nodes)}
    try:
        p = subprocess.run([str(LOCAL / "start.sh")], env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        yield {**env, "SLURM_CONF": str(state / "slurm.conf")}
    finally:
        subprocess.run([str(LOCAL / "stop.sh")], env=env, capture_output=True, text=True, timeout=120)


def _free_ports(first: int, count: int) -> int:
    """The first base port from ``first`` on with ``count`` free ports in a row (slurmctld, slurmd,
    one per node): another cluster on this host, e.g. a concurrent test run, keeps its own."""
    for base in range(first, first + 2000, count):
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("0.0.0.0", port))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no {count} free ports in a row from {first}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from _local_cluster(tmp_path_factory, 1, _free_ports(int(os.environ.get("DREAMDDP_SLURM_PORT", "6827")), 2))


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    first = int(os.environ.get("DREAMDDP_SLURM_PORT", "6827")) + 10
    yield from _local_cluster(tmp_path_factory, 2, _free_ports(first, 4))


def test_cluster_is_one_idle_node_with_this_hosts_cpus(cluster):
    out = subprocess.run(["sinfo", "-h", "-o", "%t %c"], env=cluster, capture_output=True, text=True, timeout=30)
    state, cpus = out.stdout.split()
    assert state == "idle" and int(cpus) == os.cpu_count()


@pytest.mark.slow
def test_submitit_sweep_of_two_runs_completes(cluster, tmp_path):
    sweep = tmp_path / "sweep"
    env = {**cluster, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    args = ["-m", "dreamddp.cli", "-m", "experiment=divergence_cpu", "hydra/launcher=submitit_slurm", "cluster=slurm",
            "cluster.nproc=2", "cluster.threads_per_worker=1", "model=resnet18", "algo=ssgd,flsgd",
            "bandwidth=ideal", "train.iterations=3", "data.eval_batches=1", f"hydra.sweep.dir={sweep}",
            "hydra.launcher.cpus_per_task=2", "hydra.launcher.timeout_min=10"]
    p = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=560)
    logs = "\n".join(f.read_text()[-1500:] for f in sweep.rglob(".submitit/*/*.err")) if sweep.exists() else ""
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:] + logs
    records = sorted(sweep.glob("*/run.json"))
    assert len(records) == 2, list(sweep.iterdir())
    for path in records:
        rec = json.loads(path.read_text())
        assert rec["status"] == "completed", (path, rec.get("error"))
        assert rec["config"]["cluster"]["name"] == "slurm" and rec["summary"]["workers"] == 2
    # each run was its own SLURM job: array tasks <id>_0 and <id>_1 (submitit's folder per job)
    jobs = [d for d in (sweep / ".submitit").iterdir() if d.is_dir() and "_" in d.name]
    assert len(jobs) == 2, jobs


def test_one_task_per_worker_shape(cluster, tmp_path):
    """slurm_gpu's default shape: cluster.nproc SLURM tasks, each one worker (srun identity, no torchrun)."""
    sweep = tmp_path / "sweep"
    env = {**cluster, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    args = ["-m", "dreamddp.cli", "-m", "experiment=divergence_cpu", "hydra/launcher=slurm_gpu", "cluster=slurm",
            "cluster.nproc=2", "cluster.threads_per_worker=1", "model=resnet18", "algo=flsgd", "bandwidth=ideal",
            "train.iterations=3", "data.eval_batches=1", f"hydra.sweep.dir={sweep}",
            "hydra.launcher.gpus_per_node=null", "hydra.launcher.timeout_min=10"]
    p = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=560)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    (record,) = sweep.glob("*/run.json")
    rec = json.loads(record.read_text())
    assert rec["status"] == "completed" and rec["summary"]["workers"] == 2
    logs = sorted(p.name for p in (sweep / ".submitit").rglob("*_log.out"))
    assert len(logs) == 2, logs  # one submitit log per SLURM task: two tasks, no torchrun inside


@pytest.mark.slow  # the submitit and two-node cases cover the launch in make test
def test_plain_sbatch_template_with_torchrun_rendezvous(cluster, tmp_path):
    """slurm/dreamddp.sbatch: torchrun per node, c10d rendezvous on the first host of the allocation."""
    env = {**cluster, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "GPUS_PER_NODE": "2",
           "PYTHON": sys.executable, "RUN_DIR": str(tmp_path / "run")}
    cmd = ["sbatch", "--wait", "--nodes=1", "--gpus-per-node=0", "--cpus-per-task=2", f"--output={tmp_path}/job.out",
           str(REPO / "slurm" / "dreamddp.sbatch"), "model=resnet18", "algo=flsgd", "train.iterations=3",
           "data.eval_batches=1", "train.progress=false"]
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    out = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    assert p.returncode == 0, p.stderr + out[-3000:]
    assert "rendezvous " in out
    rec = json.loads((tmp_path / "run" / "run.json").read_text())
    assert rec["status"] == "completed" and rec["summary"]["workers"] == 2


def _job_state(cluster, job: str) -> dict:
    out = subprocess.run(["scontrol", "show", "job", job], env=cluster, capture_output=True, text=True, timeout=30)
    return dict(item.split("=", 1) for item in out.stdout.split() if "=" in item)


@pytest.mark.slow
def test_preemption_signal_checkpoints_requeues_and_the_job_resumes(cluster, tmp_path):
    """slurm/dreamddp.sbatch: SIGUSR1 to the batch shell (what --signal=B:USR1@120 sends before the time
    limit) -> checkpoint, "preempted", scontrol requeue -> the same job runs again and resumes."""
    run_dir = tmp_path / "run"
    env = {**cluster, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "GPUS_PER_NODE": "2",
           "PYTHON": sys.executable, "RUN_DIR": str(run_dir)}
    cmd = ["sbatch", "--parsable", "--nodes=1", "--gpus-per-node=0", "--cpus-per-task=2",
           f"--output={tmp_path}/job.out", str(REPO / "slurm" / "dreamddp.sbatch"), "model=gpt2", "data=synthetic",
           "train.batch_size=2", "data.block_size=32", "train.iterations=16", "train.eval_every=0",
           "data.eval_batches=1", "train.progress=false", "bandwidth=1gbit", "bandwidth.gbps=0.05"]
    job = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60).stdout.strip()
    assert job.isdigit(), job
    log = lambda: (tmp_path / "job.out").read_text()[-3000:] if (tmp_path / "job.out").exists() else ""  # noqa: E731
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # training: the set-up is on record
        try:
            if "units" in json.loads((run_dir / "run.json").read_text())["extra"]:
                break
        except (OSError, ValueError):
            pass
        assert _job_state(cluster, job).get("JobState") in ("PENDING", "RUNNING"), log()
        time.sleep(0.3)
    subprocess.run(["scancel", "--signal=USR1", "--batch", job], env=cluster, check=True, timeout=30)
    deadline = time.monotonic() + 400  # a requeued job may start again 20 s later (slurm/local cred_expire)
    while _job_state(cluster, job).get("JobState") not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
        assert time.monotonic() < deadline, log()
        time.sleep(1)
    state = _job_state(cluster, job)
    assert state["JobState"] == "COMPLETED" and state["Restarts"] == "1", (state, log())
    assert "requeueing job" in (tmp_path / "job.out").read_text()  # the whole log: the second start follows it
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["status"] == "completed", rec["error"]
    assert [r["iteration"] for r in rec["iterations"]] == list(range(16))  # one run across the requeue
    (restart,) = rec["extra"]["restarts"]
    assert restart["previous_status"] == "preempted" and rec["extra"]["resumed_from"]["step"] == restart["step"]
    assert not (run_dir / "checkpoint-request").exists()


# ---- two nodes ---------------------------------------------------------------------------

SMALL = ["model=gpt2", "data=synthetic", "train.batch_size=2", "data.block_size=32", "train.eval_every=0",
         "data.eval_batches=1", "train.progress=false"]


def _wait_job(cluster, job: str, timeout: float, log) -> dict:
    """Poll scontrol (sbatch --wait polls with backoff, tens of seconds after the job ended)."""
    deadline = time.monotonic() + timeout
    while (state := _job_state(cluster, job)).get("JobState") not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
        assert time.monotonic() < deadline, (state, log())
        time.sleep(0.5)
    return state


def _sbatch_two_nodes(cluster, tmp_path, args: list[str], env: dict | None = None):
    run_dir = tmp_path / "run"
    env = {**cluster, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "GPUS_PER_NODE": "1",
           "PYTHON": sys.executable, "RUN_DIR": str(run_dir), **(env or {})}
    cmd = ["sbatch", "--parsable", "--nodes=2", "--gpus-per-node=0", "--cpus-per-task=1",
           f"--output={tmp_path}/job.out", str(REPO / "slurm" / "dreamddp.sbatch"), *SMALL, *args]
    job = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60).stdout.strip()
    assert job.isdigit(), job
    # The whole log: its first line (the script's summary) is asserted on, and a shutdown warning from
    # torchrun's rendezvous can push it out of any fixed-size tail.
    log = lambda: (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""  # noqa: E731
    state = _wait_job(cluster, job, 300, lambda: log()[-3000:])
    return state, log(), run_dir


def _check_two_nodes(rec: dict) -> None:
    extra = rec["extra"]
    assert extra["world_size"] == 2 and extra["nnodes"] == 2
    assert [(r["rank"], r["local_rank"], r["node"]) for r in extra["ranks"]] == [(0, 0, 0), (1, 0, 1)]


def test_two_node_cluster(two_nodes):
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t %c"], env=two_nodes, capture_output=True, text=True,
                         timeout=30)
    rows = [line.split() for line in out.stdout.splitlines()]
    assert len(rows) == 2 and all(state == "idle" and int(cpus) == os.cpu_count() // 2 for _, state, cpus in rows)


def test_sbatch_template_on_two_nodes(two_nodes, tmp_path):
    """slurm/dreamddp.sbatch --nodes=2: one torchrun agent per node (srun), c10d rendezvous at the first
    node's address (here its NodeAddr, 127.0.0.1: the local node names are not DNS names)."""
    state, log, run_dir = _sbatch_two_nodes(two_nodes, tmp_path, ["algo=plsgd_enp", "algo.H=2",
                                                                  "train.iterations=4"])
    assert state["JobState"] == "COMPLETED", (state, log[-3000:])
    assert "dreamddp: 2 nodes x 1 workers, rendezvous 127.0.0.1:" in log, log[-3000:]
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["status"] == "completed", rec["error"]
    assert rec["config"]["cluster"]["nnodes"] == 2 and rec["config"]["cluster"]["nproc"] == 1
    _check_two_nodes(rec)


@pytest.mark.slow  # three jobs on the test cluster; make test-all
def test_sbatch_closes_the_record_when_rank_0_dies(two_nodes, tmp_path):
    """Rank 0, which writes run.json, is SIGKILLed: srun ends the other node's task and the
    script marks the record failed instead of leaving it "running"."""
    state, log, run_dir = _sbatch_two_nodes(two_nodes, tmp_path, ["algo=ssgd", "train.iterations=50",
                                                                  "cluster.timeout_s=30"],
                                            env={"DREAMDDP_FAULT": "rank=0,iteration=2,kind=kill"})
    assert state["JobState"] == "FAILED", (state, log[-3000:])
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["status"] == "failed" and "without closing the run record" in rec["error"], rec["error"]
    assert "marked" in log and len(rec["iterations"]) < 50


@pytest.mark.slow  # the sbatch two-node case covers two nodes in make test
def test_one_task_per_worker_on_two_nodes(two_nodes, tmp_path):
    """slurm_gpu with cluster.nnodes=2 cluster.nproc=1: one SLURM task (= worker) per node, no torchrun;
    the master is the first node of the step, as SLURM addresses it."""
    sweep = tmp_path / "sweep"
    env = {**two_nodes, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    args = ["-m", "dreamddp.cli", "-m", "hydra/launcher=slurm_gpu", "cluster=slurm", "cluster.nnodes=2", "cluster.nproc=1",
            "cluster.threads_per_worker=1", *SMALL, "algo=ssgd", "train.iterations=3", f"hydra.sweep.dir={sweep}",
            "hydra.launcher.gpus_per_node=null", "hydra.launcher.timeout_min=10"]
    p = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    (record,) = sweep.glob("*/run.json")
    rec = json.loads(record.read_text())
    assert rec["status"] == "completed", rec["error"]
    _check_two_nodes(rec)
