"""Node count: every operator costs 1 (an op with subgraphs, 1 + the nodes in them); leaves
(inputs, constants, list cells) cost almost nothing (1e-3), so the cheapest program has the
fewest ops. Among programs with as many ops, constants break the tie by their size (1e-9
per byte): a program that keeps one weight beats one that needs a second, rewritten copy of
it (Conv+BatchNormalization whose Conv output is also used elsewhere keeps the
BatchNormalization). Attribute values and literals cost 1e-12: the exact extractor pays for
them (they are nodes of the DAG), but they never outweigh a constant's bytes (FusedMatMul
with transB keeps the model's weight rather than folding a transposed copy).

Layouts. Where the e-graph offers onnxruntime's channel-blocked (NCHWc) form of
convolutions and pooling (rules/layout.egg, target ort), the choice between layouts is one
of time, not of op count: a blocked region computes the same ops, each faster, between a
ReorderInput and a ReorderOutput that only move data. So, and only in such e-graphs:
- ReorderInput / ReorderOutput are not counted as ops (they cost REORDER_COST, less than
  a leaf, so that the nodes a blocked region adds do not outweigh its time);
- every layout-sensitive op (the reorders, Conv, FusedConv, the NCHWc convolutions and the
  pooling ops in both layouts) also costs its roofline time (extract/costs/roofline.py: the
  hardware profile's rates, with its measured speed-ups of blocked convolution and pooling) times
  TIME_SHARE / T, where T is the sum over e-classes of their costliest layout-sensitive
  node's time: a program chooses at most one node per e-class, so its time term is below
  TIME_SHARE < 1 op.
So the op count still decides first, and among programs with as many computing ops, the
predicted time of convolution, pooling and reorders decides (the blocked form is chosen
where its faster convolutions pay for the reorders). On a profile without the layout, every
NCHWc op (reorders included) costs NO_LAYOUT_OPS = 2 ops: never chosen where an NCHW
alternative exists, yet finite, so that an input model's own NCHWc ops (an
onnxruntime-optimized model) can still be extracted. E-graphs without NCHWc nodes (other
models, target onnx) are costed exactly as without layouts.

Aliased products. Where the profile says that padding an aliased contraction pays
(contraction_alias_slowdown, rules/contraction.egg), a float32 product whose left operand's
rows lie a multiple of 4 KiB apart (extract/costs/roofline.py, aliased_rows) costs ALIAS_COST
more than an op: among programs with as many ops, the one with the padded products wins,
whatever its padded weights add in bytes (ALIAS_COST is far above their tie-break).

Every cost stays > 0 and a term costs more than each of its subterms (monotonic), as the
contract asks.
"""

from __future__ import annotations

import math

from ..egraph import EGraph, Node
from .base import CostModel

LEAF_COST = 1e-3
BYTE_COST = 1e-9
VALUE_COST = 1e-12  # an attribute value or literal: below any constant's bytes, so it never decides
TIME_SHARE = 0.9  # the most a program's layout-sensitive time may add: below one op
REORDER_COST = 1e-6  # a layout conversion's own cost (its time is added): not an op
NO_LAYOUT_OPS = 2.0  # an NCHWc op on a profile without the layout: more than any alternative
ALIAS_COST = 0.01  # an aliased product, where padding pays: below an op, above a padded weight's bytes
DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "U16": 2, "U32": 4, "U64": 8, "Bool": 1}
# Term structure that is not an operator of the output model.
STRUCTURE = frozenset(
    {"Input", "Const", "Ints", "ScalarF", "ScalarI", "Absent", "Out", "Nil", "Cons", "ANil", "ACons"}
)
REORDERS = frozenset({"NchwcReorderInput", "NchwcReorderOutput"})
NCHWC_OPS = REORDERS | {"NchwcConv", "NchwcConvPlain", "NchwcMaxPool", "NchwcAveragePool", "NchwcGlobalAveragePool",
                        "NchwcGlobalMaxPool"}
LAYOUT_SENSITIVE = REORDERS | {
    "Conv", "FusedConv", "NchwcConv", "NchwcConvPlain", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
    "NchwcMaxPool", "NchwcAveragePool", "NchwcGlobalAveragePool", "NchwcGlobalMaxPool",
}


PRODUCTS = frozenset({"MatMul", "FusedMatMul", "Gemm", "FusedGemm"})


class NodeCount(CostModel):
    name = "node-count"
    unit = "ops"

    def __init__(self, hardware=None, dims: dict[str, int] | None = None) -> None:
        self.hardware = hardware or "cpu"  # a profile name, path or Hardware: only read for layouts
        self.dims = dims
        self._timer = None  # a Roofline set up for the e-graph below, where its times or shapes are needed
        self._timed: EGraph | None = None  # that e-graph (identity, not id(): ids are reused)
        self._weight: float | None = None  # cost per predicted microsecond of a layout-sensitive op (None: no layout choice)
        self._pads = False  # whether the profile pads aliased contractions
        self._layout: bool | None = None  # whether the profile has NCHWc kernels

    def _roofline(self, egraph: EGraph):
        """A Roofline set up for `egraph` where it has layout alternatives (then _weight is
        set) or the profile pads aliased contractions (_pads); else None."""
        if self._timed is not egraph:
            from .roofline import Roofline

            self._timed = egraph
            self._timer, self._weight = None, None
            timer = Roofline(self.hardware, self.dims)
            layout = timer.hw.has_layout("nchwc") and any(n.op in NCHWC_OPS for n in egraph.nodes.values())
            self._pads = timer.hw.pads_contraction()
            if layout or self._pads:
                self._timer = timer
                timer._setup(egraph)
            if layout:
                worst: dict[str, float] = {}
                for n in egraph.nodes.values():
                    if n.op in LAYOUT_SENSITIVE:
                        t = timer.node_cost(egraph, n)
                        if math.isfinite(t) and t > worst.get(n.eclass, 0.0):
                            worst[n.eclass] = t
                total = sum(worst.values())
                self._weight = TIME_SHARE / total if total > 0 else 0.0
        return self._timer

    def _has_layout(self) -> bool:
        if self._layout is None:
            from .roofline import Hardware

            hw = self.hardware if isinstance(self.hardware, Hardware) else Hardware.load(self.hardware)
            self._layout = hw.has_layout("nchwc")
        return self._layout

    def costs(self, egraph: EGraph) -> dict[str, float]:
        self._timed = None
        return super().costs(egraph)

    def node_cost(self, egraph: EGraph, node: Node) -> float:
        if node.op == "Const":
            return LEAF_COST + BYTE_COST * const_bytes(egraph, node.eclass)
        if node.id.startswith("primitive-"):
            return VALUE_COST
        if node.op in STRUCTURE:
            return LEAF_COST
        if egraph.class_type(node.eclass) not in ("", "Op"):
            return VALUE_COST  # DType, OptInt, AttrVal, ... values
        ops = float(egraph.meta.get("node_weight", {}).get(node.id, 1.0))  # If: 1 + its branches
        if node.op in NCHWC_OPS and not self._has_layout():
            return NO_LAYOUT_OPS
        if node.op in LAYOUT_SENSITIVE or node.op in PRODUCTS:
            timer = self._roofline(egraph)
            if timer is not None and self._weight is not None and node.op in LAYOUT_SENSITIVE:
                t = timer.node_cost(egraph, node)
                return (REORDER_COST if node.op in REORDERS else ops) + self._weight * t
            if timer is not None and self._pads and node.op in PRODUCTS:
                from .roofline import aliased_rows  # roofline imports this module

                if aliased_rows(egraph, node, lambda c: timer.shape(egraph, c)):
                    return ops + ALIAS_COST
        return ops


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
