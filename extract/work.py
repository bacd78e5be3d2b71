"""The work a program does: its FLOPs, the bytes its ops move, and its contractions
(convolutions, products, attention), counted over a choice of the e-graph, each chosen node
once (the DAG), with the roofline's shapes and FLOP counts.

The input program is recorded too: for each node of the input model, the e-node that
encodes it (`eqsat.input_nodes` in the e-graph's metadata, `eqsat.input_complete` where
every node has one), so the work of the input and of any extraction are counted the same
way. The ILP extractor bounds a choice's contractions by the input's (`contraction_bound`):
a program never computes a convolution or a product twice to save other ops. Rules that pad a contraction
(rules/contraction.egg,
rules/layout.egg's blocked channels) add FLOPs but no contraction: the report gives the
FLOPs beside the input's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .check import reachable
from .costs.base import STRUCTURE
from .costs.roofline import ATTENTION, CONV, GEMM, MATMUL, Roofline
from .egraph import EGraph

CONTRACTIONS = frozenset(CONV | MATMUL | GEMM | ATTENTION)
STRUCTURE_OPS = STRUCTURE | {"Value"}  # not operators of the program


def contractions(egraph: EGraph, node) -> int:
    """The contractions an e-node computes, as the work bound counts them: 1 for a product or
    a convolution that sums over more than one input, 2 for attention (its scores and its
    weighted sum), 0 otherwise (a MatMul of inner dimension 1 is an outer product; a 1x1
    convolution of one input channel per group is a per-channel scale: rules/layout.egg runs BatchNormalization, or a
    per-channel Mul and Add,
    as one, in place of ops that are no contraction)."""
    if node.op not in CONTRACTIONS:
        return 0
    if node.op in ATTENTION:
        return 2
    if node.op in MATMUL and node.children:
        a = egraph.class_data.get(node.children[0], {}).get("shape")
        if a and a[-1] == 1:  # an outer product: an inner dimension of 1 sums over nothing
            return 0
    if node.op in CONV and len(node.children) > 1:
        w = egraph.class_data.get(node.children[1], {}).get("shape")
        if w and len(w) >= 3 and all(d == 1 for d in w[1:]):
            return 0
    return 1


def chosen_nodes(egraph: EGraph, choice: Mapping[str, str]) -> list[str]:
    """The e-nodes a choice computes: one per chosen e-class reachable from the roots."""
    return [choice[c] for c in reachable(egraph, choice)]


# ops between a padded weight and the contraction that reads it, besides the blocked
# layout's filter reorder: the channel scale moved into a filter (rules/layout.egg)
WEIGHT_TRANSFORMS = frozenset({"Reshape", "Mul"})


def unpadded_elements(egraph: EGraph, eclass: str, depth: int = 6) -> float | None:
    """The elements of a contraction's weight before the zeros a rule appended to it (the
    serialized e-graph's `unpadded_elements`, found through WEIGHT_TRANSFORMS from the
    weight's e-class), or None where it was not padded."""
    kept = egraph.class_data.get(eclass, {}).get("unpadded_elements")
    if kept is not None or depth <= 0:
        return kept
    for nid in egraph.classes.get(eclass, ()):
        n = egraph.nodes[nid]
        if n.op in WEIGHT_TRANSFORMS and n.children:
            found = unpadded_elements(egraph, n.children[0], depth - 1)
            if found is not None:
                return found
    return None


def _elements(egraph: EGraph, eclass: str) -> float | None:
    s = egraph.class_data.get(eclass, {}).get("shape")
    if s is None or any(d < 0 for d in s):
        return None
    out = 1.0
    for d in s:
        out *= d
    return out


def padding_flops(egraph: EGraph, node, inputs: list[str], flops: float) -> float:
    """The FLOPs of a contraction that fall on the zeros a rule padded its weight with
    (rules/layout.egg's blocked channels, rules/contraction.egg's padded inner dimension): its
    FLOPs times the padded share of its weight (every padded weight element meets as many
    products as a kept one)."""
    if node.op not in CONTRACTIONS or len(inputs) < 2 or not flops:
        return 0.0
    kept, padded = unpadded_elements(egraph, inputs[1]), _elements(egraph, inputs[1])
    if kept is None or not padded or kept >= padded:
        return 0.0
    return flops * (1.0 - kept / padded)


def work(egraph: EGraph, node_ids: Iterable[str], roofline: Roofline | None = None) -> dict[str, float]:
    """{"flops", "padding_flops", "bytes", "contractions", "ops"} of a program given as its
    e-nodes (chosen_nodes, each once; or eqsat.input_nodes, one per input node); padding_flops
    is the part of flops that falls on padded weights (`padding_flops`)."""
    roof = roofline or Roofline()
    roof._setup(egraph)
    flops = padded = moved = 0.0
    count = ops = 0
    for nid in node_ids:
        if nid is None or nid not in egraph.nodes:
            continue
        node = egraph.nodes[nid]
        if egraph.class_type(node.eclass) not in ("", "Op") or nid.startswith("primitive-") or node.op in STRUCTURE_OPS:
            continue
        inputs = roof.op_inputs(egraph, node)
        f, _ = roof.flops(egraph, node, inputs)
        flops += f
        padded += padding_flops(egraph, node, inputs, f)
        moved += roof.out_bytes(egraph, node, inputs) + sum(roof.nbytes(egraph, i) for i in inputs)
        count += contractions(egraph, node)
        ops += 1
    return {"flops": flops, "padding_flops": padded, "bytes": moved, "contractions": count, "ops": ops}


def contraction_bound(egraph: EGraph) -> int | None:
    """The number of contractions of the input program (eqsat.input_nodes), or None where the
    e-graph does not record all of it (a file from elsewhere; an input node no e-node was
    matched to: eqsat.input_complete false)."""
    picked = egraph.meta.get("input_nodes")
    if not picked or not egraph.meta.get("input_complete"):
        return None
    return sum(contractions(egraph, egraph.nodes[nid]) for nid in picked if nid in egraph.nodes)


def input_nodes(egraph: EGraph, nodes: Iterable[tuple[str, str, list[str]]]) -> list[str | None]:
    """For each node of the input model, given as (op, its output's e-class, its inputs'
    e-classes), the e-node of that op in the output's e-class whose operand children are
    among the inputs' classes (or leaves), or None where there is none (a node rewritten
    with :subsume, an op the e-graph names otherwise). Per input node, not per e-class: an
    Identity of x shares x's e-class, and each of them does its own work."""
    out: list[str | None] = []
    for op, cls, ins in nodes:
        want = set(ins)
        # the op itself, or the op an output projection Out(op, i) reads (a node carried
        # with several outputs: Resize with its optional inputs, Opaque ones)
        owners = [egraph.nodes[nid].children[0] for nid in egraph.classes.get(cls, ())
                  if egraph.nodes[nid].op == "Out" and egraph.nodes[nid].children]
        found = None
        for c in [cls, *owners]:
            for nid in egraph.classes.get(c, ()):
                n = egraph.nodes[nid]
                operands = [k for k in n.children if egraph.class_type(k) in ("Op", "OpList")]
                if n.op == op and all(k in want or _leaf(egraph, k) or _list_of(egraph, k, want) for k in operands):
                    found = nid
                    break
            if found:
                break
        out.append(found)
    return out


def _list_of(egraph: EGraph, eclass: str, want: set[str]) -> bool:
    """Whether an OpList e-class is a list (Cons / Nil cells) of classes in `want` or leaves."""
    seen = 0
    while seen < 10_000:
        cells = [egraph.nodes[n] for n in egraph.classes.get(eclass, ()) if egraph.nodes[n].op in ("Cons", "Nil")]
        if not cells:
            return False
        cell = cells[0]
        if cell.op == "Nil":
            return True
        head, eclass = cell.children[0], cell.children[1]
        if head not in want and not _leaf(egraph, head):
            return False
        seen += 1
    return False


def _leaf(egraph: EGraph, eclass: str) -> bool:
    return any(egraph.nodes[n].op in ("Absent", "Const") for n in egraph.classes.get(eclass, ()))

