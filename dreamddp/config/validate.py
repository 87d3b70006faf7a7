"""Refuse a bad configuration with one line naming the field, before any worker starts.

Hydra and the typed schema already reject unknown keys, wrong types and
unknown group options.  Every rule on a component's own fields lives with the
component (``check`` in dreamddp.models, .data, .optim, .train, .dist_env,
.wandb_log, each link type and each algorithm); this module calls them and
keeps only what spans components or looks at the host: missing values, model
x data, algorithm x link, CUDA, a schedule file against the model's units,
checkpoints to resume, traffic shaping and data on disk.
"""

from __future__ import annotations

import dataclasses

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from dreamddp.checks import ConfigError, at_least
from dreamddp.config.overrides import unknown_key
from dreamddp.config.schema import Config


def _check_missing(cfg: DictConfig) -> None:
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ConfigError(f"{missing[0]}: no value set (it has no default; pick a group option or set it)")


def _check_known_keys(cfg: DictConfig, kind=None, prefix: str = "") -> None:
    """Every key is one its typed node declares (``kind``: the root's type, which a masked
    copy of the config no longer carries).  Composition refuses others, but Hydra's force-add
    (``++algo.bucket_mb=1``, how a sweep over ``algo`` sets an option only some of its
    algorithms have) adds the key to every job's node, declared or not."""
    kind = kind or OmegaConf.get_type(cfg)
    declared = [f.name for f in dataclasses.fields(kind)] if dataclasses.is_dataclass(kind) else None
    for key, value in OmegaConf.to_container(cfg, resolve=False).items():
        full = f"{prefix}{key}"
        if declared is not None and key not in declared and not (key == "hydra" and not prefix):
            raise unknown_key(f"{full}={value}", full, cfg, declared)
        if isinstance(value, dict):
            _check_known_keys(cfg[key], prefix=f"{full}.")


def _check_components(cfg: DictConfig) -> None:
    from dreamddp import data, models, optim, warmup
    from dreamddp.run import dist_env, train, wandb_log
    from dreamddp.algorithms import ALGORITHMS
    from dreamddp.comm.links import LINKS

    models.check(cfg.model)  # first: model yamls' recipes resolve by model.size
    at_least("seed", cfg.seed, 0)
    dist_env.check(cfg.cluster)
    train.check(cfg.train)
    optim.check(cfg.train)
    wandb_log.check(cfg.wandb)
    warmup.check(cfg.warmup)
    task = models.MODELS[cfg.model.name].task
    data.check(cfg.data, task)
    if task == "lm":
        models.check_block_size(cfg.model.name, cfg.model.size, cfg.data.block_size)
    link = LINKS.lookup(cfg.bandwidth.backend)
    link.check(cfg.bandwidth, cfg.cluster)
    algo = ALGORITHMS.lookup(cfg.algo.name)
    algo.check(cfg.algo)
    if cfg.cluster.shards > 1 and link.launch_workers is not None:
        raise ConfigError(f"bandwidth.backend={cfg.bandwidth.backend}: shapes every byte a worker sends, FSDP's "
                          f"traffic inside a replica too (cluster.shards={cfg.cluster.shards}); the emulated link "
                          "paces the replicas' partial sync only")
    if cfg.cluster.shards > 1 and algo.on_shards is not None:
        raise ConfigError(f"algo={cfg.algo.name}: cannot run with cluster.shards={cfg.cluster.shards} "
                          f"({algo.on_shards})")
    inner = algo.optimizer_name(cfg.algo, cfg.train)
    if any(cfg.algo.moments_every) and inner not in ("adam", "adamw"):
        raise ConfigError(f"algo.moments_every={list(cfg.algo.moments_every)}: averages Adam's moments; "
                          f"train.optimizer={inner} keeps none (use adam or adamw)")
    if link.paced and algo.syncs_itself:
        raise ConfigError(f"algo={cfg.algo.name} is not paced by the {link.name} link (it talks to the process "
                          "group itself); use bandwidth=ideal or a tc_* preset")
    algo.check_model(cfg.algo, lambda: _layout(cfg))


def _layout(cfg: DictConfig) -> tuple[list[str], set[str]]:
    """Unit and module names of the configured model, built on the meta device (no memory, no init)."""
    import torch

    from dreamddp.engine.units import leaf_module_names
    from dreamddp.models import build_model, model_args, model_units

    with torch.device("meta"):
        model = build_model(**model_args(cfg))
    names = [u.name for u in model_units(model)]
    return names, {n for n, _ in model.named_modules()} | set(leaf_module_names(model))


def _check_device(cfg: DictConfig) -> None:
    c = cfg.cluster
    if c.device != "cuda" and c.dist_backend != "nccl":
        return
    import torch

    if not torch.cuda.is_available():
        key, value = ("cluster.device", c.device) if c.device == "cuda" else ("cluster.dist_backend", c.dist_backend)
        raise ConfigError(f"{key}={value}: CUDA is not available on this host; use cluster.device=cpu")
    from dreamddp.run.dist_env import nccl_fits

    gpus = torch.cuda.device_count()
    if c.name == "local" and c.dist_backend == "nccl" and not nccl_fits(c.nproc, gpus):
        raise ConfigError(f"cluster.dist_backend=nccl: {c.nproc} workers on {gpus} GPU(s), and NCCL refuses two ranks "
                          f"on one device; use cluster.dist_backend=auto (gloo when workers share a GPU)")


def _check_data_available(cfg: DictConfig) -> None:
    from dreamddp.data import check_available

    try:
        check_available(cfg.data.name, cfg.data.root)
    except ValueError as exc:  # DataUnavailable is a ValueError
        text = str(exc)
        raise ConfigError(text if text.startswith("data") else f"data={cfg.data.name}: {text}") from exc


def _check_shards(cfg: DictConfig) -> None:
    """Every worker's shard of the training split must hold one batch.  Launcher only: it
    loads the split once (the cache the launcher's data preparation makes anyway)."""
    from dreamddp.data import build_data, data_args
    from dreamddp.run.dist_env import worker_env
    from dreamddp.models import MODELS

    if worker_env() is not None:
        return
    world = int(cfg.cluster.nproc) * int(cfg.cluster.nnodes)
    try:  # equal shards: all ranks' are the same size, so the last one speaks for all
        build_data(**data_args(cfg, task=MODELS[cfg.model.name].task, rank=world - 1, world_size=world))
    except ValueError as exc:
        if str(exc).startswith("batch_size="):
            raise ConfigError(f"train.{exc}") from None
        raise


def _check_host_link(cfg: DictConfig) -> None:
    from dreamddp.comm.links import LINKS
    from dreamddp.run.dist_env import worker_env

    # The launcher probes the host once; workers already run inside what it set up.
    if worker_env() is None:
        LINKS.lookup(cfg.bandwidth.backend).check_host(cfg)


def _check_resume(cfg: DictConfig) -> None:
    if cfg.train.resume is None:
        return
    from dreamddp.run.checkpoint import CheckpointError, check_resume

    try:
        check_resume(cfg, int(cfg.cluster.nproc) * int(cfg.cluster.nnodes))
    except CheckpointError as exc:
        raise ConfigError(str(exc)) from exc


def validate(cfg: DictConfig, host: bool = True) -> None:
    """Raise ConfigError (one line, naming the field) when ``cfg`` cannot run.

    ``host=False``: only the rules that hold wherever the job runs (the fields, model x data,
    algorithm x link), for a sweep checked on a login node whose jobs run elsewhere: CUDA,
    checkpoints, traffic shaping and data are the job's host's to check."""
    try:
        _validate(cfg, host)
    except InterpolationResolutionError as exc:  # a resolver's own ConfigError (e.g. ddp_by_size)
        inner = exc
        while inner is not None and not isinstance(inner, ConfigError):
            inner = inner.__cause__ or inner.__context__
        raise (inner or ConfigError(str(exc).splitlines()[0])) from None


def _validate(cfg: DictConfig, host: bool) -> None:
    _check_known_keys(cfg, Config)
    _check_missing(cfg)
    _check_components(cfg)
    if not host:
        return
    _check_device(cfg)
    _check_resume(cfg)
    _check_host_link(cfg)
    _check_data_available(cfg)
    _check_shards(cfg)
