"""Templates over integers, conditions and control flow: int64 / int32 arithmetic (with
constants that fold, overflow included), comparisons and Where, an If whose condition a
caller feeds (or a constant, or an overridable constant), ops of a custom domain defined by
a model-local function (onnxruntime inlines it), and, only where a case allows it, an op
of a custom domain that nothing defines (onnxruntime cannot run it).
"""

from __future__ import annotations

import numpy as np
from onnx import helper as h

from .graphs import (
    BOOL,
    F32,
    I32,
    I64,
    NP,
    SYM,
    Builder,
    Gen,
    Val,
    broadcast,
    is_float,
    is_int,
    known,
)

FN_DOMAIN = "fuzz.fn"  # ops defined by model-local functions
OPAQUE_DOMAIN = "fuzz.opaque"  # ops nothing defines: the comparison adds a function for them


def _int_value(g: Gen) -> Val:
    b = g.b
    x = g.pick(is_int)
    if x is not None and g.flag(75):
        return x
    elem = g.choice([I64, I32])
    lo, hi = g.choice([(-5, 5), (-1000, 1000), (-(2**31), 2**31 - 1) if elem == I64 else (-(2**15), 2**15)])
    base = g.pick(lambda v: known(v) and v.elem == F32)
    shape = base.shape if base is not None and g.flag(50) else g.choice([(3,), (SYM, 4), (2, 3), ()])
    return b.input(elem, shape, lo=lo, hi=hi)


def int_arith(g: Gen) -> Val | None:
    b = g.b
    x = _int_value(g)
    op = g.choice(["Add", "Sub", "Mul", "Neg", "Abs", "Div", "Max", "Min", "Mod", "fold"])
    np_t = NP[x.elem]
    info = np.iinfo(np_t)
    if op in ("Neg", "Abs"):
        return b.op(op, [x.name], x.elem, x.shape)
    if op == "fold":  # constants whose product or sum overflows, folded, then used
        c1 = b.const(np.array(g.choice([2**16, 2**31 - 1, 3, -(2**20), info.max]), np_t), x.elem).name
        c2 = b.const(np.array(g.choice([2**16, 2, -1, 2**40 % (info.max + 1), 7]), np_t), x.elem).name
        c = b.op(g.choice(["Mul", "Add", "Sub"]), [c1, c2], x.elem, ()).name
        return b.op("Add", [x.name, c] if g.flag(50) else [c, x.name], x.elem, x.shape)
    if op in ("Div", "Mod"):
        v = g.choice([2, 3, -2, 7, -1])
        c = b.const(np.array(v, np_t), x.elem, alts=[[g.choice([5, -3])]] if g.flag(15) else None).name
        if op == "Mod":
            return b.op("Mod", [x.name, c], x.elem, x.shape, fmod=0)
        return b.op("Div", [x.name, c], x.elem, x.shape)
    y = g.pick(lambda v: v.elem == x.elem and known(v) and v.name != x.name
               and broadcast(x.shape, v.shape) == x.shape) if g.flag(40) else None
    if y is None:
        v = g.choice([0, 1, -1, 2, 5, 1 << 20, int(info.max), int(info.min)])
        alts = [[g.choice([3, -4])]] if g.flag(15) else None
        y = b.const(np.array(v, np_t), x.elem, alts=alts)
    ins = [x.name, y.name] if g.flag(60) else [y.name, x.name]
    return b.op(op, ins, x.elem, x.shape)


def compare_where(g: Gen) -> Val | None:
    b = g.b
    x = g.pick(lambda v: known(v) and v.exact and v.elem in (F32, I64, I32))
    if x is None:
        return None
    op = g.choice(["Less", "Greater", "Equal", "LessOrEqual", "GreaterOrEqual"])
    y = g.pick(lambda v: v.elem == x.elem and v.exact and known(v) and v.name != x.name
               and broadcast(x.shape, v.shape) is not None) if g.flag(40) else None
    if y is None:
        y = b.const(np.array(g.choice([0, 1, -1]), NP[x.elem]), x.elem)
    shape = broadcast(x.shape, y.shape)
    c = b.op(op, [x.name, y.name], BOOL, shape, exact=True)
    if g.flag(25):
        bop = g.choice(["Not", "And", "Or", "Xor"])
        c = b.op(bop, [c.name] if bop == "Not" else [c.name, c.name], BOOL, shape, exact=True)
    if g.flag(15):  # a condition that is all true: Expand(true, shape)
        t = b.const(np.array(True), BOOL).name
        shp = tuple(1 if d == SYM else d for d in shape)
        c = b.op("Expand", [t, b.ints(list(shp))], BOOL, shp, exact=True)
        shape = shp
    a = g.pick(lambda v: known(v) and v.elem == F32 and broadcast(shape, v.shape) is not None)
    if a is None:
        return c
    other = b.const(np.array(g.choice([0.0, -10000.0, 1.0]), np.float32), F32)
    out = broadcast(shape, a.shape)
    ins = [c.name, a.name, other.name] if g.flag(50) else [c.name, other.name, a.name]
    return b.op("Where", ins, F32, out, exact=a.exact)


def _branch(g: Gen, parent: Builder, outs: list[Val], tag: str) -> object:
    """A branch graph computing one value per `outs` entry (same type and shape) from the
    outer values, with its own constants."""
    sub = Builder(parent.rng, parent.opset, prefix=f"{parent.fresh(tag)}_")
    results = []
    for v in outs:
        kind = g.choice(["relu", "scale", "neg", "identity", "const"])
        if kind == "const" and known(v) and SYM not in v.shape:
            arr = parent.rng.standard_normal(v.shape).astype(np.float32)
            r = sub.const(arr, F32, as_node=True)
            results.append(Val(r.name, F32, v.shape))
        elif kind == "relu":
            results.append(sub.op("Relu", [v.name], F32, v.shape))
        elif kind == "scale":
            results.append(sub.op("Mul", [v.name, sub.scalar(g.choice([2.0, -0.5]))], F32, v.shape))
        elif kind == "neg":
            results.append(sub.op("Neg", [v.name], F32, v.shape))
        else:
            results.append(sub.op("Identity", [v.name], F32, v.shape))
    declare = g.flag(70)
    return sub.graph_proto(sub.fresh("g"), results, inputs=[], declare_shapes=declare)


def if_then_else(g: Gen) -> Val | None:
    b = g.b
    vals = [v for v in b.pool if is_float(v)]
    if not vals:
        return None
    outs = [g.pick(is_float) for _ in range(g.int(1, 2))]
    kind = g.choice(["input", "input", "overridable", "constant", "computed"])
    if kind == "input":
        cond = b.input(BOOL, ()).name
    elif kind == "overridable":  # a default a caller may replace: never folded
        cond = b.const(np.array(True), BOOL, alts=[[False], [True]]).name
    elif kind == "constant":
        cond = b.const(np.array(g.choice([True, False])), BOOL).name
    else:
        x = g.pick(lambda v: known(v) and v.exact and v.elem in (F32, I64, I32))
        if x is None:
            return None
        red = b.op("ReduceMax", [x.name], x.elem, (), keepdims=0) if x.elem == F32 else x
        if x.elem != F32:
            red = b.op("ReduceMax", [b.op("Cast", [x.name], F32, x.shape, exact=True, to=F32).name], F32, (),
                       exact=True, keepdims=0)
        cond = b.op("Greater", [red.name, b.scalar(0.0)], BOOL, (), exact=True).name
    then_g, else_g = _branch(g, b, outs, "then"), _branch(g, b, outs, "else")
    names = b.node("If", [cond], n_out=len(outs), then_branch=then_g, else_branch=else_g)
    res = [b.add(Val(n, F32, v.shape, False)) for n, v in zip(names, outs, strict=True)]
    return res[0]


def _function(name: str, domain: str, body: str, opset: int) -> object:
    """A model-local function of one input X and one output Y: x * sigmoid(x), a scaled
    Relu or a clipped difference."""
    if body == "swish":
        nodes = [h.make_node("Sigmoid", ["X"], ["s"]), h.make_node("Mul", ["X", "s"], ["Y"])]
    elif body == "double_relu":
        nodes = [h.make_node("Relu", ["X"], ["r"]), h.make_node("Add", ["r", "r"], ["Y"])]
    else:
        nodes = [h.make_node("Neg", ["X"], ["n"]), h.make_node("Max", ["X", "n"], ["Y"])]  # |x|
    return h.make_function(domain, name, ["X"], ["Y"], nodes, [h.make_opsetid("", opset)])


BODIES = ("swish", "double_relu", "abs")


def custom_function(g: Gen) -> Val | None:
    """An op of a custom domain that a model-local function defines."""
    b = g.b
    x = g.pick(lambda v: v.elem == F32)
    if x is None:
        return None
    body = g.choice(BODIES)
    name = f"Fn_{body}"
    if not any(f.name == name for f in b.functions):
        b.functions.append(_function(name, FN_DOMAIN, body, b.opset))
    b.domains[FN_DOMAIN] = 1
    return b.op(name, [x.name], F32, x.shape, domain=FN_DOMAIN)


def opaque(g: Gen) -> Val | None:
    """An op nothing defines, with attributes of every kind (cases with `custom` only)."""
    b = g.b
    if not g.custom:
        return None
    x = g.pick(lambda v: v.elem == F32)
    if x is None:
        return None
    body = g.choice(BODIES)
    name = f"Opaque_{body}"
    b.domains[OPAQUE_DOMAIN] = 1
    attrs = {}
    if g.flag(50):
        attrs = dict(alpha=1.5, count=3, label="x", sizes=[1, 2], scales=[0.5], names=["a", "b"])
    return b.op(name, [x.name], F32, x.shape, domain=OPAQUE_DOMAIN, **attrs)


def opaque_functions(b: Builder) -> list:
    """Definitions of the opaque ops a model uses, for running it under onnxruntime."""
    used = {n.op_type for n in b.nodes if n.domain == OPAQUE_DOMAIN}
    out = []
    for name in sorted(used):
        f = _function(name, OPAQUE_DOMAIN, name.removeprefix("Opaque_"), b.opset)
        f.attribute.extend(["alpha", "count", "label", "sizes", "scales", "names"])
        out.append(f)
    return out


TEMPLATES = {
    "int_arith": (int_arith, 4), "compare_where": (compare_where, 3), "if_then_else": (if_then_else, 2),
    "custom_function": (custom_function, 1), "opaque": (opaque, 2),
}
