"""Measured costs: the time onnxruntime took to run each op alone, as recorded in the
serialized e-graph by eqsat (metadata `eqsat.measured_us`, see eqsat/backends/ort/measure.py). An op
without a measurement (it could not be run alone) gets the roofline estimate; an e-graph
without the measurements at all (saved from a run with another cost model) is an error,
not the roofline in disguise."""

from __future__ import annotations

from ..egraph import EGraph, Node
from .base import LEAF_COST, STRUCTURE, CostModel, CostModelError
from .roofline import Hardware, Roofline


class Measured(CostModel):
    name = "measured"
    unit = "us"

    def __init__(self, hardware: Hardware | str = "cpu", dims: dict[str, int] | None = None) -> None:
        self.fallback = Roofline(hardware, dims)

    def node_cost(self, egraph: EGraph, node: Node) -> float:
        if node.id.startswith("primitive-") or node.op in STRUCTURE or egraph.class_type(node.eclass) not in ("", "Op"):
            return LEAF_COST
        t = egraph.meta.get("measured_us", {}).get(node.id)
        return max(float(t), LEAF_COST) if t is not None else self.fallback.node_cost(egraph, node)

    def costs(self, egraph: EGraph) -> dict[str, float]:
        if "measured_us" not in egraph.meta:
            raise CostModelError("this e-graph has no measured op times (eqsat.measured_us): save it from a run "
                             "with --cost-model measured (or compare-costs), or use the roofline model")
        self.fallback._setup(egraph)
        return super().costs(egraph)
