"""Random ops: nodes whose outputs differ from run to run.

Two random nodes are never the same value, even with the same inputs and attributes, so the
e-graph must not merge them (hash-consing would: two `RandomNormalLike(x)` became one, and
`a - b` became 0). The encoder tags each random node with `INSTANCE_ATTR`, an attribute of
its own index that the decoder drops; the fold oracle never evaluates a tagged node, and
verification feeds a random node's outputs instead of running it (eqsat.verification).

A node is random when its op is one of RANDOM_OPS; a Dropout whose training_mode input is
given and is not a constant false (an initializer a caller may override is not constant),
with or without a seed (onnxruntime's seed fixes the first mask of a session, not the next
runs'); a node with a subgraph that holds a random node; and a call of one of the model's
local functions that holds one.
"""

from __future__ import annotations

import onnx
from onnx import GraphProto, ModelProto, NodeProto

from eqsat.core.initializers import fixed_initializers
from eqsat.core.scopes import subgraphs

RANDOM_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                        "Bernoulli", "Multinomial"})
INSTANCE_ATTR = " eqsat instance"  # not an ONNX identifier: no real attribute has this name


class RandomNodes:
    """Which nodes of a model are random (see the module's contract)."""

    def __init__(self, model: ModelProto) -> None:
        self.false = {name for name, t in fixed_initializers(model).items() if t.data_type == onnx.TensorProto.BOOL
                      and t.dims in ([], [1]) and not onnx.numpy_helper.to_array(t).any()}
        self.false |= {n.output[0] for n in model.graph.node if n.op_type == "Constant" and n.output
                       and _false_constant(n)}
        self.functions = {(f.domain, f.name) for f in model.functions
                          if any(self._own(n) for n in f.node)}
        # a function may call another: follow until nothing changes
        changed = True
        while changed:
            more = {(f.domain, f.name) for f in model.functions
                    if any((n.domain, n.op_type) in self.functions for n in f.node)}
            changed = not more <= self.functions
            self.functions |= more

    def _own(self, n: NodeProto) -> str | None:
        if n.op_type in RANDOM_OPS and n.domain in ("", "ai.onnx"):
            return n.op_type
        if (n.op_type == "Dropout" and n.domain in ("", "ai.onnx") and len(n.input) > 2 and n.input[2]
                and n.input[2] not in self.false):
            return "Dropout (training mode)"
        return None

    def why(self, n: NodeProto) -> str | None:
        """The random op that makes `n` random, or None when it is not."""
        if own := self._own(n):
            return own
        if (n.domain, n.op_type) in self.functions:
            return f"{n.op_type} (a local function with random ops)"
        for a in n.attribute:
            for sub in subgraphs(a):
                if found := self.in_graph(sub):
                    return found
        return None

    def in_graph(self, g: GraphProto) -> str | None:
        for n in g.node:
            if found := self.why(n):
                return found
        return None


def _false_constant(n: NodeProto) -> bool:
    if n.domain not in ("", "ai.onnx") or len(n.attribute) != 1 or n.attribute[0].name != "value":
        return False
    t = n.attribute[0].t
    return t.data_type == onnx.TensorProto.BOOL and not onnx.numpy_helper.to_array(t).any()


def random_ops(model: ModelProto) -> set[str]:
    """The random ops of the model (the main graph, subgraphs and functions)."""
    nodes = RandomNodes(model)
    found: set[str] = set()

    def walk(g: GraphProto) -> None:
        for n in g.node:
            if own := nodes._own(n):
                found.add(own)
            for a in n.attribute:
                for sub in subgraphs(a):
                    walk(sub)

    walk(model.graph)
    for f in model.functions:
        found.update(r for n in f.node if (r := nodes._own(n)))
    return found
