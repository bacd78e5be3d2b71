"""Templates over float tensors: element-wise ops with constants, contractions (MatMul, Gemm,
attention), normalizations and activations written out the way exporters write them (the
patterns eqsat's fusion rules match), reductions, and convolution stacks.

A template takes a `Gen`, adds nodes to its builder's pool and returns whether it did.
"""

from __future__ import annotations

import numpy as np

from .graphs import F32, I64, SYM, Gen, Val, broadcast, is_float

EXACT_UNARY = ("Relu", "Neg", "Abs", "Identity")
SMOOTH_UNARY = ("Sigmoid", "Tanh", "Erf", "Softplus", "HardSwish", "Elu", "LeakyRelu", "HardSigmoid",
                "Sin", "Cos", "Exp", "Sqrt", "Log", "Reciprocal", "Clip", "Gelu", "Dropout", "Softsign")
ACTIVATIONS = ("Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "Clip", "Elu", "Identity")
SPECIAL = (0.0, 1.0, -1.0, 0.5, 2.0, 3.0)


def unary(g: Gen, x: Val | None = None, op: str | None = None) -> Val | None:
    b = g.b
    x = x or g.pick(lambda v: v.elem == F32)
    if x is None:
        return None
    ops = EXACT_UNARY + SMOOTH_UNARY + (("Floor", "Ceil") if x.exact else ())
    op = op or g.choice(ops)
    if op == "HardSwish" and b.opset < 14:
        op = "Sigmoid"
    if op in EXACT_UNARY or op in ("Floor", "Ceil"):
        return b.op(op, [x.name], F32, x.shape, exact=x.exact)
    if op == "Elu":
        return b.op(op, [x.name], F32, x.shape, alpha=g.choice([1.0, 0.5]))
    if op == "LeakyRelu":
        return b.op(op, [x.name], F32, x.shape, alpha=g.choice([0.01, 0.1, 0.2]))
    if op == "HardSigmoid":
        return b.op(op, [x.name], F32, x.shape, alpha=g.choice([0.2, 1 / 6]), beta=0.5)
    if op == "Exp":  # bounded: Exp(Tanh(x))
        return b.op("Exp", [b.op("Tanh", [x.name], F32, x.shape).name], F32, x.shape)
    if op in ("Sqrt", "Log", "Reciprocal"):  # on |x| + 1: defined everywhere
        pos = b.op("Add", [b.op("Abs", [x.name], F32, x.shape, exact=x.exact).name, b.scalar(1.0)], F32, x.shape)
        return b.op(op, [pos.name], F32, x.shape)
    if op == "Clip":
        lo, hi = g.choice([(0.0, 6.0), (-1.0, 1.0), (None, 0.5), (-0.5, None)])
        ins = [x.name, b.scalar(lo) if lo is not None else "", b.scalar(hi) if hi is not None else ""]
        while ins[-1] == "":
            ins.pop()
        return b.op("Clip", ins, F32, x.shape, exact=x.exact)
    if op == "Gelu":
        if b.opset < 20:
            return b.op("Tanh", [x.name], F32, x.shape)
        return b.op("Gelu", [x.name], F32, x.shape, approximate=g.choice(["none", "tanh"]))
    if op == "Dropout":  # inference mode: the identity
        ins = [x.name] + ([b.scalar(g.choice([0.0, 0.3]))] if g.flag(50) else [])
        return b.op("Dropout", ins, F32, x.shape, exact=x.exact)
    return b.op(op, [x.name], F32, x.shape)


def _operand(g: Gen, x: Val, op: str) -> tuple[str, tuple, bool] | None:
    """A second operand for a binary op with x: (name, shape, exact)."""
    b = g.b
    kind = g.choice(["scalar", "scalar", "row", "same", "pool", "pool", "column"])
    if kind == "pool":
        y = g.pick(lambda v: is_float(v) and v.name != x.name and broadcast(x.shape, v.shape) == x.shape)
        if y is not None:
            if op == "Div":
                pos = b.op("Add", [b.op("Abs", [y.name], F32, y.shape).name, b.scalar(0.5)], F32, y.shape)
                return pos.name, y.shape, False
            return y.name, y.shape, y.exact
        kind = "scalar"
    over = g.flag(15)
    if kind == "scalar" or x.shape in ((), None) or not isinstance(x.shape[-1], int):
        v = g.choice(SPECIAL) if g.flag(60) else float(np.round(b.rng.uniform(-2, 2), 3))
        if op == "Div" and abs(v) < 0.5:
            v = 2.0
        shape = g.choice([(), (1,)])
        alts = [[v + 1.5], [-v - 0.75]] if over else None
        return b.const(np.full(shape, v, np.float32), F32, alts, as_node=g.flag(20)).name, shape, True
    if kind == "row":
        shape = (x.shape[-1],) if g.flag(70) else (1, x.shape[-1])
    elif kind == "column" and len(x.shape) >= 2 and isinstance(x.shape[-2], int):
        shape = (x.shape[-2], 1)
    else:
        shape = tuple(d if isinstance(d, int) else 1 for d in x.shape)
    return b.weight(shape, scale=1.0, positive=op == "Div", overridable=over, broadcast_alt=True), shape, True


def binary(g: Gen) -> Val | None:
    b = g.b
    x = g.pick(is_float)
    if x is None:
        return None
    op = g.choice(["Add", "Add", "Sub", "Mul", "Mul", "Div", "Max", "Min", "Sum", "Pow", "Mean"])
    if op == "Pow":
        e = g.choice([2.0, 3.0, 2, 0.5, -1.0])
        if isinstance(e, int):
            ename = b.const(np.int64(e), I64).name
        else:
            ename = b.scalar(e)
        base = x
        if e in (0.5, -1.0):  # a positive base
            base = b.op("Add", [b.op("Abs", [x.name], F32, x.shape).name, b.scalar(1.0)], F32, x.shape)
        return b.op("Pow", [base.name, ename], F32, x.shape)
    y = _operand(g, x, op)
    if y is None:
        return None
    name, shape, exact = y
    out = broadcast(x.shape, shape)
    if out is None:
        return None
    ins = [x.name, name] if op == "Div" or g.flag(60) else [name, x.name]
    return b.op(op, ins, F32, out, exact=op in ("Max", "Min") and x.exact and exact)


def activation(g: Gen, x: Val, op: str | None = None) -> Val:
    op = op or g.choice(ACTIVATIONS)
    return unary(g, x, op)


def matmul(g: Gen) -> Val | None:
    b = g.b
    x = g.pick(lambda v: is_float(v) and len(v.shape) >= 1 and isinstance(v.shape[-1], int) and v.shape[-1] <= 64)
    if x is None:
        return None
    k = x.shape[-1]
    m = g.choice([1, 3, 4, 8, k])
    variant = g.choice(["plain", "plain", "gemm", "transpose_b", "scaled", "shared", "fused"])
    over = g.flag(15)
    if variant == "gemm" and len(x.shape) == 2:
        trans_b = g.flag(50)
        w = b.weight((m, k) if trans_b else (k, m), overridable=over)
        a = x.name
        trans_a = g.flag(20)
        if trans_a:
            a = b.op("Transpose", [x.name], F32, (x.shape[1], x.shape[0]), exact=x.exact).name
        c = g.choice([None, (m,), (1, m), ()])
        ins = [a, w] + ([b.weight(c, scale=1.0)] if c is not None else [])
        attrs = dict(transA=int(trans_a), transB=int(trans_b))
        if g.flag(30):
            attrs.update(alpha=g.choice([0.5, 2.0]), beta=g.choice([1.0, 0.5]))
        y = b.op("Gemm", ins, F32, (x.shape[0], m), **attrs)
        return activation(g, y) if g.flag(50) else y
    out_shape = x.shape[:-1] + (m,)
    if variant == "transpose_b":  # MatMul(x, Transpose(W[m, k]))
        wt = b.weight((m, k), overridable=over)
        w = b.op("Transpose", [wt], F32, (k, m), exact=True).name
    elif variant == "fused" and len(x.shape) >= 2:
        w = b.weight((m, k), overridable=over)
        b.domains["com.microsoft"] = 1
        y = b.op("FusedMatMul", [x.name, w], F32, out_shape, domain="com.microsoft", transB=1,
                 alpha=g.choice([1.0, 0.5]))
        return activation(g, y) if g.flag(40) else y
    else:
        w = b.weight((k, m), overridable=over)
    y = b.op("MatMul", [x.name, w], F32, out_shape)
    if variant == "scaled":
        s = b.scalar(g.choice([0.125, 0.5, 2.0]))
        y = b.op(g.choice(["Mul", "Div"]), [y.name, s] if g.flag(70) else [s, y.name], F32, out_shape)
    if variant == "shared":  # more products of the same input (merged-weight rules)
        for _ in range(g.int(1, 2)):
            w2 = b.weight((k, m))
            y2 = b.op("MatMul", [x.name, w2], F32, out_shape)
            if g.flag(50):
                y2 = b.op("Add", [y2.name, b.weight((m,), scale=1.0)], F32, out_shape)
    if g.flag(60):  # bias
        bias = b.weight((m,), scale=1.0, overridable=g.flag(10), broadcast_alt=True)
        y = b.op("Add", [y.name, bias] if g.flag(60) else [bias, y.name], F32, out_shape)
    return activation(g, y) if g.flag(50) else y


def attention(g: Gen) -> Val | None:
    """Single or multi-head self-attention written out: projections, scores scaled and
    softmaxed, an optional additive causal mask, heads split and merged with Reshape."""
    b = g.b
    x = g.pick(lambda v: is_float(v) and len(v.shape) == 3 and isinstance(v.shape[1], int)
               and isinstance(v.shape[2], int) and v.shape[2] in (4, 8, 12, 16) and v.shape[1] <= 8)
    if x is None:
        return None
    bsz, s, d = x.shape
    heads = g.choice([h for h in (1, 2, 4) if d % h == 0])
    dh = d // heads
    qkv = []
    for _ in range(3):
        t = b.op("MatMul", [x.name, b.weight((d, d))], F32, x.shape)
        if g.flag(50):
            t = b.op("Add", [t.name, b.weight((d,), scale=1.0)], F32, x.shape)
        qkv.append(t)
    if heads > 1:
        split = []
        for t in qkv:
            r = b.op("Reshape", [t.name, b.ints([0, 0, heads, dh])], F32, (bsz, s, heads, dh))
            split.append(b.op("Transpose", [r.name], F32, (bsz, heads, s, dh), perm=[0, 2, 1, 3]))
        q, k, v = split
    else:
        q, k, v = qkv
    kt_perm = list(range(len(k.shape)))
    kt_perm[-1], kt_perm[-2] = kt_perm[-2], kt_perm[-1]
    kt_shape = tuple(k.shape[i] for i in kt_perm)
    kt = b.op("Transpose", [k.name], F32, kt_shape, perm=kt_perm)
    sc_shape = q.shape[:-1] + (s,)
    scores = b.op("MatMul", [q.name, kt.name], F32, sc_shape)
    scale = float(np.sqrt(dh))
    if g.flag(50):
        scores = b.op("Div", [scores.name, b.scalar(scale)], F32, sc_shape)
    else:
        scores = b.op("Mul", [scores.name, b.scalar(1 / scale)], F32, sc_shape)
    if g.flag(40):
        mask = np.triu(np.full((s, s), -10000.0, np.float32), 1)
        scores = b.op("Add", [scores.name, b.const(mask, F32).name], F32, sc_shape)
    p = b.op("Softmax", [scores.name], F32, sc_shape, axis=-1)
    o = b.op("MatMul", [p.name, v.name], F32, q.shape)
    if heads > 1:
        o = b.op("Transpose", [o.name], F32, (bsz, s, heads, dh), perm=[0, 2, 1, 3])
        o = b.op("Reshape", [o.name, b.ints([0, 0, d])], F32, (bsz, s, d))
    return b.op("MatMul", [o.name, b.weight((d, d))], F32, (bsz, s, d))


def _reduce_mean(g: Gen, x: str, shape: tuple, axis: int) -> Val:
    b = g.b
    out = shape[:-1] + (1,)
    if b.opset >= 18:
        return b.op("ReduceMean", [x, b.ints([axis])], F32, out, keepdims=1)
    return b.op("ReduceMean", [x], F32, out, axes=[axis], keepdims=1)


def norm(g: Gen) -> Val | None:
    """LayerNorm or RMSNorm written out op by op (in the orders exporters use), the fused
    ops themselves, Softmax, LogSoftmax; optionally after a residual Add."""
    b = g.b
    x = g.pick(lambda v: is_float(v) and len(v.shape) >= 1 and isinstance(v.shape[-1], int) and v.shape[-1] >= 2)
    if x is None:
        return None
    d, r, shape = x.shape[-1], len(x.shape), x.shape
    if g.flag(30):  # residual: the skip forms
        y = g.pick(lambda v: is_float(v) and v.shape == shape and v.name != x.name)
        if y is not None:
            x = b.op("Add", [x.name, y.name], F32, shape)
    kind = g.choice(["layernorm", "layernorm", "rmsnorm", "fused", "softmax", "logsoftmax"])
    axis = g.choice([-1, r - 1])
    if kind in ("softmax", "logsoftmax"):
        return b.op("Softmax" if kind == "softmax" else "LogSoftmax", [x.name], F32, shape,
                    axis=g.choice(list(range(-r, r))))
    eps = g.choice([1e-5, 1e-6, 1e-12])
    if kind == "fused" and b.opset >= 17:
        ins = [x.name, b.weight((d,), scale=1.0, positive=True)] + ([b.weight((d,), scale=1.0)] if g.flag(50) else [])
        return b.op("LayerNormalization", ins, F32, shape, axis=-1, epsilon=eps)
    if kind == "rmsnorm":
        base = x.name
    else:
        mean = _reduce_mean(g, x.name, shape, axis)
        base = b.op("Sub", [x.name, mean.name], F32, shape).name
    sq = (b.op("Pow", [base, b.scalar(2.0)], F32, shape) if g.flag(50)
          else b.op("Mul", [base, base], F32, shape))
    var = _reduce_mean(g, sq.name, shape, axis)
    ve = b.op("Add", [var.name, b.scalar(eps)] if g.flag(70) else [b.scalar(eps), var.name], F32, var.shape)
    if g.flag(50):
        y = b.op("Div", [base, b.op("Sqrt", [ve.name], F32, var.shape).name], F32, shape)
    else:
        inv = b.op("Reciprocal", [b.op("Sqrt", [ve.name], F32, var.shape).name], F32, var.shape)
        y = b.op("Mul", [base, inv.name] if g.flag(50) else [inv.name, base], F32, shape)
    if g.flag(80):
        gamma = b.weight((d,), scale=1.0, positive=True, overridable=g.flag(10), broadcast_alt=True)
        y = b.op("Mul", [y.name, gamma] if g.flag(60) else [gamma, y.name], F32, shape)
        if kind == "layernorm" and g.flag(60):
            beta = b.weight((d,), scale=1.0)
            y = b.op("Add", [y.name, beta] if g.flag(60) else [beta, y.name], F32, shape)
    return y


def gelu(g: Gen) -> Val | None:
    """Gelu (erf and tanh forms, factors in any order), SiLU / QuickGelu, with a bias first."""
    b = g.b
    x = g.pick(is_float)
    if x is None:
        return None
    shape = x.shape
    if g.flag(40) and shape and isinstance(shape[-1], int):
        x = b.op("Add", [x.name, b.weight((shape[-1],), scale=1.0)], F32, shape)
    kind = g.choice(["erf", "tanh", "silu", "silu-alpha"])
    if kind.startswith("silu"):
        arg = x.name
        if kind == "silu-alpha":
            arg = b.op("Mul", [x.name, b.scalar(1.702)] if g.flag(50) else [b.scalar(1.702), x.name],
                       F32, shape).name
        s = b.op("Sigmoid", [arg], F32, shape)
        return b.op("Mul", [x.name, s.name] if g.flag(50) else [s.name, x.name], F32, shape)
    if kind == "erf":
        if g.flag(50):
            t = b.op("Div", [x.name, b.scalar(float(np.sqrt(2.0)))], F32, shape)
        else:
            t = b.op("Mul", [x.name, b.scalar(float(1 / np.sqrt(2.0)))], F32, shape)
        u = b.op("Erf", [t.name], F32, shape)
    else:
        cube = (b.op("Pow", [x.name, b.scalar(3.0)], F32, shape) if g.flag(50)
                else b.op("Mul", [x.name, b.op("Mul", [x.name, x.name], F32, shape).name], F32, shape))
        inner = b.op("Add", [x.name, b.op("Mul", [cube.name, b.scalar(0.044715)], F32, shape).name], F32, shape)
        t = b.op("Tanh", [b.op("Mul", [inner.name, b.scalar(float(np.sqrt(2 / np.pi)))], F32, shape).name],
                 F32, shape)
        u = t
    one_plus = b.op("Add", [u.name, b.scalar(1.0)] if g.flag(50) else [b.scalar(1.0), u.name], F32, shape)
    order = g.choice(["x*u*h", "x*(u*h)", "(x*h)*u"])
    half = b.scalar(0.5)
    if order == "x*u*h":
        p = b.op("Mul", [x.name, one_plus.name], F32, shape)
        return b.op("Mul", [p.name, half], F32, shape)
    if order == "x*(u*h)":
        p = b.op("Mul", [one_plus.name, half], F32, shape)
        return b.op("Mul", [x.name, p.name], F32, shape)
    p = b.op("Mul", [x.name, half], F32, shape)
    return b.op("Mul", [p.name, one_plus.name], F32, shape)


def reduce(g: Gen) -> Val | None:
    b = g.b
    x = g.pick(lambda v: is_float(v) and len(v.shape) >= 1)
    if x is None:
        return None
    op = g.choice(["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"])
    r = len(x.shape)
    axes = sorted(set(g.draw(g.st.lists(g.st.integers(0, r - 1), min_size=0, max_size=r))))
    keep = g.choice([0, 1])
    noop = 0
    if not axes and g.flag(50):
        noop = 1  # noop_with_empty_axes: the identity
    if noop:
        out = x.shape
    elif not axes:
        out = (1,) * r if keep else ()
    else:
        out = tuple((1 if keep else None) if i in axes else d for i, d in enumerate(x.shape))
        out = tuple(d for d in out if d is not None)
    neg = [a - r if g.flag(30) else a for a in axes]
    attrs = dict(keepdims=keep)
    if noop:
        attrs["noop_with_empty_axes"] = 1
    if b.opset >= 18 or op == "ReduceSum":
        ins = [x.name] + ([b.ints(neg)] if axes else [])
        return b.op(op, ins, F32, out, exact=op in ("ReduceMax", "ReduceMin") and x.exact, **attrs)
    if noop:
        return None
    if axes:
        attrs["axes"] = neg
    return b.op(op, [x.name], F32, out, exact=op in ("ReduceMax", "ReduceMin") and x.exact, **attrs)


def _spatial_input(g: Gen) -> Val:
    b = g.b
    x = g.pick(lambda v: is_float(v) and len(v.shape) in (3, 4) and all(isinstance(d, int) for d in v.shape[1:])
               and v.shape[1] <= 32 and all(d >= 3 for d in v.shape[2:]))
    if x is not None and g.flag(80):
        return x
    c = g.choice([1, 2, 3, 4, 8, 16])  # 16: a whole NCHWc block where onnxruntime's is 16 (8 with AVX2)
    spatial = tuple(g.int(3, 7) for _ in range(g.choice([2, 2, 1])))
    return b.input(F32, (g.choice([SYM, 1, 2]), c, *spatial))


def _out_dim(d: int, k: int, pad: int, stride: int, dil: int, ceil: bool = False) -> int:
    span = d + pad - dil * (k - 1) - 1
    return (-(-span // stride) if ceil else span // stride) + 1


def conv(g: Gen) -> Val | None:
    """Conv (maybe after a zero Pad, grouped or depthwise), then any of BatchNormalization, a
    per-channel Add or Mul constant, an activation and a residual Add."""
    b = g.b
    x = _spatial_input(g)
    n, c, *sp = x.shape
    nd = len(sp)
    k = g.choice([1, 2, 3])
    stride, dil = g.choice([1, 1, 2]), g.choice([1, 1, 2])
    pads = [g.choice([0, k // 2]) for _ in range(nd)] * 2
    src = x.name
    if g.flag(20):  # an explicit zero Pad the Conv absorbs
        p = [0, 0] + [g.int(0, 1) for _ in range(nd)] + [0, 0] + [g.int(0, 1) for _ in range(nd)]
        sp = [d + p[2 + i] + p[4 + nd + i] for i, d in enumerate(sp)]
        src = b.op("Pad", [src, b.ints(p)], F32, (n, c, *sp)).name
    outs = [_out_dim(d, k, pads[i] + pads[nd + i], stride, dil) for i, d in enumerate(sp)]
    if any(o < 1 for o in outs):
        return None
    depthwise = c > 1 and g.flag(20)
    cout = c if depthwise else g.choice([1, 2, 4, c, 16, 32])
    group = c if depthwise else 1
    w = b.weight((cout, c // group, *([k] * nd)), scale=float(1 / np.sqrt(c // group * k**nd)),
                 overridable=g.flag(10))
    ins = [src, w] + ([b.weight((cout,), scale=0.5, overridable=g.flag(10))] if g.flag(60) else [])
    attrs = dict(kernel_shape=[k] * nd, pads=pads, strides=[stride] * nd)
    if dil > 1:
        attrs["dilations"] = [dil] * nd
    if group > 1:
        attrs["group"] = group
    shape = (n, cout, *outs)
    y = b.op("Conv", ins, F32, shape, **attrs)
    if g.flag(50):
        ps = [b.weight((cout,), scale=1.0, positive=True), b.weight((cout,), scale=1.0), b.weight((cout,), scale=1.0),
              b.weight((cout,), scale=1.0, positive=True)]
        y = b.op("BatchNormalization", [y.name, *ps], F32, shape, epsilon=g.choice([1e-5, 1e-3]))
    if g.flag(40):
        cshape = g.choice([(cout,) + (1,) * nd, (1, cout) + (1,) * nd, (), (1,)])
        cname = b.weight(cshape, scale=1.0, positive=True, overridable=g.flag(10), broadcast_alt=True)
        op = g.choice(["Add", "Mul"])
        y = b.op(op, [y.name, cname] if g.flag(50) else [cname, y.name], F32, shape)
    if g.flag(60):
        y = activation(g, y)
    if shape == x.shape and g.flag(40):
        y = b.op("Add", [y.name, x.name] if g.flag(50) else [x.name, y.name], F32, shape)
        if g.flag(60):
            y = b.op("Relu", [y.name], F32, shape)
    return y


def pool(g: Gen) -> Val | None:
    b = g.b
    x = _spatial_input(g)
    n, c, *sp = x.shape
    nd = len(sp)
    kind = g.choice(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"])
    if kind.startswith("Global"):
        return b.op(kind, [x.name], F32, (n, c) + (1,) * nd, exact=kind == "GlobalMaxPool" and x.exact)
    k = g.choice([1, 2, 3])
    stride = g.choice([1, 2])
    pads = [g.int(0, k - 1) for _ in range(2 * nd)]
    ceil = g.flag(20)
    outs = [_out_dim(d, k, pads[i] + pads[nd + i], stride, 1, ceil) for i, d in enumerate(sp)]
    if ceil:  # the last window must start inside the input or its left padding
        outs = [o - 1 if (o - 1) * stride >= d + pads[i] else o for i, (o, d) in enumerate(zip(outs, sp, strict=True))]
    if any(o < 1 for o in outs):
        return None
    attrs = dict(kernel_shape=[k] * nd, strides=[stride] * nd, pads=pads)
    if ceil:
        attrs["ceil_mode"] = 1
    if kind == "AveragePool" and g.flag(50):
        attrs["count_include_pad"] = 1
    return b.op(kind, [x.name], F32, (n, c, *outs), exact=kind == "MaxPool" and x.exact, **attrs)


def fold_chain(g: Gen) -> Val | None:
    """Arithmetic on constants only (the folding oracle's work), then used with a value."""
    b = g.b
    x = g.pick(lambda v: is_float(v) and v.shape is not None)
    if x is None:
        return None
    shape = tuple(d if isinstance(d, int) else 1 for d in x.shape[-2:])
    c = b.const(b.rng.standard_normal(shape).astype(np.float32), F32, as_node=g.flag(30))
    for _ in range(g.int(1, 3)):
        op = g.choice(["Add", "Mul", "Sub", "Neg", "Transpose", "Relu"])
        if op in ("Neg", "Relu"):
            c = b.op(op, [c.name], F32, c.shape)
        elif op == "Transpose":
            if len(c.shape) == 2 and c.shape[0] == c.shape[1]:
                c = b.op("Transpose", [c.name], F32, c.shape, perm=[1, 0])
        else:
            c = b.op(op, [c.name, b.scalar(g.choice(SPECIAL))], F32, c.shape)
    out = broadcast(x.shape, c.shape)
    if out is None:
        return None
    return b.op(g.choice(["Add", "Mul"]), [x.name, c.name], F32, out)


TEMPLATES = {
    "unary": (unary, 6), "binary": (binary, 8), "matmul": (matmul, 6), "attention": (attention, 2),
    "norm": (norm, 4), "gelu": (gelu, 3), "reduce": (reduce, 3), "conv": (conv, 4), "pool": (pool, 2),
    "fold_chain": (fold_chain, 2),
}
