"""Refuse a bad configuration with one line naming the field, before any worker starts.

Hydra and the schema already reject unknown keys, wrong types and unknown
group options; this adds ranges, choices and cross-field rules.  Cheap local
checks run first; the registries (models, data, algorithms, which import
torch) are consulted last, and the data check may look at the disk.
"""

from __future__ import annotations

import math
import os

from omegaconf import DictConfig, OmegaConf

OPTIMIZERS = ("sgd", "adam", "adamw")
LR_SCHEDULES = ("constant", "cosine", "step")
BACKENDS = ("ideal", "emulated", "tc")
DEVICES = ("auto", "cpu", "cuda")
DIST_BACKENDS = ("auto", "gloo", "nccl")
WANDB_MODES = ("offline", "online", "disabled")
CLUSTERS = ("local", "slurm")


class ConfigError(ValueError):
    """A configuration the run must not start with; ``str(e)`` is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


def _at_least(cfg: DictConfig, key: str, low: float) -> None:
    value = OmegaConf.select(cfg, key)
    if value is None or value < low:
        raise ConfigError(f"{key}={value}: must be >= {low}")


def _positive(cfg: DictConfig, key: str, optional: bool = False) -> None:
    value = OmegaConf.select(cfg, key)
    if value is None and optional:
        return
    if value is None or not value > 0:
        raise ConfigError(f"{key}={value}: must be > 0")


def _choice(cfg: DictConfig, key: str, choices: tuple[str, ...]) -> None:
    value = OmegaConf.select(cfg, key)
    if value not in choices:
        raise ConfigError(f"{key}={value}: unknown value; choose from {', '.join(choices)}")


def _check_missing(cfg: DictConfig) -> None:
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ConfigError(f"{missing[0]}: no value set (it has no default; pick a group option or set it)")


def _check_local(cfg: DictConfig) -> None:
    _at_least(cfg, "seed", 0)
    _choice(cfg, "cluster.name", CLUSTERS)
    for key in ("cluster.nproc", "cluster.nnodes", "cluster.threads_per_worker"):
        _at_least(cfg, key, 1)
    port = cfg.cluster.master_port
    if not 0 <= port <= 65535:
        raise ConfigError(f"cluster.master_port={port}: must be 0 (pick a free port) or 1..65535")
    _choice(cfg, "cluster.device", DEVICES)
    _choice(cfg, "cluster.dist_backend", DIST_BACKENDS)

    t = cfg.train
    for key in ("train.iterations", "train.batch_size", "train.log_every"):
        _at_least(cfg, key, 1)
    for key in ("train.eval_every", "train.divergence_every", "train.warmup_iterations",
                "train.weight_decay", "train.grad_clip"):
        _at_least(cfg, key, 0)
    _positive(cfg, "train.lr")
    _choice(cfg, "train.optimizer", OPTIMIZERS)
    _choice(cfg, "train.lr_schedule", LR_SCHEDULES)
    if not 0 <= t.momentum < 1:
        raise ConfigError(f"train.momentum={t.momentum}: must be in [0, 1)")
    if t.warmup_iterations > t.iterations:
        raise ConfigError(
            f"train.warmup_iterations={t.warmup_iterations}: exceeds train.iterations={t.iterations}"
        )

    _at_least(cfg, "train.checkpoint_every", 0)
    _at_least(cfg, "train.checkpoint_keep", 0)

    _at_least(cfg, "algo.H", 1)
    _positive(cfg, "algo.bucket_mb")
    _at_least(cfg, "algo.profile_iterations", 1)
    schedule = cfg.algo.schedule
    if schedule is not None and not os.path.isfile(schedule):
        raise ConfigError(f"algo.schedule={schedule}: file not found")
    _check_diloco(cfg)

    _check_bandwidth(cfg)
    _choice(cfg, "wandb.mode", WANDB_MODES)

    for key in ("data.block_size", "data.eval_batches", "data.synthetic_size"):
        _at_least(cfg, key, 1)
    frac = cfg.data.eval_fraction
    if not 0 < frac < 1:
        raise ConfigError(f"data.eval_fraction={frac}: must be in (0, 1)")
    if cfg.model.vocab_size is not None:
        _at_least(cfg, "model.vocab_size", 1)


def _check_diloco(cfg: DictConfig) -> None:
    """Streaming DiLoCo's options (checked whatever the algorithm: they are plain ranges)."""
    a = cfg.algo
    if not 1 <= a.fragments <= a.H:
        raise ConfigError(f"algo.fragments={a.fragments}: must be between 1 and algo.H={a.H}")
    if not 0 <= a.tau < a.H:
        raise ConfigError(f"algo.tau={a.tau}: must be between 0 and algo.H-1={a.H - 1}")
    if not 0 <= a.alpha <= 1:
        raise ConfigError(f"algo.alpha={a.alpha}: must be in [0, 1]")
    _positive(cfg, "algo.outer_lr")
    if not 0 <= a.outer_momentum < 1:
        raise ConfigError(f"algo.outer_momentum={a.outer_momentum}: must be in [0, 1)")
    _choice(cfg, "algo.quantize", ("none", "fp16", "e3m0"))
    _choice(cfg, "algo.fragment_pattern", ("sequential", "strided"))
    _at_least(cfg, "algo.quant_block", 0)


def _check_bandwidth(cfg: DictConfig) -> None:
    b = cfg.bandwidth
    _choice(cfg, "bandwidth.backend", BACKENDS)
    _positive(cfg, "bandwidth.gbps", optional=True)
    _positive(cfg, "bandwidth.comm_ratio", optional=True)
    _positive(cfg, "bandwidth.calibration")
    _at_least(cfg, "bandwidth.latency_ms", 0)
    if b.backend == "emulated" and cfg.algo.name == "ddp":
        raise ConfigError("algo=ddp is not paced by the emulated link (DDP talks to the process group itself); "
                          "use bandwidth=ideal or a tc_* preset")
    if b.backend == "emulated" and b.gbps is None and b.comm_ratio is None:
        raise ConfigError("bandwidth.gbps: required for backend emulated (or set bandwidth.comm_ratio)")
    if b.gbps is not None and b.comm_ratio is not None:
        raise ConfigError(
            f"bandwidth.comm_ratio={b.comm_ratio}: set either bandwidth.gbps or bandwidth.comm_ratio, not both"
        )
    if b.backend == "tc":
        if b.gbps is None:
            raise ConfigError("bandwidth.gbps: required for backend tc (a fixed rate for the shaper)")
        if b.latency_ms:
            raise ConfigError(
                f"bandwidth.latency_ms={b.latency_ms}: not supported by backend tc (tbf only); use emulated"
            )
        if cfg.cluster.nnodes > 1:  # also checked in workers: srun must not start unshaped tc runs
            raise ConfigError(
                f"cluster.nnodes={cfg.cluster.nnodes}: bandwidth backend tc shapes namespaces on one host; "
                "use the emulated link across nodes (bandwidth=1gbit)"
            )
    _check_worker_gbps(cfg)


def _check_worker_gbps(cfg: DictConfig) -> None:
    rates = cfg.bandwidth.worker_gbps
    if rates is None:
        return
    if cfg.bandwidth.backend != "tc":
        raise ConfigError(
            f"bandwidth.worker_gbps: per-worker rates need bandwidth backend tc "
            f"(the {cfg.bandwidth.backend} link has one rate for all workers)"
        )
    if len(rates) != cfg.cluster.nproc:
        raise ConfigError(
            f"bandwidth.worker_gbps: {len(rates)} rates for cluster.nproc={cfg.cluster.nproc} (one per worker)"
        )
    for i, g in enumerate(rates):
        if not (g > 0 and math.isfinite(g)):
            raise ConfigError(f"bandwidth.worker_gbps[{i}]={g}: must be a finite number > 0")


def _check_device(cfg: DictConfig) -> None:
    c = cfg.cluster
    wants_cuda = c.device == "cuda" or c.dist_backend == "nccl"
    if not wants_cuda:
        return
    import torch

    if not torch.cuda.is_available():
        key = "cluster.device" if c.device == "cuda" else "cluster.dist_backend"
        value = c.device if c.device == "cuda" else c.dist_backend
        raise ConfigError(f"{key}={value}: CUDA is not available on this host; use cluster.device=cpu")
    if c.device == "cpu" and c.dist_backend == "nccl":
        raise ConfigError("cluster.dist_backend=nccl: needs cluster.device=cuda (use gloo on cpu)")


def _check_registries(cfg: DictConfig) -> None:
    from dreamddp.algorithms import ALGORITHMS
    from dreamddp.data import DATASETS
    from dreamddp.models import MODELS, SIZES, max_positions

    m, d = cfg.model, cfg.data
    if cfg.algo.name not in ALGORITHMS:
        raise ConfigError(f"algo.name={cfg.algo.name}: unknown algorithm; choose from {', '.join(ALGORITHMS)}")
    if m.name not in MODELS:
        raise ConfigError(f"model.name={m.name}: unknown model; choose from {', '.join(MODELS)}")
    if m.size not in SIZES:
        raise ConfigError(f"model.size={m.size}: unknown size; choose from {', '.join(SIZES)}")
    if d.name not in DATASETS:
        raise ConfigError(f"data.name={d.name}: unknown dataset; choose from {', '.join(DATASETS)}")
    model_task, data_task = MODELS[m.name].task, DATASETS[d.name].task
    if data_task not in ("any", model_task):
        raise ConfigError(
            f"data={d.name} does not fit model={m.name} ({data_task} data, {model_task} model)"
        )
    if m.vocab_size is not None and model_task != "lm":
        raise ConfigError(f"model.vocab_size={m.vocab_size}: only language models take a vocabulary size")
    limit = max_positions(m.name, m.size)
    if model_task == "lm" and limit is not None and d.block_size > limit:
        raise ConfigError(
            f"data.block_size={d.block_size}: exceeds the {limit} positions of model={m.name} size={m.size}"
        )


def _check_data_available(cfg: DictConfig) -> None:
    from dreamddp.data import check_available

    try:
        check_available(cfg.data.name, cfg.data.root)
    except ValueError as exc:  # DataUnavailable is a ValueError
        text = str(exc)
        raise ConfigError(text if text.startswith("data") else f"data={cfg.data.name}: {text}") from exc


def _check_tc(cfg: DictConfig) -> None:
    from dreamddp.dist_env import worker_env

    # The launcher probes the host once; workers already run inside shaped namespaces.
    if cfg.bandwidth.backend != "tc" or worker_env() is not None:
        return
    from dreamddp.netshape import TcUnavailable, check_tc_available

    try:
        check_tc_available(int(cfg.cluster.nnodes))  # not root without user namespaces, no tbf, ...
    except TcUnavailable as exc:
        raise ConfigError(str(exc)) from exc


def _check_resume(cfg: DictConfig) -> None:
    if cfg.train.resume is None:
        return
    from dreamddp.checkpoint import CheckpointError, check_resume

    try:
        check_resume(cfg, int(cfg.cluster.nproc) * int(cfg.cluster.nnodes))
    except CheckpointError as exc:
        raise ConfigError(str(exc)) from exc


def validate(cfg: DictConfig) -> None:
    """Raise ConfigError (one line, naming the field) when ``cfg`` cannot run."""
    _check_missing(cfg)
    _check_local(cfg)
    _check_device(cfg)
    _check_registries(cfg)
    _check_resume(cfg)
    _check_tc(cfg)
    _check_data_available(cfg)
