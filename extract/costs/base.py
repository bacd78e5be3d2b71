"""The cost-model interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from numbers import Real

from ..egraph import EGraph, Node

# Term structure that is not an operator of the output model: graph inputs, constants,
# literals, list cells, the output tuple.
STRUCTURE = frozenset(
    {"Input", "Const", "Ints", "ScalarF", "ScalarI", "Absent", "Out", "Nil", "Cons", "ANil", "ACons"}
)
LEAF_COST = 1e-3  # a leaf of the program (input, constant, literal): far below any op
# Bytes per element of each dtype as the op language names it: what a value costs to store or
# move, for every cost model that prices bytes.
DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "U16": 2, "U32": 4, "U64": 8, "Bool": 1, "C64": 8, "C128": 16}


class CostModelError(ValueError):
    """A cost model cannot price this e-graph, or its costs break the contract; the message
    names the model and what is wrong."""


class CostModel(ABC):
    """The cost of one e-node, without its children.

    Contract: costs are finite and > 0 (a term costs strictly more than each of its
    subterms, so cost is monotonic and a cheapest choice is never cyclic), or math.inf for
    a node that must never be chosen. The cost of a term is the sum over its nodes: each
    node once per use for tree cost, once in all for DAG cost. A model may read the
    e-class metadata (shape, dtype) through `egraph.class_data`.
    """

    name: str = ""
    unit: str = ""  # what a cost counts, for reports: "ops", "us", ...
    compared_by_default: bool = True  # in compare-costs' default list (file-costs is not: it prices a file's costs)

    @abstractmethod
    def node_cost(self, egraph: EGraph, node: Node) -> float: ...

    def costs(self, egraph: EGraph) -> dict[str, float]:
        """All node costs, computed once per extraction, checked against the contract."""
        out = {nid: self.node_cost(egraph, n) for nid, n in egraph.nodes.items()}
        check_costs(egraph, out, self.name or type(self).__name__)
        return out


def positive(x) -> bool:
    """A real number > 0 (math.inf included; NaN, booleans and strings not): what a cost
    and a hardware profile's rate must be."""
    return not isinstance(x, bool) and isinstance(x, Real) and x > 0


def check_costs(egraph: EGraph, costs: dict, model: str = "") -> None:
    """Raise CostModelError naming the first node whose cost breaks the contract (not a number,
    NaN, <= 0 or -inf): an extractor given such costs loops or answers nonsense."""
    for nid, c in costs.items():
        if not positive(c):
            n = egraph.nodes.get(nid)
            what = f"{nid} ({n.op} in e-class {n.eclass})" if n else nid
            raise CostModelError(f"cost model {model or '?'}: node {what} costs {c!r}; costs must be finite and > 0, "
                             "or math.inf for a node never to choose (extract/costs/base.py)")
