"""Checks of a model that the commands which rewrite, plan or time it make before any work
(eqsat.core.pipeline's optimize and saturate, compare-costs, plan). Light: no egglog import."""

from __future__ import annotations

from onnx import ModelProto

from eqsat.errors import InvalidModelError


def check_model(model: ModelProto) -> None:
    """Raise InvalidModelError (exit 2) for a model that computes nothing observable: a
    graph with no outputs (optimizing it would leave an empty graph, planning it would plan
    dead values, and there is nothing to verify or time). A graph whose outputs are its
    inputs or constants is optimized as usual."""
    if not model.graph.output:
        raise InvalidModelError("the model's graph has no outputs: it computes nothing observable; list the values "
                                "it should compute as graph outputs")
