"""Per-node features of a saved e-graph: what a learned cost model (or any model a researcher
trains) sees of one operator e-node.

`node_features(egraph, node_id)` gives a NodeFeatures: the op, its layout (`nchwc` for
onnxruntime's channel-blocked ops, else `nchw`), the output's dtype and shape and the
inputs' shapes (symbolic dimensions bound by `dims`, else roofline.DEFAULT_DIM), FLOPs and
their kind (`matmul`, `conv`, `nchwc-conv`, `depthwise` or `vector`), bytes read and
written, and the literal arguments (attributes) by argument position. FLOPs and bytes are
the roofline's (extract/costs/roofline.py), so the two models see one account of the work.

`roofline_us` is the roofline's own estimate on a hardware profile. `vector(f)` maps a node's
features onto FEATURE_NAMES, the linear basis the learned cost
model fits (extract/costs/learned.py): every entry >= 0, so a model with non-negative
weights prices every op at >= 0. Only operator nodes (e-class sort Op, not term structure)
have features; `features(egraph)` gives them all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .costs.base import STRUCTURE
from .costs.roofline import CONV, VIEWS, Roofline, literal_int, literal_str, vector_ints
from .egraph import EGraph
from .nchwc import BLOCKED_CONVS, NCHWC_OPS, REORDERS

FEATURE_NAMES = ("roofline_us", "kernels", "views", "matmul_mflop", "conv_mflop", "nchwc_conv_mflop", "depthwise_mflop",
                 "vector_mflop", "mb_moved", "reorder_mb")


@dataclass(frozen=True)
class NodeFeatures:
    node: str
    op: str
    layout: str  # "nchwc" or "nchw"
    dtype: str | None
    shape: list[float] | None  # the output's, sizes
    input_shapes: list[list[float] | None]
    flops: float
    flop_kind: str  # matmul, conv, nchwc-conv, depthwise, vector
    bytes_read: float
    bytes_written: float
    roofline_us: float = 0.0  # the roofline's time for the node on the profile given
    attributes: dict[int, object] = field(default_factory=dict)  # argument position -> literal value

    def as_dict(self) -> dict:
        return asdict(self)


def is_operator(egraph: EGraph, node_id: str) -> bool:
    """Whether the node is an operator of a program (has features): not a primitive, not
    term structure (inputs, constants, lists, the output tuple)."""
    n = egraph.nodes[node_id]
    return not node_id.startswith("primitive-") and n.op not in STRUCTURE and egraph.class_type(n.eclass) in ("", "Op")


def node_features(egraph: EGraph, node_id: str, dims: dict[str, int] | None = None,
                  roofline: Roofline | None = None, hardware: str = "cpu") -> NodeFeatures:
    """The features of one operator node (is_operator); ValueError for another node.
    `roofline`: the model whose shape and work accounting to use (one per e-graph, reused
    across calls), else one on the `hardware` profile (FLOPs and bytes do not depend on the
    profile; `roofline_us` does)."""
    if not is_operator(egraph, node_id):
        raise ValueError(f"node {node_id} ({egraph.nodes[node_id].op}) is not an operator: it has no features")
    rf = roofline or roofline_for(egraph, dims, hardware)
    n = egraph.nodes[node_id]
    inputs = rf.op_inputs(egraph, n)
    flops, kind = rf.flops(egraph, n, inputs)
    if n.op in CONV and kind == "matmul":
        kind = "depthwise" if rf.depthwise(egraph, inputs) else "nchwc-conv" if n.op in BLOCKED_CONVS else "conv"
    attrs = {}
    for i, c in enumerate(n.children):
        if egraph.class_type(c) not in ("Op", "OpList"):
            v = _literal(egraph, c)
            if v is not None:
                attrs[i] = v
    return NodeFeatures(node=node_id, op=n.op, layout="nchwc" if n.op in NCHWC_OPS else "nchw",
                        dtype=egraph.class_data.get(n.eclass, {}).get("dtype"), shape=rf.shape(egraph, n.eclass),
                        input_shapes=[rf.shape(egraph, i) for i in inputs], flops=flops, flop_kind=kind,
                        bytes_read=sum(rf.nbytes(egraph, i) for i in inputs),
                        bytes_written=rf.out_bytes(egraph, n, inputs), roofline_us=rf.node_cost(egraph, n),
                        attributes=attrs)


def features(egraph: EGraph, dims: dict[str, int] | None = None, hardware: str = "cpu") -> dict[str, NodeFeatures]:
    """node id -> NodeFeatures for every operator node of the e-graph (`hardware`: the
    profile of `roofline_us`)."""
    rf = roofline_for(egraph, dims, hardware)
    return {nid: node_features(egraph, nid, roofline=rf) for nid in egraph.nodes if is_operator(egraph, nid)}


def vector(f: NodeFeatures) -> list[float]:
    """The node's entries of FEATURE_NAMES (all >= 0): the roofline's time, one kernel (or
    one view, for ops that only relabel a buffer), MFLOPs by kind, MB moved, and MB copied
    by a layout reorder: a linear model over them corrects the roofline where it is wrong."""
    view = f.op in VIEWS
    mflop = f.flops / 1e6
    mb = (f.bytes_read + f.bytes_written) / 1e6
    by_kind = {"matmul": "matmul_mflop", "conv": "conv_mflop", "nchwc-conv": "nchwc_conv_mflop",
               "depthwise": "depthwise_mflop", "vector": "vector_mflop"}
    v = dict.fromkeys(FEATURE_NAMES, 0.0)
    v["roofline_us"] = f.roofline_us
    v["views" if view else "kernels"] = 1.0
    if not view:
        v[by_kind[f.flop_kind]] = mflop
        v["reorder_mb" if f.op in REORDERS else "mb_moved"] = mb
    return [v[k] for k in FEATURE_NAMES]


def program_vector(egraph: EGraph, choice: dict[str, str], feats: dict[str, NodeFeatures]) -> list[float]:
    """The sum of vector() over the operator nodes a program (e-class -> node id) chooses:
    a linear cost model's prediction of the program is its weights times this."""
    total = [0.0] * len(FEATURE_NAMES)
    for nid in choice.values():
        if nid in feats:
            total = [a + b for a, b in zip(total, vector(feats[nid]), strict=True)]
    return total


def roofline_for(egraph: EGraph, dims: dict[str, int] | None, hardware="cpu") -> Roofline:
    """A roofline on `hardware` (a profile's name, path or Hardware) set up for `egraph`."""
    rf = Roofline(hardware, dims)
    rf._setup(egraph)
    return rf


def _literal(egraph: EGraph, eclass: str) -> object:
    for get in (vector_ints, literal_str, literal_int):
        v = get(egraph, eclass)
        if v is not None:
            return v
    for nid in egraph.classes.get(eclass, ()):
        op = egraph.nodes[nid].op
        try:
            return float(op)
        except ValueError:
            continue
    return None
