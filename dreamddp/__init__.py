"""dreamddp: data-parallel training over slow links on one partial-synchronisation engine.

Importing the package loads nothing heavy: the planning tools run without
torch.  Modules that import torchvision or transformers import
``dreamddp._compat`` first.
"""

__version__ = "0.1.0"
