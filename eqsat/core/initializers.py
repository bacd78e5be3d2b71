"""Which initializers are constants.

From IR version 4 on, an initializer that is also listed as a graph input is only a default:
a caller may feed another value (older PyTorch exports with keep_initializers_as_inputs make
every weight such an input). Such a value is an input everywhere in eqsat: shape inference,
the oracles, every rule's guards and verification's feeds. Before IR version 4 every
initializer had to be listed as an input, and runtimes take them as constants.
"""

from __future__ import annotations

from onnx import ModelProto, TensorProto


def overridable_inputs(model: ModelProto) -> set[str]:
    """Names of the main graph's inputs that have an initializer a caller may override."""
    if model.ir_version < 4:
        return set()
    inits = {t.name for t in model.graph.initializer}
    return {i.name for i in model.graph.input if i.name in inits}


def fixed_initializers(model: ModelProto) -> dict[str, TensorProto]:
    """The main graph's initializers that are constants (not `overridable_inputs`), by name."""
    free = overridable_inputs(model)
    return {t.name: t for t in model.graph.initializer if t.name not in free}
