"""Hydra's own refusals of an override, in one line naming the field.

Hydra and the typed schema refuse an unknown key, a value of the wrong type
or an override they cannot parse, but report it over several lines (the
exception, ``full_key``, ``reference_type``, ``object_type``) with exit
status 1.  ``compose_checked`` composes the job first the way Hydra will, and
turns such a refusal into the shape every other check has:
``<override>: <why>``, e.g. ``algo.bucket_mb=1: algo (flsgd) has no key
bucket_mb (its keys: name, H)``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from omegaconf import DictConfig
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from dreamddp.checks import ConfigError


def _override_of(key: str | None, overrides: Sequence[str]) -> str:
    """The override the user typed for ``key`` (``+``/``++``/``~`` prefixes allowed), else ``key``:
    the one naming it exactly, else one naming a node above it (``train={a: 1}``) or below it
    (``trian.lr=1`` when ``trian`` is the missing key)."""
    if not key:
        return ""
    names = [(token, token.lstrip("+~").split("=", 1)[0]) for token in reversed(overrides)]
    for token, name in names:
        if name == key:
            return token
    for token, name in names:
        if key.startswith(f"{name}.") or name.startswith(f"{key}."):
            return token
    return key


def _first_line(text: str) -> str:
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def composition_error(exc: BaseException, overrides: Sequence[str], swept: Collection[str] = ()) -> ConfigError:
    """One line for an exception Hydra raised while composing ``overrides``; ``swept``: the
    groups a multirun sweeps over, which Hydra leaves at their defaults in a sweep's shared
    config (an option of the swept choices alone needs Hydra's force-add there)."""
    cause: BaseException | None = exc
    while cause is not None and not (isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None)):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        # an override Hydra cannot parse names no key: find the one that fails alone
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parser = OverridesParser.create()
        for token in overrides:
            try:
                parser.parse_overrides([token])
            except Exception as parse_error:  # noqa: BLE001  the grammar's own words follow
                return ConfigError(f"{token}: cannot parse it ({_first_line(parse_error)})")
        return ConfigError(_first_line(exc))
    key = str(cause.full_key)
    typed = _override_of(key, overrides)
    if isinstance(cause, (ConfigKeyError, AttributeError)):  # ConfigAttributeError is both
        node = getattr(cause, "parent_node", None)
        error = unknown_key(typed, key, node if isinstance(node, DictConfig) else None)
        group = key.split(".", 1)[0]
        if group in swept and not typed.startswith("+"):
            return ConfigError(f"{error}; a sweep first composes its shared config with the default {group}, "
                               f"before choosing each job's: write ++{typed}")
        return error
    return ConfigError(f"{typed}: {_first_line(getattr(cause, 'msg', '') or cause)}")


def unknown_key(typed: str, key: str, node: DictConfig | None, keys: Sequence[str] | None = None) -> ConfigError:
    """``typed``: e.g. ``algo.bucket_mb=1``; ``key``: its full key; ``node``: the node it is
    missing from, whose keys (or ``keys``) are listed: ``algo (flsgd) has no key bucket_mb``."""
    parent, _, name = key.rpartition(".")
    if keys is None:
        keys = [k for k in node if k != "hydra"] if node is not None else []
    where = parent or "the config"
    named = node.get("name", None) if node is not None and parent else None
    if isinstance(named, str):  # a group's node says which option it is
        where = f"{parent} ({named})"
    listed = f" (its keys: {', '.join(map(str, keys))})" if keys else ""
    return ConfigError(f"{typed}: {where} has no key {name}{listed}")


def compose_checked(config_dir: str, config_name: str, overrides: Sequence[str], multirun: bool = False) -> DictConfig:
    """The config as Hydra composes it; a refusal raises ConfigError (one line).  ``multirun``:
    the sweep's shared config, which Hydra composes without the sweep overrides (``a=1,2``)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    swept: set[str] = set()
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
        sweeps = [o for o in parsed if o.is_sweep_override()]
        if sweeps and not multirun:
            raise ConfigError(f"{sweeps[0].input_line}: several values; add -m to sweep over them "
                              "(or write [a,b] for a list, or quote them for one string)")
        swept = {o.key_or_group for o in sweeps}
        overrides = [o.input_line for o in parsed if not o.is_sweep_override()]
        with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
            return compose(config_name, overrides=list(overrides))
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001  Hydra's and OmegaConf's refusals, made one line
        raise composition_error(exc, overrides, swept) from None
