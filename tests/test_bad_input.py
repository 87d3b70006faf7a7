"""A catalogue of bad input: every one refused before any worker starts, in one line naming the field.

Each config group, an output directory that cannot be written, traffic shaping
without the privileges for it; schedule and profile files and resume directories
are test_bad_input_files.py's.
The bulk runs in-process (compose + validate, the launcher's own checks,
dreamddp-schedule's main); a subset goes through dreamddp-run, which must exit
with status 2, print one line on stderr and leave no run directory.  Cases
already in test_config.py, test_cli.py, test_checkpoint.py and
test_tc_training.py are not repeated here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bad_input_util import SYNTH, checkpoint, one_line
from cli_util import RUN
from dreamddp.run import launch
from dreamddp.config import CONFIG_NAME, ConfigError, conf_dir, validate
from dreamddp.config.overrides import compose_checked


# --- every config group: (overrides, start of the one line) ---------------------
CONFIG = [
    (["model.vocab_size=1"], "model.vocab_size=1: must be >= 2"),
    (["model.n_layer=0"], "model.n_layer=0: must be >= 1"),
    (["model=llama2", "model.n_inner=-4"], "model.n_inner=-4: must be >= 1"),
    (["model.n_head=3"], "model.n_head=3: must divide model.n_embd=64"),
    (["model.n_embd=99"], "model.n_embd=99: must be a multiple of model.n_head=2"),
    (["model=llama2", "model.n_embd=66"], "model.n_embd=66: model.n_embd / model.n_head = 33 channels per head; "
                                          "Llama's rotary embedding needs an even number"),
    (["model.base_width=16"], "model.base_width=16: only image models (resnet18, resnet50) take it, not gpt2"),
    (["model=resnet18", "model.n_layer=4"],
     "model.n_layer=4: only language models (gpt2, llama2) take it, not resnet18"),
    (["model=resnet18", "model.base_width=0"], "model.base_width=0: must be >= 1"),
    (["model=resnet50", "model.num_blocks=[3,4,6]"], "model.num_blocks=[3, 4, 6]: must be 4 integers >= 1"),
    (["model=resnet50", "model.num_blocks=[3,0,6,3]"], "model.num_blocks=[3, 0, 6, 3]: must be 4 integers >= 1"),
    (["data=synthetic", "data.synthetic_size=0"], "data.synthetic_size=0: must be >= 1"),
    (["data.eval_fraction=-0.5"], "data.eval_fraction=-0.5: must be in (0, 1)"),
    (["algo=flsgd", "algo.H=-1"], "algo.H=-1: must be >= 1"),
    (["algo=dreamddp", "algo.late_parts=0"], "algo.late_parts=0: must be >= 1"),
    (["algo=streaming_diloco", "algo.outer_lr=0"], "algo.outer_lr=0.0: must be > 0"),
    (["algo=streaming_diloco", "algo.outer_momentum=1.5"], "algo.outer_momentum=1.5: must be in [0, 1)"),
    (["algo=streaming_diloco", "algo.fragment_pattern=zigzag"], "algo.fragment_pattern=zigzag: unknown value"),
    (["model=resnet18", "algo=streaming_diloco", "algo.H=10", "algo.fragments=8"],
     "algo.fragments=8: must be between 1 and the model's 4 blocks"),
    (["algo=streaming_diloco", "algo.alpha=1"], "algo.alpha=1.0: must be in [0, 1)"),
    (["bandwidth=1gbit", "bandwidth.latency_ms=-1"], "bandwidth.latency_ms=-1.0: must be >= 0"),
    (["bandwidth=1gbit", "bandwidth.calibration=0"], "bandwidth.calibration=0.0: must be > 0"),
    (["bandwidth=ratio7", "bandwidth.comm_ratio=0"], "bandwidth.comm_ratio=0.0: must be > 0"),
    (["bandwidth=tc_1gbit", "bandwidth.latency_ms=5"], "bandwidth.latency_ms=5.0: not supported by backend tc"),
    (["bandwidth.gbps=-1"], "bandwidth.gbps=-1.0: must be > 0"),
    (["bandwidth=tc_1gbit", "bandwidth.gbps=0"], "bandwidth.gbps=0.0: must be > 0"),
    (["bandwidth=ratio7", "bandwidth.gbps=-1"], "bandwidth.gbps=-1.0: must be > 0"),
    (["bandwidth.gbps=2"], "bandwidth.gbps=2.0: bandwidth=ideal does not shape traffic and would ignore it; "
                           "choose an emulated link (bandwidth=1gbit"),
    (["bandwidth.latency_ms=5"], "bandwidth.latency_ms=5.0: bandwidth=ideal does not shape traffic"),
    (["bandwidth.carrier=step"], "bandwidth.carrier=step: only a paced link (emulated)"),
    (["bandwidth=1gbit", "bandwidth.carrier=later"], "bandwidth.carrier=later"),
    (["bandwidth.comm_ratio=7"], "bandwidth.comm_ratio=7.0: bandwidth=ideal does not shape traffic and would ignore "
                                 "it; choose bandwidth=ratio7"),
    (["bandwidth=1gbit", "bandwidth.backend=ideal"], "bandwidth.gbps=1.0: bandwidth=ideal does not shape traffic"),
    (["bandwidth.worker_gbps=[1,1]"], "bandwidth.worker_gbps: per-worker rates need a link that models them"),
    (["bandwidth=1gbit", "bandwidth.worker_gbps=[1,0.5,1]"],
     "bandwidth.worker_gbps: 3 rates for 2 workers (cluster.nproc=2 x cluster.nnodes=1)"),
    (["bandwidth=1gbit", "bandwidth.worker_gbps=[1,-1]"], "bandwidth.worker_gbps[1]=-1.0: must be a finite number > 0"),
    (["bandwidth=ratio7", "bandwidth.worker_gbps=[1,1]"], "bandwidth.comm_ratio=7.0: sets one rate for all workers"),
    (["cluster.worker_speed=[1,0.5,1]"], "cluster.worker_speed: 3 speeds for 2 workers (cluster.nproc=2"),
    (["cluster.nnodes=2", "cluster.worker_speed=[1,0.5]"], "cluster.worker_speed: 2 speeds for 4 workers"),
    (["cluster.worker_speed=[1,0]"], "cluster.worker_speed[1]=0.0: must be in (0, 1]"),
    (["cluster.worker_speed=[2,1]"], "cluster.worker_speed[0]=2.0: must be in (0, 1]"),
    (["cluster.slow_spell.p=1.5"], "cluster.slow_spell.p=1.5: must be in [0, 1]"),
    (["cluster.slow_spell.p=-0.1"], "cluster.slow_spell.p=-0.1: must be in [0, 1]"),
    (["cluster.slow_spell.speed_min=0"], "cluster.slow_spell.speed_min=0.0: must be in (0, 1]"),
    (["cluster.slow_spell.speed_max=1.5"], "cluster.slow_spell.speed_max=1.5: must be in (0, 1]"),
    (["cluster.slow_spell.speed_min=0.8", "cluster.slow_spell.speed_max=0.4"],
     "cluster.slow_spell.speed_min=0.8: above cluster.slow_spell.speed_max=0.4"),
    (["cluster.slow_spell.length=0"], "cluster.slow_spell.length=0: must be >= 1"),
    (["cluster.slow_spell.seed=-1"], "cluster.slow_spell.seed=-1: must be >= 0"),
    (["algo=flsgd_timed", "algo.window_s=0"], "algo.window_s=0.0: must be > 0"),
    (["cluster.timeout_s=0"], "cluster.timeout_s=0.0: must be > 0"),
    (["cluster.max_restarts=-1"], "cluster.max_restarts=-1: must be >= 0"),
    (["cluster.dist_backend=mpi"], "cluster.dist_backend=mpi: unknown value"),
    (["cluster.device=cpu", "cluster.dist_backend=nccl"], "cluster.dist_backend=nccl: needs cluster.device=cuda"),
    (["cluster.nnodes=0"], "cluster.nnodes=0: must be >= 1"),
    (["wandb.init_timeout_s=0"], "wandb.init_timeout_s=0.0: must be > 0"),
    (["wandb.mode=ONLINE"], "wandb.mode=ONLINE: unknown value"),
    (["train.checkpoint_keep=-1"], "train.checkpoint_keep=-1: must be >= 0"),
    (["train.checkpoint_every=-2"], "train.checkpoint_every=-2: must be >= 0"),
    (["train.grad_clip=-1"], "train.grad_clip=-1.0: must be >= 0"),
    (["train.log_every=0"], "train.log_every=0: must be >= 1"),
    (["warmup.profile_iterations=-3"], "warmup.profile_iterations=-3: must be >= 1"),
    (["seed=-1"], "seed=-1: must be >= 0"),
]


@pytest.mark.parametrize("overrides,start", CONFIG, ids=[" ".join(o) for o, _ in CONFIG])
def test_config_groups(compose_cfg, overrides, start):
    with pytest.raises(ConfigError) as info:
        validate(compose_cfg(overrides))
    one_line(info.value, start)


# --- what Hydra refuses while composing, in our one line (Hydra's own is several) ------
COMPOSE = [
    (["algo=flsgd", "algo.bucket_mb=1"], False, "algo.bucket_mb=1: algo (flsgd) has no key bucket_mb (its keys: name, H,"),
    (["trian.lr=3"], False, "trian.lr=3: the config has no key trian (its keys: seed, model, data, train, algo,"),
    (["train={a:1}"], False, "train={a:1}: train has no key a (its keys: iterations, batch_size, lr,"),
    (["train.lr=abc"], False, "train.lr=abc: Value 'abc' of type 'str' could not be converted to Float"),
    (["cluster.nproc=1.5"], False, "cluster.nproc=1.5: Value '1.5' of type 'float' could not be converted to Integer"),
    (["model.num_blocks=3"], False, "model.num_blocks=3: Invalid value assigned: int is not a ListConfig"),
    (["train.lr=["], False, "train.lr=[: cannot parse it (no viable alternative at input '[')"),
    (["algo=ssgd,flsgd"], False, "algo=ssgd,flsgd: several values; add -m to sweep over them"),
    # a sweep's shared config has the default algo (ssgd): Hydra's known staging of multiruns
    (["algo=ascwfbp,dear", "algo.bucket_mb=1"], True,
     ("algo.bucket_mb=1: algo (ssgd) has no key bucket_mb (its keys: name, H,",
      "); a sweep first composes its shared config with the default algo, before choosing each job's: "
      "write ++algo.bucket_mb=1")),
]


@pytest.mark.parametrize("overrides,multirun,start", COMPOSE, ids=[" ".join(o) for o, _, _ in COMPOSE])
def test_composition(overrides, multirun, start):
    with pytest.raises(ConfigError) as info:
        compose_checked(conf_dir(), CONFIG_NAME, overrides, multirun)
    one_line(info.value, *((start,) if isinstance(start, str) else start))


@pytest.mark.parametrize("overrides,start", [
    (["algo=flsgd", "++algo.bucket_mb=1"], "algo.bucket_mb=1: algo (flsgd) has no key bucket_mb (its keys: name, H,"),
    (["++train.foo=2"], "train.foo=2: train has no key foo (its keys: iterations,"),
    (["+extra=1"], "extra=1: the config has no key extra (its keys: seed, model,"),
], ids=["force-added algo option", "force-added train key", "added top-level key"])
def test_keys_hydra_adds_on_request_are_still_declared_ones(compose_cfg, overrides, start):
    """Hydra's ``+``/``++`` add keys to the typed nodes; nothing reads a key its node does not declare."""
    with pytest.raises(ConfigError) as info:
        validate(compose_cfg(overrides))
    one_line(info.value, start)
    validate(compose_cfg(["algo=ascwfbp", "++algo.bucket_mb=2"]))  # declared: force-add only sets it


def test_launcher_refuses_restarts_it_cannot_do(compose_cfg):
    with pytest.raises(ConfigError) as info:
        launch.check_launchable(compose_cfg(["bandwidth=tc_1gbit", "cluster.max_restarts=1"]))
    one_line(info.value, "cluster.max_restarts=1: bandwidth backend tc starts its workers itself")


# --- traffic shaping without the privileges for it --------------------------------
def test_tc_when_network_namespaces_are_not_permitted(compose_cfg, monkeypatch):
    from dreamddp.netshape import preflight

    denied = subprocess.CompletedProcess([], 1, "", "unshare: unshare failed: Operation not permitted")
    monkeypatch.setattr(preflight.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(preflight.subprocess, "run", lambda *a, **k: denied)
    with pytest.raises(ConfigError) as info:
        validate(compose_cfg(["bandwidth=tc_1gbit"]))
    one_line(info.value, "bandwidth=tc unavailable: cannot create a network namespace (unshare: unshare failed: "
                          "Operation not permitted); use the emulated link instead")


# --- more workers than the job can serve: real failures that start workers today ---
def test_more_synchronisation_groups_than_units(compose_cfg):
    with pytest.raises(ConfigError, match=r"^algo.H=100: must be between 1 and the model's \d+ units"):
        validate(compose_cfg(["algo=plsgd_enp", "algo.H=100"]))


def test_more_workers_than_the_data_has_batches_for(compose_cfg):
    with pytest.raises(ConfigError, match=r"train.batch_size=4"):
        validate(compose_cfg(["data=synthetic", "data.synthetic_size=4", "train.batch_size=4", "cluster.nproc=2"]))


# --- through dreamddp-run: exit 2, one line, no run directory ----------------------
def _refused(tmp_path: Path, args: list[str], start: str, run_dir: Path | None = None, prefix: list[str] = ()) -> None:
    run_dir = run_dir or tmp_path / "run"
    out = subprocess.run([*prefix, *RUN, *args, f"hydra.run.dir={run_dir}"], capture_output=True, text=True,
                         timeout=180, env={**os.environ, "SLURM_JOB_ID": ""})
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {start}"), out.stderr[-2000:]
    assert not run_dir.exists()


@pytest.mark.parametrize("args,start", [
    (["experiment=nope"], "experiment=nope: unknown option"),
    (["cluster.timeout_s=-5"], "cluster.timeout_s=-5.0: must be > 0"),
    (["cluster=slurm"], "cluster=slurm: not inside a SLURM job"),
    (["wandb.init_timeout_s=0"], "wandb.init_timeout_s=0.0: must be > 0"),
    (["bandwidth.gbps=-1"], "bandwidth.gbps=-1.0: must be > 0"),
    (["model.n_head=3"], "model.n_head=3: must divide model.n_embd=64"),
], ids=["experiment", "cluster", "launcher", "wandb", "bandwidth", "model"])
def test_dreamddp_run_refuses_inone_line(tmp_path, args, start):
    _refused(tmp_path, [*SYNTH, *args], start)


@pytest.mark.parametrize("args,start", [
    (["algo=flsgd", "algo.bucket_mb=1"], "algo.bucket_mb=1: algo (flsgd) has no key bucket_mb"),
    (["train.lr=abc"], "train.lr=abc: Value 'abc' of type 'str' could not be converted to Float"),
], ids=["key", "type"])
def test_dreamddp_run_refuses_what_hydra_refuses_inone_line(tmp_path, args, start):
    _refused(tmp_path, [*SYNTH, *args], start)


def test_a_sweep_is_checked_whole_before_its_first_job(tmp_path):
    """The bad job is the last: nothing runs, not even the good first one, and the line names the job."""
    sweep_dir = tmp_path / "sweep"
    out = subprocess.run([*RUN, "-m", "model=gpt2,resnet18", "data=shakespeare", "model.size=tiny", "cluster.nproc=1",
                          "train.iterations=2", f"hydra.sweep.dir={sweep_dir}"],
                         capture_output=True, text=True, timeout=180, env={**os.environ, "SLURM_JOB_ID": ""})
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith("error: job #1 of 2 (model=resnet18): data=shakespeare: serves task=lm"), lines[0]
    assert not sweep_dir.exists()


def test_dreamddp_run_refuses_a_torncheckpoint(tmp_path):
    ckpt = checkpoint(tmp_path)
    (ckpt / "meta.json").write_text("{")
    _refused(tmp_path, [*SYNTH, f"train.resume={ckpt}"], f"train.resume={ckpt}: ")


def test_dreamddp_run_refuses_an_output_directory_it_cannot_write(tmp_path):
    parent = tmp_path / "readonly"
    parent.mkdir()
    run_dir = parent / "outputs" / "run"
    if os.geteuid() == 0:  # root writes through permissions: make it a read-only file system instead
        prefix = ["unshare", "-m", "--", "sh", "-c", f"mount -t tmpfs -o ro tmpfs {parent} && exec \"$@\"", "sh"]
        why = "read-only file system"
    else:
        parent.chmod(0o555)
        prefix, why = [], "permission denied"
    _refused(tmp_path, SYNTH, f"hydra.run.dir={run_dir}: cannot create or write it under {parent} ({why})",
             run_dir=run_dir, prefix=prefix)


def test_dreamddp_run_refuses_an_output_directory_its_file_system_refuses(tmp_path):
    """procfs grants root write permission by its mode bits and still refuses mkdir: the check
    tries one, rather than trusting os.access."""
    run_dir = Path("/proc/dreamddp-nope/run")
    _refused(tmp_path, SYNTH, f"hydra.run.dir={run_dir}: cannot create or write it under /proc (", run_dir=run_dir)
