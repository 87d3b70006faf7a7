"""dreamddp: data-parallel training over slow links on one partial-synchronisation engine."""

from dreamddp import _compat  # noqa: F401  (must run before anything imports torchvision)

__version__ = "0.1.0"
