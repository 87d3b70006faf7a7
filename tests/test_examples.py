"""The library API (dreamddp.library, docs/library.md) and the examples that use it.

- On the fake communicator (one process, world 2, the peer holding half of every value): the
  wrapper's loop (begin, forward, backward, step; close) gives exactly the parameters the
  engine's own lifecycle gives (engine_fixtures.engine_step), and names mean what the CLI's do.
- Each example under torchrun on 2 gloo workers: exit status 0, replicas agree at the end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import dreamddp
from dreamddp.algorithms import build_algorithm
from dreamddp.checks import ConfigError
from dreamddp.comm.fake import FakeCommunicator
from dreamddp.config import conf_dir
from dreamddp.config.overrides import compose_checked
from dreamddp.engine.engine import PartialSyncEngine
from dreamddp.engine.units import enumerate_units
from engine_fixtures import batch, engine_step, loss_of, small_model

ROOT = Path(__file__).resolve().parents[1]
STEPS = 7  # not a multiple of H=2 or 3: close() lands what a window left in flight


def half_peer(kind, tag, t):
    return [t, t * 0.5] if kind == "all_reduce" else [t, t]


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def engine_run(cfg):
    model = small_model()
    engine = PartialSyncEngine(model, enumerate_units(model), FakeCommunicator(2, 0, half_peer),
                               build_algorithm(cfg))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for t in range(STEPS):
        engine_step(engine, model, opt, t)
    engine.land_all()
    return flat_params(model)


def wrapper_run(algo, zero_grad=False):
    model = small_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sync = dreamddp.wrap(model, opt, algo, comm=FakeCommunicator(2, 0, half_peer))
    for t in range(STEPS):
        if zero_grad:
            opt.zero_grad()  # set_to_none: the wrapper re-attaches the flat gradients
        sync.begin()
        loss_of(model, batch(0, t)).backward()
        sync.step()
    sync.close()
    return flat_params(model)


@pytest.mark.parametrize("name,options", [("flsgd", {"H": 3}), ("diloco", {"H": 3}), ("ssgd", {})])
def test_wrapper_loop_equals_engine_lifecycle(name, options):
    cfg = dreamddp.algo_config(name, **options)
    want = engine_run(cfg)
    assert torch.equal(wrapper_run(cfg), want)
    assert torch.equal(wrapper_run(cfg, zero_grad=True), want)
    assert not torch.equal(want, flat_params(small_model()))  # it trained


def test_names_compose_as_the_cli_does():
    """A name is the yaml dreamddp-run composes: the same dataclass, the same values."""
    for name in ("flsgd", "diloco", "dreamddp", "sparseloco", "dreamddp_diloco", "streaming_diloco"):
        composed = OmegaConf.to_object(compose_checked(conf_dir(), "config", [f"algo={name}", "algo.H=4"]).algo)
        assert dreamddp.algo_config(name, H=4) == composed
    assert dreamddp.algo_config("diloco").recipe == "diloco"
    assert dreamddp.bandwidth_config("1gbit") == dreamddp.BandwidthConfig(backend="emulated", gbps=1.0)


def test_refusals_are_one_line():
    model = small_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    comm = FakeCommunicator(2, 0)
    for algo, words in [("ddp", "DistributedDataParallel"), ("flsgd_timed", "skips iterations"),
                        ("nope", "no such option"), ("dreamddp", "loss_fn")]:
        with pytest.raises(ConfigError, match=words) as err:
            dreamddp.wrap(small_model(), torch.optim.SGD(small_model().parameters(), lr=0.1), algo, comm=comm)
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="moments_every"):
        dreamddp.wrap(model, opt, "desloc", comm=comm)
    with pytest.raises(ConfigError, match="bandwidth=nope"):
        dreamddp.bandwidth_config("nope")


def test_dreamddp_profiles_through_the_wrapper():
    """DreamDDP's start-up profile and schedule through the trainer's warm-up; the passes leave
    the parameters and the random state as they were."""
    model = small_model()
    before = flat_params(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    draws = iter(range(10**6))
    loss_fn = lambda: loss_of(model, batch(0, next(draws)))  # noqa: E731
    rng = torch.get_rng_state()
    sync = dreamddp.wrap(model, opt, dreamddp.algo_config("dreamddp", H=2), loss_fn=loss_fn,
                         warmup=dreamddp.WarmupConfig(profile_iterations=2), comm=FakeCommunicator(2, 0))
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.equal(flat_params(model), before)
    assert sync.profile is not None and sync.setup["schedule"]["H"] == 2
    for t in range(3):
        sync.begin()
        loss_of(model, batch(0, t)).backward()
        sync.step()
    sync.close()


def test_import_dreamddp_stays_torch_free():
    out = subprocess.run([sys.executable, "-c", "import sys, dreamddp; dreamddp.__version__; "
                          "print('torch' in sys.modules, 'wrap' in dir(dreamddp))"],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.split() == ["False", "True"], out.stderr


# ---- the examples under torchrun, 2 gloo workers --------------------------------------------------
def torchrun(script: str, *args: str, timeout: float = 240) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(ROOT / "examples" / script), *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def spread(out: str) -> float:
    """The examples' largest parameter difference across replicas after close()."""
    return float(re.search(r"largest difference ([0-9.e+-]+)", out).group(1))


def test_own_module_example():
    """DiLoCo ends on a full sync (iterations a multiple of H): replicas bitwise equal."""
    out = torchrun("own_module.py", "--algo", "diloco", "--iterations", "8", "--H", "4")
    assert "final loss" in out and "replicas agree: True" in out, out


def test_hf_transformers_example():
    """DreamDDP profiled and scheduled at start-up through the wrapper; its replicas differ by
    each unit's local steps since its last average, a few AdamW steps of lr 3e-3."""
    pytest.importorskip("transformers")
    out = torchrun("hf_transformers.py", "--algo", "dreamddp", "--iterations", "6", "--H", "3")
    assert "final loss" in out and "synced per iteration" in out, out
    assert spread(out) < 0.1, out
