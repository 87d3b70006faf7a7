"""Import-order workaround for the CPU torch + torchvision 0.28 pairing.

torchvision 0.28's compiled extension does not load against the local CPU
build of torch; its Python code then registers fake kernels for operators
(``torchvision::nms`` ...) that were never defined and the import fails with
"operator torchvision::nms does not exist".  transformers imports torchvision
too, so every entry point imports this module first.

The fix defines the missing ``torchvision`` operator schemas ourselves when the
compiled extension is missing, so torchvision's pure-Python parts (models,
datasets, transforms) import and work.  The C++ ops (nms, roi_align, ...) stay
unavailable (calling one raises); nothing in dreamddp uses them.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _install() -> None:
    if importlib.util.find_spec("torchvision") is None:
        return
    import torch

    try:
        torch.ops.torchvision.nms  # noqa: B018  (compiled part loaded: nothing to do)
        return
    except (AttributeError, RuntimeError):
        pass
    # Not loaded yet: load it as torchvision would.  Where it matches this torch (a CUDA
    # build's torchvision) it defines the operators itself, and ours would clash with it.
    compiled = next(Path(importlib.util.find_spec("torchvision").submodule_search_locations[0]).glob("_C*.so"), None)
    if compiled is not None:
        try:
            torch.ops.load_library(str(compiled))
            return
        except (OSError, RuntimeError):
            pass
    lib = torch.library.Library("torchvision", "DEF")  # noqa: F841  kept alive below
    for schema in _SCHEMAS:
        lib.define(schema)
    _KEEP.append(lib)


_KEEP: list = []
# Only these two get fake kernels registered unconditionally by torchvision;
# the other operators' meta kernels are registered only when the compiled part
# loaded, so they need no schema here.
_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)

_install()
