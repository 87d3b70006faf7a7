"""dreamddp-run as a user meets it (subprocesses), plus the launcher's pieces in-process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from omegaconf import OmegaConf

from cli_util import dreamddp_run, processes_mentioning
from dreamddp.run import launch
from dreamddp.cli import check_group_options, worker_argv
from dreamddp.config import conf_dir

def _run(args, cwd, timeout=120):
    return dreamddp_run(args, cwd, timeout)


def test_help_lists_groups(tmp_path):
    out = _run(["--help"], tmp_path)
    assert out.returncode == 0, out.stderr
    from dreamddp.algorithms import ALGORITHMS

    assert "algo: " + ", ".join(sorted(ALGORITHMS)) in out.stdout
    assert "schema/algo: " + ", ".join(sorted(ALGORITHMS)) in out.stdout  # each one's typed options
    assert not (tmp_path / "outputs").exists()


def test_cfg_job_prints_without_launching(tmp_path):
    out = _run(["--cfg", "job", "model=resnet18", "algo=flsgd"], tmp_path)
    assert out.returncode == 0, out.stderr
    cfg = OmegaConf.create(out.stdout)
    assert (cfg.model.name, cfg.algo.name, cfg.data.name) == ("resnet18", "flsgd", "fashion_mnist")
    assert not (tmp_path / "outputs").exists()


BAD = [
    (["algo=nope"], "error: algo=nope: unknown option; choose from"),
    (["model.size=huge"], "error: model.size=huge: unknown size"),
    (["cluster.nproc=0"], "error: cluster.nproc=0: must be >= 1"),
    (["model=resnet18", "data=cifar10"], "error: data=cifar10:"),
]


@pytest.mark.parametrize("args,line", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_starts_nothing(tmp_path, compose_cfg, args, line):
    if "data=cifar10" in args:
        from dreamddp.data import check_available

        try:
            check_available("cifar10", compose_cfg(args).data.root)
        except ValueError:
            pass
        else:
            pytest.skip("CIFAR-10 is available here")
    run_dir = tmp_path / "run"
    out = _run(args + [f"hydra.run.dir={run_dir}"], tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(line), out.stderr
    assert not run_dir.exists()  # no run directory, so no run.json
    assert processes_mentioning(str(run_dir)) == []


def _gpt2_unit_names() -> list[str]:
    import torch

    from dreamddp.models import build_model, model_units

    with torch.device("meta"):
        return [u.name for u in model_units(build_model("gpt2", "tiny"))]


SCHEDULE_FILES = [  # (file text from the tiny GPT-2's unit names, expected line)
    (lambda units: "{not json", "not a schedule file"),
    (lambda units: json.dumps({"H": 2, "schedule": {**{u: 0 for u in units}, "transformer.nope": 1}}),
     "unknown unit 'transformer.nope'"),
    (lambda units: json.dumps({"H": 2, "schedule": {u: 0 for u in units[1:]}}), "missing from the schedule"),
    (lambda units: json.dumps({"H": 2, "schedule": {**{u: 0 for u in units}, units[0]: [1, 2]}}),
     "assigned to iteration 2, outside [0, 2)"),
    (lambda units: json.dumps({"H": 3, "schedule": {u: 0 for u in units}}), "the schedule's H=3 is not algo.H=2"),
]


@pytest.mark.parametrize("make,message", SCHEDULE_FILES, ids=["json", "unknown", "missing", "range", "H"])
def test_bad_schedule_file_is_one_line_naming_the_field(tmp_path, compose_cfg, make, message):
    from dreamddp.config import ConfigError, validate

    path = tmp_path / "schedule.json"
    path.write_text(make(_gpt2_unit_names()))
    with pytest.raises(ConfigError) as info:
        validate(compose_cfg(["algo=dreamddp", "algo.H=2", f"algo.schedule={path}"]))
    text = str(info.value)
    assert text.startswith(f"algo.schedule={path}: ") and message in text and "\n" not in text


def test_bad_schedule_file_starts_nothing(tmp_path):
    path = tmp_path / "schedule.json"
    path.write_text(SCHEDULE_FILES[1][0](_gpt2_unit_names()))
    run_dir = tmp_path / "run"
    out = _run(["algo=dreamddp", "algo.H=2", f"algo.schedule={path}", f"hydra.run.dir={run_dir}"], tmp_path)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: algo.schedule={path}: unknown unit"), out.stderr
    assert not run_dir.exists() and processes_mentioning(str(run_dir)) == []


def test_group_option_check_covers_sweeps(capsys):
    check_group_options(["algo=ssgd", "model=gpt2", "train.lr=0.1", "--cfg", "job"], conf_dir())
    with pytest.raises(SystemExit) as info:
        check_group_options(["-m", "algo=ssgd,nope"], conf_dir())
    assert info.value.code == 2
    assert capsys.readouterr().err.startswith("error: algo=nope: unknown option")


def test_worker_argv_repeats_the_job(compose_cfg):
    cfg = compose_cfg(["algo=flsgd", "train.lr=0.5", "hydra.verbose=true"], hydra=True)
    argv = worker_argv(cfg.hydra)
    assert argv[-2:] == ["algo=flsgd", "train.lr=0.5"]
    assert "hydra.verbose=true" in argv
    assert not any(a.startswith("hydra.run.") for a in argv)


def test_torchrun_command(compose_cfg):
    cfg = compose_cfg(["cluster.nproc=3"])
    cmd = launch.torchrun_command(cfg, "/tmp/a b", ["algo=ssgd"], 12345)
    assert cmd[1:3] == ["-m", "dreamddp.run.failures"]  # torchrun, plus a file of how each rank ended
    assert cmd[cmd.index("--nproc-per-node") + 1] == "3"
    assert cmd[cmd.index("--rdzv-endpoint") + 1] == "127.0.0.1:12345"
    assert cmd[cmd.index("--max-restarts") + 1] == "0"
    assert cmd[-4:] == ["-m", "dreamddp.cli", "algo=ssgd", "hydra.run.dir='/tmp/a b'"]
    env = launch.worker_environment(cfg, {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"})
    assert env["OMP_NUM_THREADS"] == "1" and env["HF_HUB_OFFLINE"] == "1" and env["WANDB_MODE"] == "offline"


def test_launcher_marks_dead_workers_failed(compose_cfg, tmp_path, monkeypatch):
    cfg = compose_cfg(["data=synthetic"])
    monkeypatch.setattr(launch, "_launch_torchrun", lambda *a: 0)  # "workers" that wrote nothing
    assert launch.launch_workers(cfg, str(tmp_path), []) == 1
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["status"] == "failed" and "without closing the run record" in record["error"]


def test_launcher_refuses_multinode_and_slurm_outside_slurm(compose_cfg, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(launch.ConfigError, match="cluster.nnodes=2"):
        launch.check_launchable(compose_cfg(["cluster.nnodes=2"]))
    with pytest.raises(launch.ConfigError, match="cluster=slurm: not inside a SLURM job"):
        launch.check_launchable(compose_cfg(["cluster=slurm"]))


def test_supervise_forwards_sigterm_and_kills_stragglers(tmp_path):
    # The supervised tree: a child that ignores SIGTERM, with a grandchild in its own session.
    marker = f"dreamddp-test-{os.getpid()}-{time.time_ns()}"
    child = textwrap.dedent(f"""
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "{marker}"],
                         start_new_session=True)
        print("ready", flush=True)
        time.sleep(60)
    """)
    parent = textwrap.dedent(f"""
        import sys
        from dreamddp import procs
        procs.GRACE_S = 1.0
        sys.exit(procs.supervise([sys.executable, "-c", {child!r}], {{}}))
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 10  # a killed process can linger a moment as a zombie on a loaded box
    while processes_mentioning(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(marker) == []


def _train_ready() -> str | None:
    try:
        from dreamddp.run.train import run_worker  # noqa: F401
    except ImportError as exc:
        return f"dreamddp.run.train.run_worker not importable yet ({exc})"
    return None


@pytest.mark.skipif(_train_ready() is not None, reason=str(_train_ready()))
def test_end_to_end_two_workers(tmp_path):
    run_dir = tmp_path / "run"
    args = ["algo=ssgd", "model=gpt2", "train.iterations=5", "cluster.nproc=2", "train.progress=false",
            f"hydra.run.dir={run_dir}"]
    out = _run(args, tmp_path, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "completed", record["error"]
    assert [r["iteration"] for r in record["iterations"]] == list(range(5))
    assert record["config"]["algo"]["name"] == "ssgd"
    # an algorithm that plans without a profile still predicts its time before training
    predicted = record["summary"]["predicted"]
    assert predicted["mean_iteration_time"] > 0 and len(predicted["per_position"]) == record["config"]["algo"]["H"]
    assert "median_abs" in predicted["error"] and all("predicted" in r for r in record["iterations"][1:])
    assert f"predicted: {1e3 * predicted['mean_iteration_time']:.1f} ms per iteration" in out.stdout
    assert (run_dir / "profile" / "bp.json").is_file()
    assert (run_dir / ".hydra" / "config.yaml").is_file() and (run_dir / "dreamddp.log").is_file()
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".")) == [".hydra"]
    assert processes_mentioning(str(run_dir)) == []


def test_worker_identity_from_launcher_env():
    from dreamddp.run.dist_env import first_host, worker_env

    torchrun = worker_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert (torchrun.launcher, torchrun.rank, torchrun.world_size, torchrun.local_rank) == ("torchrun", 3, 4, 1)
    srun = worker_env({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
                       "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_NTASKS_PER_NODE": "4(x2)"})
    assert (srun.launcher, srun.rank, srun.world_size, srun.local_world_size) == ("srun", 5, 8, 4)
    assert srun.master_addr == "gpu07"
    # a one-task SLURM job (submitit) is not a worker: it launches torchrun itself
    assert worker_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_ID": "9"}) is None
    assert worker_env({}) is None
    assert first_host("node1,node2") == "node1" and first_host("a[1,3-4]") == "a1"


def test_backend_follows_how_many_workers_share_a_gpu():
    from dreamddp.run.dist_env import process_group_backend, resolve_backend

    assert resolve_backend("auto", "cpu") == "gloo"
    assert resolve_backend("auto", "cuda", local_workers=8, gpus=8) == "nccl"
    # NCCL refuses two ranks on one device: workers sharing a GPU talk over gloo
    assert resolve_backend("auto", "cuda", local_workers=2, gpus=1) == "gloo"
    assert resolve_backend("gloo", "cuda", local_workers=1, gpus=1) == "gloo"
    # with NCCL the control path's CPU tensors (flags, metrics, timings) go over gloo
    assert process_group_backend("nccl") == "cpu:gloo,cuda:nccl" and process_group_backend("gloo") == "gloo"
