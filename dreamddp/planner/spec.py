"""What ``dreamddp-plan`` predicts for: a model (its units, their parameters, their compute) and a
cluster (replicas, workers per replica, the two links, worker speeds).

A description file (yaml or json) has three sections::

    model:                        # one of three forms
      layers: [{name: layers.0, params: 1.2e7}, ...]   # forward order
      # or: n_layers: 24, params: 1.0e9               (equal layers)
      # or: n_layers: 24, d_model: 2048, vocab: 32000  (12 d^2 per layer, an embedding unit)
      bytes_per_param: 4          # what one parameter costs on the wire, uncompressed (fp32)
    compute:                      # one of two forms
      step_time_s: 0.1            # forward + backward of one iteration on one worker
      # or: tokens_per_step: 4.0e6, mfu: 0.4, peak_flops: 9.89e14
      #     (6 * params * tokens_per_step FLOPs per iteration, shared by every worker)
      backward_ratio: 2           # backward seconds per forward second
      optimizer_s: 0              # the optimizer step and the rest of an iteration
    cluster:
      replicas: 2                 # R: sites joined by the slow link
      workers_per_replica: 1      # W: workers inside a site, on the fast link
      slow: {gbps: 10, latency_ms: 0}    # across replicas: each replica's uplink
      fast: {gbps: 400, latency_ms: 0}   # inside a replica: each worker's
      alpha_ms: 0                 # fixed cost of one collective
      worker_speeds: [1, 0.8]     # optional; the slowest sets the pace

Each unit's forward and backward seconds are its share of the parameters (a transformer
layer's FLOPs are proportional to its parameters).  A measured profile directory (what
``dreamddp-schedule`` takes) replaces ``model`` and ``compute``.  Every bad value is refused
with one line naming its field (``ConfigError``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from dreamddp.checks import ConfigError, at_least, between, positive


@dataclass(frozen=True)
class Level:
    """One level of the network: each sender's rate and the latency of one ring hop."""

    gbps: float
    latency_s: float = 0.0


@dataclass(frozen=True)
class Cluster:
    replicas: int = 2
    workers_per_replica: int = 1
    slow: Level = Level(1.0)
    fast: Level = Level(400.0)
    alpha_s: float = 0.0
    worker_speeds: tuple[float, ...] = ()

    @property
    def workers(self) -> int:
        return self.replicas * self.workers_per_replica

    @property
    def pace(self) -> float:
        """The slowest worker's speed: every worker takes as many steps, so it sets the pace."""
        return min(self.worker_speeds) if self.worker_speeds else 1.0

    def at(self, gbps: float) -> "Cluster":
        """The same cluster with another slow-link rate."""
        return replace(self, slow=Level(gbps, self.slow.latency_s))


@dataclass(frozen=True)
class Model:
    """Units in FORWARD order (input side first), each with its parameter count and its share
    of the compute; ``fwd``/``bp`` seconds per unit and ``optimizer_s`` per iteration."""

    name: str
    units: tuple[str, ...]
    params: tuple[float, ...]
    fwd: tuple[float, ...]
    bp: tuple[float, ...]
    optimizer_s: float = 0.0
    bytes_per_param: float = 4.0
    fwd_rest: float = 0.0  # forward outside the units (a profile's), at the start of forward
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def total_params(self) -> float:
        return float(sum(self.params))

    @property
    def compute_s(self) -> float:
        return float(self.fwd_rest + sum(self.fwd) + sum(self.bp) + self.optimizer_s)


_SECTIONS = {"model", "compute", "cluster"}
_MODEL = {"name", "layers", "n_layers", "params", "d_model", "vocab", "bytes_per_param"}
_COMPUTE = {"step_time_s", "tokens_per_step", "mfu", "peak_flops", "backward_ratio", "optimizer_s"}
_CLUSTER = {"replicas", "workers_per_replica", "slow", "fast", "alpha_ms", "worker_speeds"}
_LEVEL = {"gbps", "latency_ms"}


def _known(where: str, given: dict, known: set) -> None:
    if not isinstance(given, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(given).__name__}")
    unknown = sorted(set(given) - known)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown field (known: {', '.join(sorted(known))})")


def _number(key: str, value, *, low: float | None = 0.0, strict: bool = True, integer: bool = False):
    """A finite number (``strict``: > low, else >= low); a string like ``1e9`` is read as yaml 1.1 leaves it."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ConfigError(f"{key}={value!r}: expected a number") from None
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{key}={value!r}: expected a finite number")
    if integer:
        if float(value) != int(value):
            raise ConfigError(f"{key}={value}: expected an integer")
        value = int(value)
        at_least(key, value, int(low or 0) + (1 if strict else 0))
        return value
    if low is not None:
        (positive(key, value) if strict and low == 0 else between(key, value, low, math.inf, open_low=strict))
    return float(value)


def _level(where: str, raw, default: Level) -> Level:
    if raw is None:
        return default
    _known(where, raw, _LEVEL)
    gbps = _number(f"{where}.gbps", raw.get("gbps", default.gbps))
    latency = _number(f"{where}.latency_ms", raw.get("latency_ms", default.latency_s * 1e3), strict=False)
    return Level(gbps, latency / 1e3)


def cluster_of(raw: dict | None) -> Cluster:
    raw = raw or {}
    _known("cluster", raw, _CLUSTER)
    base = Cluster()
    speeds = raw.get("worker_speeds") or ()
    if not isinstance(speeds, (list, tuple)):
        raise ConfigError(f"cluster.worker_speeds={speeds!r}: expected a list of speeds in (0, 1]")
    for i, s in enumerate(speeds):
        between(f"cluster.worker_speeds[{i}]", _number(f"cluster.worker_speeds[{i}]", s), 0, 1, open_low=True)
    return Cluster(
        replicas=_number("cluster.replicas", raw.get("replicas", base.replicas), integer=True),
        workers_per_replica=_number("cluster.workers_per_replica", raw.get("workers_per_replica", 1), integer=True),
        slow=_level("cluster.slow", raw.get("slow"), base.slow),
        fast=_level("cluster.fast", raw.get("fast"), base.fast),
        alpha_s=_number("cluster.alpha_ms", raw.get("alpha_ms", 0.0), strict=False) / 1e3,
        worker_speeds=tuple(float(s) for s in speeds),
    )


def _layers(raw: dict) -> tuple[list[str], list[float], dict]:
    """Unit names and parameter counts, forward order, from one of the three forms."""
    if "layers" in raw:
        other = sorted(set(raw) & {"n_layers", "params", "d_model", "vocab"})
        if other:
            raise ConfigError(f"model.{other[0]}: give either model.layers or the compact form, not both")
        layers = raw["layers"]
        if not isinstance(layers, list) or not layers:
            raise ConfigError(f"model.layers={layers!r}: expected a non-empty list of {{name, params}}")
        names, params = [], []
        for i, layer in enumerate(layers):
            _known(f"model.layers[{i}]", layer, {"name", "params"})
            if "name" not in layer or not isinstance(layer["name"], str) or not layer["name"]:
                raise ConfigError(f"model.layers[{i}].name: missing (each layer needs a name)")
            names.append(layer["name"])
            params.append(_number(f"model.layers[{i}].params", layer.get("params")))
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ConfigError(f"model.layers: the name {dup!r} appears twice")
        return names, params, {}
    if "n_layers" not in raw:
        raise ConfigError("model.n_layers: missing (give model.layers, or model.n_layers with model.params "
                          "or model.d_model)")
    n = _number("model.n_layers", raw["n_layers"], integer=True)
    if ("params" in raw) == ("d_model" in raw):
        raise ConfigError("model.params: give exactly one of model.params (split into equal layers) and model.d_model")
    if "params" in raw:
        if "vocab" in raw:
            raise ConfigError("model.vocab: only with model.d_model (model.params already counts everything)")
        each = _number("model.params", raw["params"]) / n
        return [f"layers.{i}" for i in range(n)], [each] * n, {}
    d = _number("model.d_model", raw["d_model"], integer=True)
    names, params = [f"layers.{i}" for i in range(n)], [12.0 * d * d] * n
    if "vocab" in raw:  # the embedding: joins the first block (algorithms/fragments.py)
        vocab = _number("model.vocab", raw["vocab"], integer=True)
        names, params = ["embed"] + names, [float(vocab * d)] + params
    return names, params, {"d_model": d}


def model_of(raw: dict, compute: dict | None, workers: int, name: str = "model") -> Model:
    _known("model", raw, _MODEL)
    compute = compute or {}
    _known("compute", compute, _COMPUTE)
    names, params, extra = _layers(raw)
    total = float(sum(params))
    ratio = _number("compute.backward_ratio", compute.get("backward_ratio", 2.0))
    optimizer = _number("compute.optimizer_s", compute.get("optimizer_s", 0.0), strict=False)
    flops_keys = {"tokens_per_step", "mfu", "peak_flops"}
    if "step_time_s" in compute:
        given = sorted(flops_keys & set(compute))
        if given:
            raise ConfigError(f"compute.{given[0]}: give either compute.step_time_s or the FLOPs form, not both")
        passes = _number("compute.step_time_s", compute["step_time_s"])
    else:
        missing = sorted(flops_keys - set(compute))
        if missing:
            raise ConfigError(f"compute.{missing[0]}: missing (give compute.step_time_s, or tokens_per_step, mfu "
                              "and peak_flops)")
        tokens = _number("compute.tokens_per_step", compute["tokens_per_step"])
        mfu = _number("compute.mfu", compute["mfu"])
        between("compute.mfu", mfu, 0, 1, open_low=True)
        peak = _number("compute.peak_flops", compute["peak_flops"])
        # 6 N D per iteration (Kaplan et al. 2020), D the iteration's tokens over every worker
        passes = 6.0 * total * tokens / (workers * mfu * peak)
        extra = {**extra, "flops_per_step": 6.0 * total * tokens}
    fwd_total = passes / (1.0 + ratio)
    fwd = tuple(fwd_total * p / total for p in params)
    bp = tuple(ratio * f for f in fwd)
    bpp = _number("model.bytes_per_param", raw.get("bytes_per_param", 4))
    return Model(str(raw.get("name", name)), tuple(names), tuple(params), fwd, bp, optimizer, bpp,
                 extra={**extra, "step_time_s": passes})


def read_mapping(path) -> dict:
    """A yaml or json file as a mapping (json is yaml; the error names the file)."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"description file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text()) if p.suffix not in (".json",) else json.loads(p.read_text())
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        raise ConfigError(f"{p}: not valid {'JSON' if p.suffix == '.json' else 'yaml'} "
                          f"({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping with model, compute and cluster")
    return data


def load_description(path) -> tuple[Model, Cluster]:
    data = read_mapping(path)
    _known(str(Path(path).name), data, _SECTIONS)
    if "model" not in data:
        raise ConfigError("model: missing (the description needs a model section)")
    cluster = cluster_of(data.get("cluster"))
    return model_of(data["model"], data.get("compute"), cluster.workers, Path(path).stem), cluster


def model_of_profile(path_dir) -> Model:
    """A measured profile directory as a Model: its units, bytes and measured compute."""
    from dreamddp.schedule.profile import load_profile

    profile = load_profile(path_dir)
    if not profile.nbytes:
        raise ConfigError(f"{path_dir}: the profile has no nbytes.json, so its units' bytes are unknown")
    forward = list(reversed(profile.units))
    bpp = 4.0
    fwd = tuple(profile.fwd.get(u, 0.0) for u in forward)
    rest = max(0.0, float(sum(profile.fwd.values())) - sum(fwd))
    return Model(Path(path_dir).name, tuple(forward), tuple(profile.nbytes.get(u, 0) / bpp for u in forward),
                 fwd, tuple(profile.bp.get(u, 0.0) for u in forward), profile.step_time, bpp, rest,
                 extra={"profile": str(path_dir)})
