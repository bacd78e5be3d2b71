"""Node count: every operator costs 1 (an op with subgraphs, 1 + the nodes in them); leaves
(inputs, constants, literals, list cells, attribute values) cost almost nothing, so the
cheapest program has the fewest ops. Among programs with as many ops, constants break the
tie by their size (1e-9 per byte): a program that keeps one weight beats one that needs a
second, rewritten copy of it (Conv+BatchNormalization whose Conv output is also used
elsewhere keeps the BatchNormalization)."""

from __future__ import annotations

from ..egraph import EGraph, Node
from .base import CostModel

LEAF_COST = 1e-3
BYTE_COST = 1e-9
DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "U16": 2, "U32": 4, "U64": 8, "Bool": 1}
# Term structure that is not an operator of the output model.
STRUCTURE = frozenset(
    {"Input", "Const", "Ints", "ScalarF", "ScalarI", "Absent", "Out", "Nil", "Cons", "ANil", "ACons"}
)


class NodeCount(CostModel):
    name = "node-count"

    def node_cost(self, egraph: EGraph, node: Node) -> float:
        if node.op == "Const":
            return LEAF_COST + BYTE_COST * const_bytes(egraph, node.eclass)
        if node.id.startswith("primitive-") or node.op in STRUCTURE:
            return LEAF_COST
        if egraph.class_type(node.eclass) not in ("", "Op"):
            return LEAF_COST  # DType, OptInt, AttrVal, ... values
        return float(egraph.meta.get("node_weight", {}).get(node.id, 1.0))  # If: 1 + its branches


def const_bytes(egraph: EGraph, eclass: str) -> float:
    """Bytes of a constant e-class from its shape and dtype (0 if unknown)."""
    cd = egraph.class_data.get(eclass, {})
    shape = cd.get("shape")
    if shape is None or any(d < 0 for d in shape):
        return 0.0
    n = 1.0
    for d in shape:
        n *= d
    return n * DTYPE_BYTES.get(cd.get("dtype", "F32"), 4)
