"""A config group's option by name, as ``dreamddp-run <group>=<name> <group>.<key>=<value>...``
composes it: the library's options (dreamddp.wrap's ``algo="diloco"``, ``link="1gbit"``) are the
Hydra config's own dataclasses, and a name stands for the yaml the CLI would compose."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from dreamddp.algorithms import AlgoConfig
from dreamddp.checks import ConfigError
from dreamddp.config import CONFIG_NAME, conf_dir
from dreamddp.config.overrides import compose_checked
from dreamddp.config.schema import BandwidthConfig


def _compose(overrides: list[str]) -> DictConfig:
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():  # inside a Hydra app: it composed them already
        raise ConfigError(f"{' '.join(overrides)}: names are composed with Hydra, which this process already "
                          "runs; pass the Config itself (OmegaConf.to_object(cfg.algo), cfg.bandwidth)")
    return compose_checked(conf_dir(), CONFIG_NAME, overrides)


def _named(group: str, name: str) -> None:
    """``name`` must be a yaml of ``conf/<group>`` (one line listing them, as the CLI's refusal)."""
    from pathlib import Path

    known = sorted(p.stem for p in Path(conf_dir(), group).glob("*.yaml"))
    if name not in known:
        raise ConfigError(f"{group}={name}: no such option (one of: {', '.join(known)})")


def _with(node: DictConfig, options: dict, group: str):
    """``node`` (a typed config node) with ``options`` merged in, type-checked as the CLI's
    ``group.key=value`` would be, as its dataclass."""
    try:
        merged = OmegaConf.merge(node, options) if options else node
    except Exception as exc:  # noqa: BLE001  OmegaConf's refusals, one line
        raise ConfigError(f"{group}: {str(exc).splitlines()[0]}") from None
    return OmegaConf.to_object(merged)


def algo_config(name: str, **options) -> AlgoConfig:
    """The algorithm's Config dataclass as ``dreamddp-run algo=<name> algo.<key>=<value>...``
    composes it: ``name`` an algorithm (``flsgd``) or a recipe (``diloco``, a conf/algo yaml
    with ``recipe:``)."""
    _named("algo", name)
    return _with(_compose([f"algo={name}"]).algo, options, f"algo={name}")


def bandwidth_config(name: str, **options) -> BandwidthConfig:
    """The BandwidthConfig ``dreamddp-run bandwidth=<name> bandwidth.<key>=<value>...`` composes."""
    _named("bandwidth", name)
    return _with(_compose([f"bandwidth={name}"]).bandwidth, options, f"bandwidth={name}")


def as_algo(algo) -> AlgoConfig:
    """``algo`` as wrap() takes it (a name, a composed cfg.algo or a Config) as its Config dataclass."""
    if isinstance(algo, str):
        return algo_config(algo)
    if isinstance(algo, DictConfig):  # a composed cfg.algo
        algo = OmegaConf.to_object(algo)
    if not isinstance(algo, AlgoConfig):
        raise ConfigError(f"algo={algo!r}: an algorithm or recipe name, or an algorithm's Config dataclass")
    return algo


def as_link(link) -> BandwidthConfig:
    """``link`` as wrap() takes it (None: ideal, a name, a composed cfg.bandwidth or a BandwidthConfig)."""
    if link is None:
        return BandwidthConfig()  # ideal: no pacing
    if isinstance(link, str):
        return bandwidth_config(link)
    if isinstance(link, DictConfig):
        link = OmegaConf.to_object(link)
    if not isinstance(link, BandwidthConfig):
        raise ConfigError(f"link={link!r}: a bandwidth name (conf/bandwidth) or a BandwidthConfig")
    return link
