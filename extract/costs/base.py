"""The cost-model interface."""

from __future__ import annotations

from abc import ABC, abstractmethod

from ..egraph import EGraph, Node


class CostModel(ABC):
    """The cost of one e-node, without its children.

    Contract: costs are finite and > 0 (a term costs strictly more than each of its
    subterms, so cost is monotonic and a cheapest choice is never cyclic), or math.inf for
    a node that must never be chosen. The cost of a term is the sum over its nodes: each
    node once per use for tree cost, once in all for DAG cost. A model may read the
    e-class metadata (shape, dtype) through `egraph.class_data`.
    """

    name: str = ""

    @abstractmethod
    def node_cost(self, egraph: EGraph, node: Node) -> float: ...

    def costs(self, egraph: EGraph) -> dict[str, float]:
        """All node costs, computed once per extraction."""
        return {nid: self.node_cost(egraph, n) for nid, n in egraph.nodes.items()}
