"""Programs with fewer requantizing fusions, for a QDQ model whose first program verification
refused.

rules/qdq.egg fuses DequantizeLinear -> op -> QuantizeLinear into onnxruntime's QLinear ops
(ops.OpSpec.requantizes) where onnxruntime's own QDQ transformers fuse, as far as rules can
see it. Such a fusion rounds otherwise than the ops it replaces, and verification accepts it
only where the outputs lie no farther from the original than onnxruntime's own optimization
of the model moves them (eqsat.verification.QdqAllowance). Where onnxruntime decides
otherwise on a model than the rules do (an Identity between a Conv's bias and its
DequantizeLinear, which onnxruntime's selectors see and eqsat's encoding does not; another
onnxruntime version or CPU), verification refuses the program, and the same e-graph is
extracted again, its requantizing e-nodes kept (`restricted`):

- `ort`: only in the e-classes of the values onnxruntime's own optimization requantizes
  (`ort_requantized_values`), then
- `none`: nowhere: every fusion left is exact.

A float op in a QDQ model rounds too, where its output is quantized: a Conv whose weight a
DequantizeLinear computes has a constant float weight once the DequantizeLinear folds, and so a
blocked (NCHWc) form, whose kernel sums in another order than the NCHW one; it moves an output
past a rounding boundary where onnxruntime's own optimization (which keeps the
DequantizeLinear, so no blocked Conv there) keeps it. So each level is tried with the folded
weights, then as the input computes them (`-dq`: every weight a DequantizeLinear computes
dequantized at run time, and no blocked Conv on it: `dequantized_convs`), the first program's
requantizing fusions too (`all-dq`), in the order of LEVELS.

Contract: a level never offers a requantizing e-node that an earlier level of the same suffix
did not, `none` offers none, and a `-dq` level neither a blocked Conv on a dequantized weight
nor a constant in place of a DequantizeLinear.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from pathlib import Path

from onnx import ModelProto

from eqsat.extract.egraph import EGraph
from eqsat.extract.nchwc import BLOCKED_CONVS
from eqsat.lang.ops import LITERAL_CTORS, REQUANTIZING_CTORS

LEVELS = ("ort", "all-dq", "ort-dq", "none", "none-dq")
_KEPT_TEXT = {"all": "the requantizing fusions of the first program",
              "ort": "requantizing fusions only where onnxruntime's own optimization of the model makes them",
              "none": "no requantizing fusion"}
LEVEL_TEXT = {level: f"{_KEPT_TEXT[level.removesuffix('-dq')]}"
                     f"{', and weights dequantized at run time' if level.endswith('-dq') else ''}"
              for level in LEVELS}


def split_level(level: str) -> tuple[str, bool]:
    """A level of LEVELS as (the requantizing fusions kept: all, ort or none; whether weights
    that a DequantizeLinear computes are folded, with blocked convs on them)."""
    return level.removesuffix("-dq"), not level.endswith("-dq")


# onnxruntime's fused QDQ ops (of any domain): the node keeps the name of the op it replaced
_ORT_REQUANTIZING = ("QLinear", "QGemm")


def ort_requantized_values(model: ModelProto, path: str | Path | None = None) -> set[str]:
    """The values of `model` that onnxruntime's own optimization requantizes: the outputs of
    the QuantizeLinear nodes that read an op onnxruntime fuses with its DequantizeLinear and
    QuantizeLinear nodes into one of its QLinear ops or QGemm, and of the DequantizeLinear
    nodes that read those (ORT_ENABLE_EXTENDED, less verification's QDQ_UNSOUND_TRANSFORMERS;
    the fused node keeps the op's name: where names are missing or repeated, onnxruntime
    optimizes a copy with every node named by its place). Empty where onnxruntime cannot load
    the model. `path` is the model's file, where there is one and its names serve (faster than
    serializing the model again)."""
    import onnx
    import onnxruntime as ort

    from eqsat.verification import QDQ_UNSOUND_TRANSFORMERS

    nodes = list(model.graph.node)
    names = [n.name for n in nodes]
    renamed = not (all(names) and len(set(names)) == len(names))
    if renamed:
        names = [f"eqsat-node-{k}" for k in range(len(nodes))]
    with tempfile.TemporaryDirectory(prefix="eqsat-requantize-") as tmp:
        out = Path(tmp) / "ort.onnx"
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = str(out)
        so.log_severity_level = 3
        try:
            source: str | bytes
            if renamed:
                named = ModelProto()
                named.CopyFrom(model)
                for n, name in zip(named.graph.node, names, strict=True):
                    n.name = name
                source = named.SerializeToString()  # over 2 GiB: ValueError, no fusion known
            else:
                source = str(path) if path else model.SerializeToString()
            ort.InferenceSession(source, so, providers=["CPUExecutionProvider"],
                                 disabled_optimizers=QDQ_UNSOUND_TRANSFORMERS)
            fused = {n.name for n in onnx.load(str(out), load_external_data=False).graph.node
                     if n.op_type.startswith(_ORT_REQUANTIZING)}
        except Exception:  # noqa: BLE001 - onnxruntime cannot optimize it: no fusion is its own
            return set()
    readers = defaultdict(list)
    for n in nodes:
        for i in n.input:
            readers[i].append(n)
    values = set()
    for n, name in zip(nodes, names, strict=True):
        if name not in fused:
            continue
        for o in n.output:
            for q in readers[o]:
                if q.op_type == "QuantizeLinear" and q.domain in ("", "ai.onnx"):
                    values.add(q.output[0])
                    values |= {d.output[0] for d in readers[q.output[0]] if d.op_type == "DequantizeLinear"}
    return values


def kept_classes(egraph: EGraph, value_names: dict[str, list[str]], values: set[str]) -> set[str]:
    """The e-classes where `ort_requantized_values`' `values` may be requantized: theirs, and
    the classes the DequantizeLinear e-nodes of theirs read (where a rule wrote an int8
    Q -> DQ pair again in uint8, the fusion lies in the new Q's class, which only the
    DequantizeLinear reading it ties to the model's values), and the classes a Transpose e-node
    of those reads (a channels-last form, rules/qdq_nhwc.egg: the same values permuted, which
    round alike)."""
    named = {c for c, names in value_names.items() if values.intersection(names)}
    read = {n.children[0] for n in egraph.nodes.values()
            if n.op == "DequantizeLinear" and n.eclass in named and n.children}
    kept = named | read
    permuted = {n.children[0] for n in egraph.nodes.values()
                if n.op == "Transpose" and n.eclass in kept and n.children}
    return kept | permuted


def restricted(egraph: EGraph, keep: set[str] | None, folded: bool = True) -> EGraph:
    """`egraph` without the requantizing e-nodes of the e-classes not in `keep` (None: all
    kept), and without `folded` the `dequantized_convs` and the constants of the e-classes
    that hold a DequantizeLinear e-node (so that it runs as the input has it); but for the
    input program's own (a QLinearConv the input model holds stays choosable). The other
    nodes, classes, roots and metadata shared, not copied."""
    own = set(egraph.meta.get("input_nodes", ()))
    drop = {nid for nid, n in egraph.nodes.items()
            if nid not in own and keep is not None and n.op in REQUANTIZING_CTORS and n.eclass not in keep}
    if not folded:
        dq = {n.eclass for n in egraph.nodes.values() if n.op == "DequantizeLinear"}
        drop |= dequantized_convs(egraph) - own
        drop |= {nid for nid, n in egraph.nodes.items() if n.op in LITERAL_CTORS and n.eclass in dq} - own
    nodes = {nid: n for nid, n in egraph.nodes.items() if nid not in drop}
    classes = {c: [nid for nid in ids if nid not in drop] for c, ids in egraph.classes.items()}
    return EGraph(nodes, classes, egraph.roots, egraph.class_data, egraph.meta)


def dequantized_convs(egraph: EGraph) -> set[str]:
    """The blocked Conv e-nodes whose filter comes from a DequantizeLinear (the serialized
    e-graph's class_data `dequantized`, eqsat.core.serialize)."""
    return {nid for nid, n in egraph.nodes.items()
            if n.op in BLOCKED_CONVS and len(n.children) > 1
            and egraph.class_data.get(n.children[1], {}).get("dequantized")}


def requantizing(egraph: EGraph, choice: dict[str, str]) -> set[str]:
    """The e-classes where `choice` picks a requantizing e-node."""
    return {c for c, nid in choice.items() if egraph.nodes[nid].op in REQUANTIZING_CTORS}


def blocks_quantized(model: ModelProto, egraph: EGraph, choice: dict[str, str]) -> bool:
    """Whether `choice` picks one of the `dequantized_convs` in a model with a QuantizeLinear
    (whose output it may then round otherwise than onnxruntime's own optimization)."""
    return (any(n.op_type == "QuantizeLinear" for n in model.graph.node)
            and bool(dequantized_convs(egraph).intersection(choice.values())))
