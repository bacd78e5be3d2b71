"""The costs an e-graph file carries: each node's `cost` field, as egraph-serialize JSON
(extraction-gym's files, Tensat's e-graphs among them) gives it.

eqsat's own cost models keep costs > 0 (extract/costs/base.py); a file's costs are data,
not a model eqsat chose, and extraction-gym's Tensat e-graphs price inputs, weights and
reshapes at 0. So this model's contract is costs >= 0 and finite (the schema already
refuses a negative, NaN or infinite `cost`: extract/schema.py). Zero is safe for every
shipped extractor: tree and DAG greedy take a node only where it strictly lowers a cost,
so no choice closes a cycle through zero-cost nodes, and the ILP forbids cycles itself.
A node without a `cost` field costs 1, egraph-serialize's default.
"""

from __future__ import annotations

import math

from ..egraph import EGraph, Node
from .base import CostModel, CostModelError


class FileCosts(CostModel):
    name = "file-costs"
    unit = ""  # whatever the file's costs count
    compared_by_default = False  # a model just saturated carries egglog's placeholder costs (1.0 each)

    def __init__(self, hardware=None, dims: dict[str, int] | None = None) -> None:
        """The arguments every shipped model takes (make_cost_model); the file's costs read neither."""

    def node_cost(self, egraph: EGraph, node: Node) -> float:
        return node.cost

    def costs(self, egraph: EGraph) -> dict[str, float]:
        """Every node's `cost`, checked: finite and >= 0 (zero allowed, unlike base.check_costs)."""
        out = {nid: float(n.cost) for nid, n in egraph.nodes.items()}
        for nid, c in out.items():
            if not (math.isfinite(c) and c >= 0):
                n = egraph.nodes[nid]
                raise CostModelError(f"cost model {self.name}: node {nid} ({n.op} in e-class {n.eclass}) costs "
                                     f"{c!r}; a file's costs must be finite and >= 0")
        return out
