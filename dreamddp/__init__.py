"""dreamddp: data-parallel training over slow links on one partial-synchronisation engine.

Importing the package loads nothing heavy: the planning tools run without
torch.  Modules that import torchvision or transformers import
``dreamddp._compat`` first.

The library API (docs/library.md) is loaded on first use::

    sync = dreamddp.wrap(model, optimizer, algo="diloco")   # dreamddp.library
"""

__version__ = "0.1.0"

# name -> its module: loaded at first attribute access (PEP 562), so `import dreamddp` stays torch-free
_LAZY = {name: "dreamddp.library" for name in ("wrap", "Sync", "replica_difference",
                                                   "mesh", "shard")}
_LAZY.update({name: "dreamddp.config.schema" for name in ("BandwidthConfig", "WarmupConfig")})
_LAZY.update({name: "dreamddp.config.named" for name in ("algo_config", "bandwidth_config")})
_LAZY.update({"AlgoConfig": "dreamddp.algorithms", "ConfigError": "dreamddp.checks"})

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dreamddp' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
