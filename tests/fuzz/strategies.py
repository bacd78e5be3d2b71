"""The hypothesis strategy for valid models: `cases()` draws a Case, a random DAG built by
the templates of gen_tensor, gen_shape and gen_control, and the options to optimize it with.

A case starts from one or two float inputs (a symbolic first dimension N half of the time),
applies 1 to 12 templates (all of them, or those of one family of `FAMILIES`), each to
values already in the graph (recent ones more often, so
that chains grow deep), and makes the last value and up to two others the outputs. The
strategy does not run the model: a property discards (hypothesis.assume) the rare case the
onnx checker or onnxruntime rejects.
"""

from __future__ import annotations

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import helper as h

from . import gen_control, gen_shape, gen_tensor
from .graphs import F32, SYM, Builder, Case, Gen, ir_version

TEMPLATES = {**gen_tensor.TEMPLATES, **gen_shape.TEMPLATES, **gen_control.TEMPLATES}
WEIGHTED = [name for name, (_, w) in TEMPLATES.items() for _ in range(w)]
OPSETS = (13, 15, 17, 18, 20, 21)
# Families of templates a case may keep to, so that the patterns one group of rules matches
# (LayerNorm after a residual Add, Conv + BatchNormalization + Relu, Shape -> Reshape chains)
# are built on each other's results more often than a mix of everything builds them.
FAMILIES = {
    "transformer": ("norm", "gelu", "matmul", "attention", "binary", "unary", "reshape", "transpose"),
    "conv": ("conv", "pool", "binary", "unary", "pad", "concat"),
    "shape": ("shape_chain", "shape_values", "reshape", "transpose", "slice", "gather", "concat", "split",
              "squeeze_unsqueeze", "expand", "flatten", "tile"),
    "int": ("int_arith", "compare_where", "cast", "shape_values", "gather", "if_then_else", "fold_chain"),
}


@st.composite
def options(draw) -> dict:
    """eqsat.core.pipeline.Options fields: target, extractor, cost model, layout, a --dim."""
    opts = {"extract_time_limit": 20.0}
    if draw(st.booleans()):
        opts["target"] = draw(st.sampled_from(["ort", "onnx"]))
        opts["extractor"] = draw(st.sampled_from(["ilp", "dag-greedy", "tree-greedy"]))
        opts["cost_model"] = draw(st.sampled_from(["node-count", "roofline"]))
        opts["layout"] = draw(st.sampled_from(["nchwc", "nchw"]))
    if draw(st.integers(0, 3)) == 0:
        opts["dims"] = {SYM: draw(st.sampled_from([1, 3, 64]))}
    return opts


def _start(g: Gen) -> None:
    b = g.b
    n = g.choice([SYM, SYM, 1, 2, 3])
    kind = g.choice(["dense", "dense", "seq", "vector", "spatial"])
    if kind == "dense":
        b.input(F32, (n, g.choice([2, 4, 8])))
    elif kind == "seq":
        b.input(F32, (n, g.choice([2, 3, 4]), g.choice([4, 8])))
    elif kind == "vector":
        b.input(F32, (g.choice([1, 3, 4]),))
    else:
        b.input(F32, (n, g.choice([1, 2, 3, 4]), g.int(3, 6), g.int(3, 6)))
    if g.flag(30):
        v = b.pool[0]
        b.input(F32, v.shape if g.flag(60) else v.shape[-1:], scale=g.choice([1.0, 3.0]))


@st.composite
def cases(draw, custom: bool = False, templates: tuple[str, ...] | None = None) -> Case:
    """A valid model. `custom`: it may hold ops of a domain nothing defines (at least one);
    `templates`: only these templates (default: all, weighted)."""
    seed = draw(st.integers(0, 2**31 - 1))
    opset = draw(st.sampled_from(OPSETS))
    b = Builder(np.random.default_rng(seed), opset)
    g = Gen(draw, b, custom)
    _start(g)
    family = None if templates else draw(st.sampled_from([None, None, None, *sorted(FAMILIES)]))
    names = list(templates) if templates else list(FAMILIES[family]) if family else WEIGHTED
    for _ in range(draw(st.integers(1, 12))):
        TEMPLATES[draw(st.sampled_from(names))][0](g)
    if custom and not any(n.domain == gen_control.OPAQUE_DOMAIN for n in b.nodes):
        gen_control.opaque(g)
    produced = {o for n in b.nodes for o in n.output}
    made = [v for v in b.pool if v.name in produced and v.shape is not None]
    if not made:
        made = [b.op("Relu", [b.pool[0].name], F32, b.pool[0].shape)]
    outs = [made[-1]]
    for _ in range(draw(st.integers(0, 2))):
        outs.append(made[draw(st.integers(0, len(made) - 1))])
    outs = list({v.name: v for v in outs}.values())
    graph = b.graph_proto("fuzz", outs, declare_shapes=draw(st.integers(0, 4)) > 0)
    imports = [h.make_opsetid("", opset)] + [h.make_opsetid(d, v) for d, v in sorted(b.domains.items())]
    model = h.make_model(graph, opset_imports=imports, producer_name="eqsat-fuzz")
    model.ir_version = max(ir_version(opset), 8 if b.functions else 0, 4 if b.overridable else 0)
    model.functions.extend(b.functions)
    opaque = gen_control.opaque_functions(b)
    return Case(model, b.inputs, b.overridable, seed, draw(options()), runnable=not opaque,
                custom_ops={(f.domain, f.name): f for f in opaque})


def checked(case: Case) -> str | None:
    """Why onnx's full checker rejects the case's model, or None."""
    try:
        onnx.checker.check_model(case.model, full_check=True)
    except Exception as e:  # noqa: BLE001 - any checker failure discards the case
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return None
