"""Session-wide test environment and a Hydra compose helper.

Offline and W&B-disabled for every test (and every subprocess a test starts),
one thread per process because the test machine is shared.
"""

from __future__ import annotations

import os

# Set before anything imports transformers/datasets/wandb, so they see it.
for _key, _value in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "WANDB_MODE": "disabled",
    "OMP_NUM_THREADS": "1",
}.items():
    os.environ[_key] = _value

from dreamddp import _compat  # noqa: E402,F401  (torchvision import fix first)

import pytest  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from dreamddp.config import CONFIG_NAME, conf_dir  # noqa: E402


@pytest.fixture
def compose_cfg():
    """``compose_cfg(overrides, hydra=False) -> DictConfig`` of conf/config.yaml.

    With ``hydra=True`` the ``hydra`` node is kept (run dir, callbacks...).
    """

    def _compose(overrides: list[str] | None = None, hydra: bool = False) -> DictConfig:
        with initialize_config_dir(config_dir=conf_dir(), version_base="1.3"):
            return compose(CONFIG_NAME, overrides=list(overrides or []), return_hydra_config=hydra)

    return _compose
