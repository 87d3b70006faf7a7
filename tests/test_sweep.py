"""Experiment presets and sweeps: every preset composes as documented; a rerun skips completed runs.

The sweep test runs two tiny trainings (ResNet-18 tiny, 2 workers, 2
iterations, no link pacing) with Hydra's basic launcher through
dreamddp-run -m, reruns the sweep (nothing to do), then marks one run failed
and reruns again (only that one trains).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from dreamddp.config import CONFIG_NAME, conf_dir

REPO = Path(__file__).resolve().parents[1]
PRESETS = sorted(p.stem for p in (Path(conf_dir()) / "experiment").glob("*.yaml") if p.stem != "default")
STUDIES = ("iteration_time", "convergence", "h_ablation", "divergence", "bandwidth", "scheduler", "merge_delay")


def _compose(overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=conf_dir(), version_base="1.3"):
        return compose(CONFIG_NAME, overrides=overrides, return_hydra_config=True)


def test_every_study_has_a_cpu_and_a_paper_preset():
    assert sorted(PRESETS) == sorted(f"{s}_{scale}" for s in STUDIES for scale in ("cpu", "paper"))


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_composes_with_a_deterministic_sweep(preset):
    path = Path(conf_dir()) / "experiment" / f"{preset}.yaml"
    assert path.read_text().startswith("# @package _global_\n")
    cfg = _compose([f"experiment={preset}"])
    assert cfg.experiment.name == preset
    assert cfg.hydra.sweep.dir == f"multirun/{preset}"  # resolved: no ${now:...}
    assert "now" not in str(cfg.hydra.sweep.subdir) and "job.num" not in str(cfg.hydra.sweep.subdir)
    params = cfg.hydra.sweeper.params
    assert params, "a study preset defines its sweep"
    if preset.endswith("_cpu"):
        # CPU studies: CPU presets (small: the paper's byte distribution; compute: its time split),
        # 2-4 workers, a CPU-scale run.
        assert cfg.cluster.name == "local" and 2 <= cfg.cluster.nproc <= 4
        assert cfg.model.size in ("tiny", "small", "compute")
        assert cfg.train.iterations <= 300
        assert cfg.hydra.launcher._target_.endswith("BasicLauncher")
    else:
        assert cfg.cluster.name == "slurm" and cfg.model.size == "paper"
        assert cfg.hydra.launcher._target_.endswith("submitit_launcher.SlurmLauncher")
        assert cfg.hydra.launcher.nodes == cfg.cluster.nnodes and cfg.hydra.launcher.tasks_per_node == cfg.cluster.nproc
    # every swept value composes (the group options exist, the keys are in the schema)
    for key, values in params.items():
        for value in str(values).split(","):
            _compose([f"experiment={preset}", f"{key}={value}"])


@pytest.mark.parametrize("preset", PRESETS)
def test_every_job_of_a_preset_passes_the_sweeps_own_check(preset):
    """What ``dreamddp-run -m experiment=<preset>`` checks before its first job: every job, on
    this host for the CPU studies, the rules that hold anywhere for the SLURM ones."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from dreamddp.sweep_filter import as_job, check_job

    params = [f"{k}={v}" for k, v in _compose([f"experiment={preset}"]).hydra.sweeper.params.items()]
    (jobs,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(params), None)
    assert len(jobs) >= 4
    for job in jobs:
        cfg = _compose([f"experiment={preset}", *job])
        with as_job(cfg):
            check_job(cfg)


def _sweep(sweep_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    args = ["-m", "dreamddp.cli", "-m", "experiment=divergence_cpu", "model=resnet18", "algo=ssgd,flsgd", "bandwidth=ideal",
            "train.iterations=2", "data.eval_batches=1", f"hydra.sweep.dir={sweep_dir}", *extra]
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=400)


def _status(run_dir: Path) -> str:
    return json.loads((run_dir / "run.json").read_text())["status"]


def test_sweep_runs_then_skips_completed(tmp_path):
    sweep = tmp_path / "sweep"
    p = _sweep(sweep)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    runs = {name: sweep / f"algo={name},bandwidth=ideal,data.eval_batches=1,model=resnet18,train.iterations=2"
            for name in ("ssgd", "flsgd")}
    assert all(_status(d) == "completed" for d in runs.values()), list(sweep.iterdir())
    stamps = {n: (d / "run.json").stat().st_mtime_ns for n, d in runs.items()}

    p = _sweep(sweep)  # everything completed: nothing is launched
    assert p.returncode == 0, p.stderr[-3000:]
    assert "0 of 2 runs to do" in p.stdout + p.stderr
    assert {n: (d / "run.json").stat().st_mtime_ns for n, d in runs.items()} == stamps

    record = json.loads((runs["ssgd"] / "run.json").read_text())
    record["status"] = "failed"  # as the launcher marks a run whose workers died
    (runs["ssgd"] / "run.json").write_text(json.dumps(record))
    p = _sweep(sweep)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "1 of 2 runs to do" in p.stdout + p.stderr
    assert _status(runs["ssgd"]) == "completed"
    assert (runs["flsgd"] / "run.json").stat().st_mtime_ns == stamps["flsgd"]  # left alone


@pytest.mark.parametrize("launcher,refused", [
    ([], "cluster.device=cuda: CUDA is not available on this host"),  # the basic launcher runs jobs here
    (["hydra/launcher=submitit_slurm"], None),  # the job's own node checks CUDA and SLURM when it starts
])
def test_a_sweep_checks_the_host_only_for_jobs_that_run_on_it(launcher, refused):
    import torch

    from dreamddp.checks import ConfigError
    from dreamddp.sweep_filter import as_job, check_job

    if torch.cuda.is_available():
        pytest.skip("checks what a host without CUDA refuses")
    cfg = _compose(["cluster=slurm", "cluster.device=cuda", *launcher])
    with as_job(cfg):
        if refused is None:
            check_job(cfg)
        else:
            with pytest.raises(ConfigError, match=refused):
                check_job(cfg)
    bad = _compose(["model=resnet18", "data=shakespeare", *launcher])  # a rule that holds on any host
    with as_job(bad), pytest.raises(ConfigError, match="data=shakespeare: serves task=lm"):
        check_job(bad)
