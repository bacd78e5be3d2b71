"""Node count: every operator costs 1 (an op with subgraphs, 1 + the nodes in them); leaves
(inputs, constants, literals, list cells, attribute values) cost almost nothing, so the
cheapest program has the fewest ops."""

from __future__ import annotations

from ..egraph import EGraph, Node
from .base import CostModel

LEAF_COST = 1e-3
# Term structure that is not an operator of the output model.
STRUCTURE = frozenset(
    {"Input", "Const", "Ints", "ScalarF", "ScalarI", "Absent", "Out", "Nil", "Cons", "ANil", "ACons"}
)


class NodeCount(CostModel):
    name = "node-count"

    def node_cost(self, egraph: EGraph, node: Node) -> float:
        if node.id.startswith("primitive-") or node.op in STRUCTURE:
            return LEAF_COST
        if egraph.class_type(node.eclass) not in ("", "Op"):
            return LEAF_COST  # DType, OptInt, AttrVal, ... values
        return float(egraph.meta.get("node_weight", {}).get(node.id, 1.0))  # If: 1 + its branches
