"""Cost models for extraction."""

from __future__ import annotations

import inspect

from .. import plugins
from .base import CostModel, CostModelError
from .file_costs import FileCosts
from .learned import Learned
from .measured import Measured
from .node_count import NodeCount
from .roofline import Hardware, HardwareProfileError, Roofline, profiles

# the shipped ones; installed packages add theirs under eqsat.cost_models (extract/plugins.py)
COST_MODELS: dict[str, type[CostModel]] = {m.name: m for m in (Roofline, NodeCount, Measured, FileCosts, Learned)}
DEFAULT = Roofline.name  # prices work (FLOPs, bytes, kernel overhead): never pays a Conv twice to save an Add


def make_cost_model(name: str, hardware: str = "cpu", dims: dict[str, int] | None = None) -> CostModel:
    """A cost model by name. One whose constructor takes two arguments gets the hardware
    profile and the sizes of symbolic dimensions (`Model(hardware, dims)`); one that takes
    none is built as `Model()`; `hardware` is the profile's name or path as given
    (Hardware.load reads it). A name not registered is looked up among installed plugins;
    KeyError lists every name there is."""
    cls = plugins.find(plugins.COST_MODEL_GROUP, name, CostModel, COST_MODELS, "cost model")
    if name == NodeCount.name:
        Hardware.load(hardware)  # fail early on a bad profile; node count reads it for layouts only
    # the shipped models, and any registered one whose constructor takes (hardware, dims)
    takes = len(inspect.signature(cls).parameters) >= 2
    if plugins.shipped(cls):
        return cls(hardware, dims) if takes else cls()
    try:  # another's model: a failure here is that model's, said in one line
        return cls(hardware, dims) if takes else cls()
    except Exception as e:  # noqa: BLE001
        raise plugins.PluginError(f"cost model {name} ({cls.__module__}.{cls.__qualname__}) could not be built: "
                                  f"{type(e).__name__}: {e}; its constructor takes (hardware, dims) or "
                                  "nothing") from None


__all__ = ["COST_MODELS", "DEFAULT", "CostModel", "CostModelError", "FileCosts", "Hardware", "HardwareProfileError",
           "Learned", "Measured", "NodeCount", "Roofline", "make_cost_model", "profiles"]
