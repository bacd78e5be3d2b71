"""torchvision beside a CPU torch: declare its two C++ operator schemas before it is imported.

torchvision's wheel on this project's package index links CUDA libraries that the CPU torch
lacks, so its extension does not load and `import torchvision` fails on the missing
`torchvision::nms` schema; transformers imports torchvision whenever it is installed. Declaring
the schemas first (the models here use neither op) lets both import. Call `declare()` before
importing torchvision or transformers."""

from __future__ import annotations

_LIB = []  # keeps the declarations alive


def declare() -> None:
    """Declare torchvision::nms and torchvision::qnms unless declared already (idempotent)."""
    if _LIB:
        return
    import torch

    try:
        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    except RuntimeError:  # declared already (torchvision's own extension loaded)
        lib = None
    _LIB.append(lib)
