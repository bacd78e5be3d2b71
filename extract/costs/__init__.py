"""Cost models for extraction."""

from __future__ import annotations

from .base import CostModel
from .measured import Measured
from .node_count import NodeCount
from .roofline import Hardware, HardwareProfileError, Roofline, profiles

COST_MODELS: dict[str, type[CostModel]] = {m.name: m for m in (NodeCount, Roofline, Measured)}


def make_cost_model(name: str, hardware: str = "cpu", dims: dict[str, int] | None = None) -> CostModel:
    """A cost model by name; models that need them get the hardware profile and the sizes
    of symbolic dimensions."""
    if name not in COST_MODELS:
        raise KeyError(f"unknown cost model {name!r}; choose one of {', '.join(COST_MODELS)}")
    if name in (Roofline.name, Measured.name):
        return COST_MODELS[name](hardware, dims)
    if name == NodeCount.name:
        Hardware.load(hardware)  # fail early on a bad profile; node count reads it for layouts only
        return NodeCount(hardware, dims)
    return COST_MODELS[name]()


__all__ = ["COST_MODELS", "CostModel", "Hardware", "HardwareProfileError", "Measured", "NodeCount", "Roofline", "make_cost_model", "profiles"]
