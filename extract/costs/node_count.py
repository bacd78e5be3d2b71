"""Node count, a research baseline: every operator costs 1 (an op with subgraphs, 1 + the
nodes in them), whatever it computes. It knows no shapes, rates or layouts, so it cannot
tell a convolution from an Add: the DAG optimum under it may compute a shared convolution
twice to save one element-wise op (Conv + Add with the Conv's output used elsewhere: two
Convs, the second with the Add folded into its bias, are as many ops). eqsat's default is
`roofline`, which prices work; this model is for comparing against.

Leaves (inputs, constants, list cells) cost LEAF_COST, so the cheapest program has the
fewest ops. Among programs with as many ops, constants break the tie by their size (1e-9
per byte): a program that keeps one weight beats one that needs a second, rewritten copy
of it. Attribute values and literals cost 1e-12: the exact extractor pays for them (they
are nodes of the DAG), but they never outweigh a constant's bytes (FusedMatMul with transB
keeps the model's weight rather than folding a transposed copy). An NCHWc op counts as one
op like any other, so a blocked region (its reorders are ops) is never chosen where the
NCHW program exists.

Contract: every cost is > 0 and a term costs more than each of its subterms (monotonic).
"""

from __future__ import annotations

from ..egraph import EGraph, Node
from .base import DTYPE_BYTES, LEAF_COST, STRUCTURE, CostModel

BYTE_COST = 1e-9
VALUE_COST = 1e-12  # an attribute value or literal: below any constant's bytes, so it never decides


class NodeCount(CostModel):
    name = "node-count"
    unit = "ops"

    def __init__(self, hardware=None, dims: dict[str, int] | None = None) -> None:
        """The arguments every shipped model takes (make_cost_model); a count reads neither."""

    def node_cost(self, egraph: EGraph, node: Node) -> float:
        if node.op == "Const":
            return LEAF_COST + BYTE_COST * const_bytes(egraph, node.eclass)
        if node.id.startswith("primitive-"):
            return VALUE_COST
        if node.op in STRUCTURE:
            return LEAF_COST
        if egraph.class_type(node.eclass) not in ("", "Op"):
            return VALUE_COST  # DType, OptInt, AttrVal, ... values
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
