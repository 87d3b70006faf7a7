"""The registry of datasets (``data=`` option -> Dataset class, see base.Dataset)."""

from dreamddp.registry import Registry

DATASETS: Registry = Registry("dataset", "data")
