"""The library API: partial synchronisation in a user's own training loop.

One object wraps a model and its optimizer with an algorithm (or a recipe), a
link and a process group; an ordinary loop gains three calls::

    sync = dreamddp.wrap(model, optimizer, algo="diloco")
    for batch in batches:
        sync.begin()                 # 1. before the forward: the iteration's plan, gradients zeroed
        loss = loss_of(model, batch)
        loss.backward()              #    hooks launch the ops whose units' gradients are ready
        sync.step()                  # 2. in place of optimizer.step()
    sync.close()                     # 3. at the end: what is still in flight lands

The options are the Hydra config's own dataclasses: ``algo`` is an algorithm's
``Config`` (``dreamddp.algorithms.<module>``, what ``algo=...`` composes),
``link`` a :class:`~dreamddp.config.schema.BandwidthConfig` (``bandwidth=...``),
``warmup`` a :class:`~dreamddp.config.schema.WarmupConfig`.  A name stands for
the yaml the CLI would compose: ``algo="diloco"`` is ``conf/algo/diloco.yaml``
(:func:`algo_config`), ``link="1gbit"`` is ``conf/bandwidth/1gbit.yaml``
(:func:`bandwidth_config`).  So a script and ``dreamddp-run algo=diloco
bandwidth=1gbit`` run the same algorithm on the same link.

Set-up is the trainer's (dreamddp.run.train.Run.build / set_up): units from the
model itself (engine/units.py: modules that own parameters, in the order one
backward pass makes their gradients ready, when ``loss_fn`` is given; every rank
takes rank 0's order), the engine holding ``nosync`` with rank 0's parameters and
buffers broadcast, the link's calibration, the algorithm's warm-up
(``Algorithm.prepare``: DreamDDP profiles and schedules through
dreamddp.warmup.Warmup), then the algorithm.  The warm-up leaves parameters,
optimizer state, buffers and the random state as it found them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from types import SimpleNamespace
from typing import Any, Callable

import dreamddp._compat  # noqa: F401  (an entry point: torchvision's, hence transformers', import on CPU torch)
import torch

from dreamddp.algorithms import ALGORITHMS, AlgoConfig
from dreamddp.checks import ConfigError
from dreamddp.comm.links import LINKS, build_link
from dreamddp.config.named import algo_config, as_algo, as_link, bandwidth_config
from dreamddp.config.schema import WarmupConfig
from dreamddp.engine import mesh as meshes
from dreamddp.engine.mesh import local_tensor
from dreamddp.engine.units import enumerate_units, leaf_module_names, reorder_units
from dreamddp.warmup import Warmup, check as check_warmup

__all__ = ["Sync", "algo_config", "bandwidth_config", "mesh", "replica_difference", "shard", "wrap"]


def _refuse_unwrappable(cfg: AlgoConfig, algo_cls, optimizer, link_cls) -> None:
    """What the trainer can run and this wrapper cannot: one line each, before anything starts."""
    name = cfg.name
    if not algo_cls.on_engine or algo_cls.syncs_itself:
        raise ConfigError(f"algo={name}: runs off the partial-sync engine (torch DDP or the bare model); "
                          "in your own loop use torch.nn.parallel.DistributedDataParallel or the model itself")
    if algo_cls.window_policy(cfg) is not None:
        raise ConfigError(f"algo={name}: its wall-clock window skips iterations, which the wrapper's loop "
                          "cannot; run it with dreamddp-run")
    if any(cfg.moments_every) and not isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        raise ConfigError(f"algo.moments_every={list(cfg.moments_every)}: averages Adam's moments; "
                          f"the optimizer is {type(optimizer).__name__} (use Adam or AdamW)")
    if link_cls.launch_workers is not None:
        raise ConfigError(f"bandwidth.backend={link_cls.name}: its workers are started by dreamddp-run's own "
                          "launcher; in a script use the emulated link")


def _mesh_group(mesh, model, algo_cls):
    """The replicate process group of a (replicate, shard) mesh, the model sharded over it."""
    from torch.distributed.tensor import DTensor

    try:
        meshes.check_mesh(mesh)
    except ValueError as exc:
        raise ConfigError(f"group={exc}") from None
    if meshes.shards_of(mesh) > 1:
        if algo_cls.on_shards is not None:
            raise ConfigError(f"algo={algo_cls.name}: cannot run on sharded replicas ({algo_cls.on_shards})")
        params = list(model.parameters())
        if not all(isinstance(p, DTensor) for p in params):
            raise ConfigError("group=<mesh with shards>1>: shard the model first, before building the optimizer "
                              "(dreamddp.shard(model, mesh))")
        if any(p.device_mesh.ndim > 1 for p in params):  # HSDP's own all-reduce would sync the replicas
            raise ConfigError("group=<mesh with shards>1>: the model is sharded on both mesh dimensions (HSDP); "
                              "shard it over the shard dimension only (dreamddp.shard(model, mesh))")
    return meshes.replicate_group(mesh)


class _Kept:
    """The recorder the warm-up reports to: kept on the object, no run record."""

    active = False

    def __init__(self) -> None:
        self.values: dict = {}
        self.profile = None

    def set(self, key: str, value) -> None:
        self.values[key] = value

    def save_profile(self, profile, measured_in=None) -> None:
        self.profile = profile

    def save_schedule(self, made: dict) -> None:
        self.values["schedule"] = made


def _no_loss(name: str) -> Callable[[], torch.Tensor]:
    def refuse():
        raise ConfigError(f"algo={name}: its start-up runs training passes (a profile); give "
                          "wrap(..., loss_fn=...), a callable returning the loss of a fresh batch")
    return refuse


# ---- the wrapper ---------------------------------------------------------------------------------
class Sync:
    """A model and optimizer under one algorithm: ``begin()``, ``step()``, ``close()``.

    Attributes: ``engine`` (PartialSyncEngine), ``algorithm``, ``comm``, ``link``, ``units``,
    ``t`` (the iteration ``begin`` opened last), ``setup`` (what the warm-up decided, e.g.
    DreamDDP's schedule), ``profile`` (the start-up profile, where one was measured),
    ``stats`` (the last iteration's IterationStats: wait, bytes, ...)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, algo: Any = "ssgd", *,
                 link: Any = None, group=None, grad_clip: float = 0.0, loss_fn: Callable[[], torch.Tensor] | None = None,
                 warmup: WarmupConfig | None = None, comm=None):
        cfg = as_algo(algo)
        bandwidth = as_link(link)
        warmup = warmup or WarmupConfig()
        algo_cls = ALGORITHMS.lookup(cfg.name)
        algo_cls.check(cfg)
        check_warmup(warmup)
        if grad_clip < 0:
            raise ConfigError(f"grad_clip={grad_clip}: must be >= 0 (0: off)")
        link_cls = LINKS.lookup(bandwidth.backend)
        _refuse_unwrappable(cfg, algo_cls, optimizer, link_cls)
        self.mesh = None
        if group is not None and meshes.is_mesh(group):  # replicas x shards: sync over the replicate group
            self.mesh, group = group, _mesh_group(group, model, algo_cls)
        self.model, self.optimizer, self.cfg, self.bandwidth = model, optimizer, cfg, bandwidth
        device = next(model.parameters()).device

        built = comm is None  # an injected communicator comes with its link set up (tests: comm.fake)
        if built:  # the trainer's communicator over the user's process group
            from dreamddp.comm.communicator import Communicator

            self.link = build_link(bandwidth)
            late = algo_cls.merges_late(cfg)
            comm = Communicator(group, link=self.link, carrier=self.link.carrier(bandwidth.carrier, device, late),
                                hold_core=self.link.hold_core(bandwidth.hold_core, device, contended=False))
        elif group is not None or link is not None:
            raise ConfigError("comm= replaces link= and group=: give one or the other")
        else:
            self.link = comm.link
        self.comm = comm

        # Units from the model itself, in gradient-ready order when a loss is at hand; rank 0's order everywhere
        units = enumerate_units(model, loss_fn)
        if loss_fn is not None and comm.world_size > 1:
            registered = [u.name for u in enumerate_units(model)]
            where = torch.tensor([registered.index(u.name) for u in units], dtype=torch.int64, device=device)
            comm.broadcast(where, src=0)
            units = reorder_units(units, [registered[i] for i in where.tolist()])
        self.units = units
        algo_cls.check_model(cfg, lambda: ([u.name for u in units],
                                           {n for n, _ in model.named_modules()} | set(leaf_module_names(model))))

        # The engine holding nosync, every replica from rank 0's parameters (and buffers, as DDP)
        self.engine, _ = algo_cls.make_engine(model, units, comm, SimpleNamespace(device=device), cfg=cfg,
                                              sample_every=0, grad_clip=grad_clip)
        for buf in model.buffers():
            comm.broadcast(buf.data, src=0)

        # Warm-up: the link calibrates, the algorithm prepares (DreamDDP: profile, schedule)
        kept = _Kept()
        run_cfg = SimpleNamespace(warmup=warmup, model=SimpleNamespace(name=type(model).__name__, size="user"))
        rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
        try:
            session = Warmup(run_cfg, self.engine, comm, optimizer, loss_fn or _no_loss(cfg.name), kept)
            if built and self.link.needs_calibration:
                if getattr(bandwidth, "comm_ratio", None) is not None and loss_fn is None:
                    raise ConfigError(f"bandwidth.comm_ratio={bandwidth.comm_ratio}: sets the link's rate from a timed "
                                      "backward pass; give wrap(..., loss_fn=...) or bandwidth.gbps")
                kept.set("link_calibration", self.link.calibrate(session))
            self.setup = algo_cls.prepare(cfg, session)
        finally:
            torch.set_rng_state(rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state(cuda_rng, device)
        self.profile = kept.profile
        self.calibration = kept.values.get("link_calibration")
        self.algorithm = algo_cls.build(cfg, self.setup)
        self.engine.set_algorithm(self.algorithm)
        flat = self.engine.flat
        self._grad_views = flat.grad_views  # re-attached if zero_grad dropped them
        self._grad_ptr = flat.grads.untyped_storage().data_ptr()
        self.t = -1
        self.stats = None
        self._open_iteration = False
        self.closed = False

    # ---- the three calls ----
    def begin(self) -> int:
        """Before the forward: the next iteration's plan, gradients zeroed; returns its index."""
        self._open()
        if not self._grads_attached():  # optimizer.zero_grad() (set_to_none) dropped the flat views
            self._attach_grads()
        if self._open_iteration:
            raise RuntimeError(f"Sync.begin(): iteration {self.t} has not stepped (call Sync.step() after backward)")
        self.t += 1
        self.engine.begin_iteration(self.t)
        self._open_iteration = True
        return self.t

    def step(self):
        """In place of ``optimizer.step()``: what is due at the end of backward, the step (clipped
        at ``grad_clip``), what is due after it.  Returns the iteration's IterationStats."""
        self._open()
        if not self._open_iteration:
            raise RuntimeError("Sync.step(): call Sync.begin() before each iteration's forward")
        if not self._grads_attached():
            raise RuntimeError("Sync.step(): the gradients were set to None after Sync.begin() "
                               "(optimizer.zero_grad()); Sync.begin() zeroes them, drop that call")
        self.engine.end_backward()
        self.engine.step(self.optimizer)
        self.stats = self.engine.after_step()
        self._open_iteration = False
        return self.stats

    def close(self) -> None:
        """At the end: every op still in flight (late merges, outer steps) lands, so replicas end
        synced as the plan leaves them; the engine's hooks are removed.  Idempotent."""
        if not self.closed:
            self.engine.close()
            self.closed = True

    # ---- around the loop ----
    def flush(self) -> None:
        """Before an evaluation or a checkpoint: the parameters whole (nothing changes the
        trajectory: merges due later still happen where the plan says)."""
        self._open()
        self.engine.flush()

    @contextlib.contextmanager
    def evaluating(self):
        """``flush()``, then the parameters the algorithm says evaluation sees (this replica, or
        Streaming DiLoCo's global model) while inside."""
        self.flush()
        with self.algorithm.evaluation(self.engine):
            yield

    def divergence(self) -> dict:
        """Per-unit parameter divergence across replicas (a collective: every rank calls it)."""
        self.flush()
        return self.engine.divergence()

    def describe(self) -> dict:
        """What a run record says about the algorithm and the link."""
        return {"algorithm": self.algorithm.describe(), "link": self.link.describe(),
                "config": dataclasses.asdict(self.cfg), "bandwidth": dataclasses.asdict(self.bandwidth)}

    def __enter__(self) -> "Sync":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()

    # ---- internals ----
    def _open(self) -> None:
        if self.closed:
            raise RuntimeError("Sync: closed (Sync.close() ended the run)")

    def _grads_attached(self) -> bool:
        g = self._grad_views[0][0].grad
        return g is not None and local_tensor(g).untyped_storage().data_ptr() == self._grad_ptr

    def _attach_grads(self) -> None:
        for p, view in self._grad_views:
            if p.grad is not None and p.grad is not view:
                local_tensor(view).copy_(local_tensor(p.grad))
            p.grad = view


def wrap(model: torch.nn.Module, optimizer: torch.optim.Optimizer, algo: Any = "ssgd", *, link: Any = None,
         group=None, grad_clip: float = 0.0, loss_fn: Callable[[], torch.Tensor] | None = None,
         warmup: WarmupConfig | None = None, comm=None) -> Sync:
    """``model`` and ``optimizer`` (built on the model's parameters) under ``algo`` on ``link``.

    - ``algo``: an algorithm or recipe name (conf/algo/<name>.yaml, as ``algo=<name>``), or an
      algorithm's Config dataclass (:func:`algo_config` makes one with options);
    - ``link``: None (ideal, no pacing), a bandwidth name (conf/bandwidth/<name>.yaml) or a
      BandwidthConfig;
    - ``group``: the process group (None: the default group, initialised by the caller), or a
      (replicate, shard) DeviceMesh (``dreamddp.mesh(R, S)``): partial sync then runs on each
      rank's local shards over the replicate group, the model sharded first with
      ``dreamddp.shard(model, mesh)`` (FSDP2 over the shard dimension), then the optimizer built;
    - ``grad_clip``: clip the global gradient norm at this value in ``step()`` (``train.grad_clip``);
    - ``loss_fn``: a callable with no arguments returning the loss of a fresh batch (with its
      graph): the unit order is measured with it, and warm-ups that train (DreamDDP's profile,
      ``bandwidth.comm_ratio``) use it; their passes are undone;
    - ``warmup``: a WarmupConfig (``warmup.profile_iterations``: passes DreamDDP's profile times);
    - ``comm``: a communicator to use instead of building one (tests: dreamddp.comm.fake).

    Refuses (ConfigError, one line) what the wrapper cannot run: ``ddp`` and ``plain`` (off
    the engine), ``flsgd_timed`` (it skips iterations), the ``tc`` link (its own launcher).
    """
    return Sync(model, optimizer, algo, link=link, group=group, grad_clip=grad_clip, loss_fn=loss_fn,
                warmup=warmup, comm=comm)


def mesh(replicas: int, shards: int, device_type: str = "cpu"):
    """The (replicate, shard) DeviceMesh over the default process group (replicas x shards =
    world size; rank = replica * shards + shard): pass it to :func:`wrap` as ``group``."""
    return meshes.build_mesh(replicas, shards, device_type)


def shard(model: torch.nn.Module, mesh_) -> torch.nn.Module:
    """``model`` sharded with FSDP2 over the mesh's shard dimension (each unit, then the root;
    unchanged with one shard).  Before building the optimizer: the parameters become DTensors."""
    return meshes.shard_model(model, mesh_)


def replica_difference(model: torch.nn.Module, group=None) -> float:
    """The largest difference of any parameter between two replicas (0.0: they agree bitwise);
    a collective: every rank calls it.  ``group``: as :func:`wrap`'s (a mesh: each rank's
    shards against the same shards of the other replicas)."""
    import torch.distributed as dist

    if group is not None and meshes.is_mesh(group):
        group = meshes.replicate_group(group)
    params = torch.cat([local_tensor(p.detach()).reshape(-1) for p in model.parameters()])
    spread = params.clone()
    dist.all_reduce(spread, op=dist.ReduceOp.MAX, group=group)
    spread -= params
    dist.all_reduce(spread, op=dist.ReduceOp.MAX, group=group)  # max over ranks of (max over ranks - mine)
    return spread.max().item()
