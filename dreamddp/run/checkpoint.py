"""Checkpoints: every worker's whole training state, so that a resumed run goes on
exactly as the saved run did (bitwise, on the same hardware and world size).

Layout, under the run directory::

    checkpoints/step-0000040/rank00000.pt   one file per worker: under local SGD
    checkpoints/step-0000040/rank00001.pt   the replicas differ between syncs
    checkpoints/step-0000040/meta.json      written last, by rank 0, once every
                                            worker's file is in place

``step`` counts completed iterations; a run resumed from it starts at iteration
``step`` and runs to ``train.iterations`` (the total, as in torchtitan).  Files
are written under a temporary name, fsync'ed and renamed, so a crash mid-save
leaves the older checkpoints intact and nothing that looks complete but is not.
A worker restarted by torchrun (``cluster.max_restarts``) or a requeued SLURM job
continues from the newest complete checkpoint of its own run directory
(:func:`auto_resume`).

A worker file is ``{name: obj.state_dict()}`` for the trainer's mapping of
named objects that save and load themselves (the Stateful protocol of
torch.distributed.checkpoint and torchtitan): the model's parameters and
buffers, optimizer and LR schedule state, the algorithm's own state
(``Algorithm.state_dict``: e.g. Streaming DiLoCo's anchor, outer momentum and
landed-but-unmerged means), the worker's position in its data shard, RNG
states (:class:`RNGState`), and the set-up a resumed run must not measure
again (:class:`SetUp`: a calibrated link rate, DreamDDP's schedule).  Adding a
piece of state is one entry in that mapping.  The trainer completes all
communication in flight (``engine.flush``) before it saves.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Mapping, Protocol

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from dreamddp.atomic import write_json
from dreamddp.models import DIMENSIONS

META = "meta.json"
SUBDIR = "checkpoints"
_PREFIX = "step-"

# The settings a checkpoint's state depends on: resuming under another value would
# silently train something else (another data order, another shard, other tensors).
# The algorithm's window and fragments and the optimizer shape the saved state too (offsets,
# anchors, schedules, optimizer buffers); checkpoints made before 2026-11-29 do not record them,
# so they are compared only where recorded.
# cluster.shards: a worker file holds its rank's local shards (recorded from 2026-12-04).
_STATE_KEYS = ("algo.H", "algo.fragments", "train.optimizer", "cluster.shards")
_CONFIG_KEYS = ("model.name", "model.size", *(f"model.{k}" for k in DIMENSIONS), "algo.name", "data.name", "seed",
                "train.batch_size", *_STATE_KEYS)
MUST_MATCH = (*_CONFIG_KEYS, "world_size")


class CheckpointError(ValueError):
    """A checkpoint cannot be used (one line, naming train.resume)."""


def step_dir(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / SUBDIR / f"{_PREFIX}{step:07d}"


def _complete_steps(parent: Path) -> list[Path]:
    if not parent.is_dir():
        return []
    found = [p for p in parent.iterdir() if p.name.startswith(_PREFIX) and (p / META).is_file()]
    return sorted(found, key=lambda p: p.name)


def find(path: str | os.PathLike) -> Path:
    """The checkpoint ``path`` names: a step directory, or the newest complete one
    under a checkpoints directory or a run directory."""
    p = Path(path)
    if (p / META).is_file():
        return p
    steps = _complete_steps(p) or _complete_steps(p / SUBDIR)
    if not steps:
        raise CheckpointError(f"train.resume={path}: no complete checkpoint ({SUBDIR}/{_PREFIX}*/{META}) there")
    return steps[-1]


def auto_resume(cfg, run_dir: str | os.PathLike, environ=None) -> Path | None:
    """The checkpoint a restarted worker continues from, or None (start from scratch).

    Restarted means torchrun's ``TORCHELASTIC_RESTART_COUNT`` or SLURM's
    ``SLURM_RESTART_COUNT`` (a requeued job) is above 0; an explicit ``train.resume``
    wins, and a first start never picks up checkpoints it finds.
    """
    env = os.environ if environ is None else environ
    if cfg.train.resume:
        return None
    restarts = max(int(env.get("TORCHELASTIC_RESTART_COUNT") or 0), int(env.get("SLURM_RESTART_COUNT") or 0))
    if restarts == 0:
        return None
    try:
        return find(run_dir)
    except CheckpointError:
        return None


def describe_run(cfg, world_size: int) -> dict:
    """The MUST_MATCH settings of a run, as meta.json records them."""
    values = {key: OmegaConf.select(cfg, key) for key in _CONFIG_KEYS}
    plain = {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for k, v in values.items()}  # lists
    return {**plain, "world_size": world_size}


def check_resume(cfg, world_size: int, finished: bool = False) -> tuple[Path, int]:
    """The checkpoint cfg.train.resume names and its step, refused with one line if this
    run cannot continue it.  ``finished``: a checkpoint at train.iterations is taken too (a
    restarted worker of a run that failed after its last checkpoint only finishes it)."""
    resume = cfg.train.resume
    ckpt = find(resume)
    try:  # torn or hand-edited: refused like any other unusable checkpoint
        meta = json.loads((ckpt / META).read_text())
        saved, step = dict(meta["run"]), int(meta["step"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"train.resume={resume}: {ckpt / META} is unreadable ({type(exc).__name__})") from None
    ours = describe_run(cfg, world_size)
    for key in MUST_MATCH:
        if key in _STATE_KEYS and key not in saved:
            continue
        if saved.get(key) != ours[key]:
            raise CheckpointError(
                f"train.resume={resume}: saved with {key}={saved.get(key)}, this run has {key}={ours[key]}"
            )
    if step > cfg.train.iterations or (step == cfg.train.iterations and not finished):
        raise CheckpointError(
            f"train.resume={resume}: checkpoint is at step {step}, nothing left of "
            f"train.iterations={cfg.train.iterations}"
        )
    missing = [f"rank{r:05d}.pt" for r in range(world_size) if not (ckpt / f"rank{r:05d}.pt").is_file()]
    if missing:
        raise CheckpointError(f"train.resume={resume}: {ckpt.name} lacks worker file(s) {', '.join(missing)}")
    return ckpt, step


class Stateful(Protocol):
    """What a checkpoint holds of one named piece of state (torch.distributed.checkpoint's
    protocol): the model, optimizer and LR schedule, an Algorithm, the data iterator, and
    the two below."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class RNGState:
    """This process's torch (and, once initialised, CUDA) random state: dropout masks and
    any other draws after the resume continue as they would have."""

    def state_dict(self) -> dict:
        rng = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            rng["cuda"] = torch.cuda.get_rng_state()
        return rng

    def load_state_dict(self, state: dict) -> None:
        torch.set_rng_state(state["torch"].cpu())  # CPU byte tensors, whatever map_location did
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state(state["cuda"].cpu())


class SetUp:
    """What the start-up passes decided, so a resumed run re-uses it instead of measuring
    again: the link's calibration (``Link.setup_state``) and the set-up the algorithm was
    built from (``Algorithm.prepare``'s, e.g. DreamDDP's schedule), and its codec's timed host
    work (the prediction's).  A resumed run reads it before it builds the algorithm; loading
    it again with the rest changes nothing."""

    def __init__(self, link, algorithm: dict, codec_host: list | None = None) -> None:
        self.link, self.algorithm, self.codec_host = link, algorithm, codec_host

    def state_dict(self) -> dict:
        return {"link": self.link.setup_state(), "algorithm": self.algorithm, "codec_host": self.codec_host}

    def load_state_dict(self, state: dict) -> None:
        self.link.load_setup_state(state["link"])
        self.algorithm = state["algorithm"]
        self.codec_host = state.get("codec_host")  # a checkpoint made before it was timed: none


class LocalShards:
    """A model sharded by FSDP2 (replicas x shards, engine/mesh.py): its parameters and
    buffers saved as this rank's local shards (plain tensors, so the worker file loads with
    weights_only) and loaded back INTO them, which stay views of the engine's flat buffer.
    The run resumes on the same mesh (world size is checked), so no resharding is needed."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def state_dict(self) -> dict:
        from dreamddp.engine.mesh import local_tensor

        named = [*self.model.named_parameters(), *self.model.named_buffers()]
        return {name: local_tensor(t.detach()).clone() for name, t in named}

    def load_state_dict(self, state: dict) -> None:
        from dreamddp.engine.mesh import local_tensor

        named = dict([*self.model.named_parameters(), *self.model.named_buffers()])
        if sorted(named) != sorted(state):
            raise CheckpointError("model: the checkpoint's parameters are not this model's")
        with torch.no_grad():
            for name, t in named.items():
                mine = local_tensor(t)
                if mine.shape != state[name].shape:
                    raise CheckpointError(f"model: {name} is {tuple(state[name].shape)} in the checkpoint, "
                                          f"{tuple(mine.shape)} here: saved on another mesh (cluster.shards)")
                mine.copy_(state[name])


class LocalOptimizer:
    """An optimizer over sharded parameters: its DTensor state (momentum, Adam's moments)
    saved as local shards, and wrapped again as its parameter's DTensor on load."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer

    def state_dict(self) -> dict:
        from dreamddp.engine.mesh import local_tensor

        saved = self.optimizer.state_dict()
        saved["state"] = {k: {n: local_tensor(v).clone() if torch.is_tensor(v) else v for n, v in entry.items()}
                          for k, entry in saved["state"].items()}
        return saved

    def load_state_dict(self, state: dict) -> None:
        from torch.distributed.tensor import DTensor

        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        state = dict(state, state=dict(state["state"]))
        for k, entry in state["state"].items():
            p = params[int(k)]
            if isinstance(p, DTensor):  # a shard-shaped tensor is the parameter's shard of it
                state["state"][k] = {n: DTensor.from_local(v, p.device_mesh, p.placements, run_check=False,
                                                           shape=p.shape, stride=p.stride())
                                     if torch.is_tensor(v) and v.shape == p._local_tensor.shape and v.dim() else v
                                     for n, v in entry.items()}
        self.optimizer.load_state_dict(state)


def sharded(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple:
    """What a checkpoint saves of the model and optimizer: themselves, or their local shards
    where FSDP2 shards the model."""
    from torch.distributed.tensor import DTensor

    if any(isinstance(p, DTensor) for p in model.parameters()):
        return LocalShards(model), LocalOptimizer(optimizer)
    return model, optimizer


def capture(state: Mapping[str, Stateful]) -> dict:
    """This worker's file content, ``{name: obj.state_dict()}``, taken after ``engine.flush()``."""
    return {name: obj.state_dict() for name, obj in state.items()}


def restore(saved: dict, state: Mapping[str, Stateful]) -> None:
    """Load ``capture``'s content into each named object, in place (the algorithm already
    bound to the engine).  Parameters are copied INTO the existing tensors, which are
    views of the engine's flat buffer, so the engine's layout survives."""
    with torch.no_grad():
        for name, obj in state.items():
            obj.load_state_dict(saved[name])


def load(ckpt: Path, rank: int, device: torch.device) -> dict:
    path = ckpt / f"rank{rank:05d}.pt"
    if not path.is_file():
        raise CheckpointError(f"train.resume={ckpt}: {path.name} is missing")
    return torch.load(path, map_location=device, weights_only=True)


def save(run_dir: str, step: int, rank: int, state: dict, run: dict, keep: int) -> Path:
    """Write this worker's file; rank 0 marks the checkpoint complete once all have, then prunes."""
    d = step_dir(run_dir, step)
    d.mkdir(parents=True, exist_ok=True)
    target = d / f"rank{rank:05d}.pt"
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, target)
    if dist.is_initialized():
        dist.barrier()  # every worker's file is in place
    if rank == 0:
        write_json(d / META, {"step": step, "run": run})
        if keep > 0:
            for old in _complete_steps(d.parent)[:-keep]:
                shutil.rmtree(old, ignore_errors=True)
    return d


def run_dir_of(ckpt: str | os.PathLike) -> Path:
    """The run directory a ``step-<N>`` checkpoint belongs to (``<run>/checkpoints/step-<N>``)."""
    return Path(ckpt).resolve().parent.parent


def saved_profile(run_dir: Path):
    """The start-up profile a run saved (``<run>/profile``), so a run resumed from its checkpoint
    predicts its iterations as it did; None where that run profiled nothing, or its profile no
    longer loads (said on stderr)."""
    from dreamddp.schedule.profile import load_profile

    d = Path(run_dir) / "profile"
    if not d.is_dir():
        return None
    try:
        return load_profile(d)
    except (OSError, ValueError) as e:
        print(f"train.resume: {d}: not used for the prediction ({e})", file=sys.stderr, flush=True)
        return None
