"""Configuration: typed schema, resolvers, validation, and where conf/ lives.

Importing this package registers the schema and the resolvers with Hydra and
OmegaConf (both idempotent), so any entry point or test that composes
conf/config.yaml only needs ``import dreamddp.config`` first.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dreamddp.config.resolvers import register_resolvers, repo_root
from dreamddp.config.schema import SCHEMA_NAME, Config, register_schema
from dreamddp.checks import ConfigError
from dreamddp.config.validate import validate

CONFIG_NAME = "config"


def conf_dir() -> str:
    """Absolute path of the Hydra config tree: ``<repo>/conf`` in a checkout or
    editable install, ``<prefix>/share/dreamddp/conf`` when installed from a wheel."""
    candidates = (Path(__file__).resolve().parents[2] / "conf", Path(sys.prefix) / "share" / "dreamddp" / "conf")
    for candidate in candidates:
        if (candidate / f"{CONFIG_NAME}.yaml").is_file():
            return str(candidate)
    raise FileNotFoundError(f"no {CONFIG_NAME}.yaml in {' or '.join(map(str, candidates))}")


def setup() -> None:
    register_schema()
    register_resolvers()


setup()

__all__ = [
    "CONFIG_NAME", "SCHEMA_NAME", "Config", "ConfigError", "conf_dir", "repo_root", "setup", "validate",
]
