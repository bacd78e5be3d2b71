"""Templates that move data rather than compute it: Transpose, Reshape, Squeeze, Unsqueeze,
Flatten, Concat, Slice, Gather, Split, Expand, Tile, Pad, Cast, and shape arithmetic
(Shape -> Gather -> arithmetic -> Concat -> Reshape / Expand / Slice / Range /
ConstantOfShape), on static and symbolic dimensions.

A shape-like constant that a caller may override (an initializer that is also a graph
input) is fed values that give another output shape: such results get an unknown shape
(None), so that only shape-agnostic ops use them.
"""

from __future__ import annotations

import numpy as np

from .graphs import BOOL, F32, I32, I64, SYM, UNK, Gen, Val, known, numel

INT64_MAX = np.iinfo(np.int64).max


def _known(v: Val) -> bool:
    return known(v) and len(v.shape) >= 1


def _factor(g: Gen, total: int) -> list[int]:
    """A random factorization of `total` (>= 1) into 1 to 3 factors."""
    out = []
    rest = total
    for _ in range(g.int(0, 2)):
        divs = [d for d in range(1, rest + 1) if rest % d == 0]
        d = g.choice(divs)
        out.append(d)
        rest //= d
    return out + [rest]


def transpose(g: Gen) -> Val | None:
    x = g.pick(lambda v: _known(v) and len(v.shape) >= 2)
    if x is None:
        return None
    perm = g.draw(g.st.permutations(list(range(len(x.shape)))))
    attrs = {} if g.flag(10) else {"perm": list(perm)}
    if not attrs:
        perm = list(reversed(range(len(x.shape))))
    return g.b.op("Transpose", [x.name], x.elem, tuple(x.shape[i] for i in perm), exact=x.exact, **attrs)


def reshape(g: Gen) -> Val | None:
    b = g.b
    x = g.pick(lambda v: _known(v) and SYM not in v.shape[1:])
    if x is None:
        return None
    lead = x.shape[0] == SYM
    rest = x.shape[1:] if lead else x.shape
    total = numel(rest)
    if total == 0:  # an empty tensor: a 0 in a target means "copy", and -1 is ambiguous
        return None
    dims = _factor(g, total)
    out = ((SYM,) if lead else ()) + tuple(dims)
    target = ([0] if lead else []) + list(dims)
    if g.flag(30):  # one unknown dimension
        i = g.int(1 if lead else 0, len(target) - 1)
        target[i] = -1
    if not lead and g.flag(15) and len(target) >= 1 and len(x.shape) >= 1 and target[0] == x.shape[0]:
        target[0] = 0  # copy the input's first dimension
    alts = None
    if g.flag(15) and not lead:  # overridable target: another factorization
        alts = [[total] + [1] * (len(target) - 1), list(reversed(dims))]
        out = (UNK,) * len(target)
    attrs = {"allowzero": 1} if b.opset >= 14 and g.flag(10) and 0 not in target else {}
    return b.op("Reshape", [x.name, b.ints(target, alts)], x.elem, out, exact=x.exact, **attrs)


def shape_chain(g: Gen) -> Val | None:
    """A shape computed from Shape(x) by Gather, arithmetic and Concat, then used."""
    b = g.b
    x = g.pick(lambda v: _known(v) and len(v.shape) >= 2)
    if x is None:
        return None
    r = len(x.shape)
    if b.opset >= 15 and g.flag(20):
        s = b.op("Shape", [x.name], I64, (r - 1,), start=1).name
        sdims = list(x.shape[1:])
    else:
        s = b.op("Shape", [x.name], I64, (r,)).name
        sdims = list(x.shape)

    def dim(i: int) -> str:  # a 1-D [1] tensor holding dimension i of sdims
        if g.flag(50):
            gi = b.op("Gather", [s, b.ints(i if g.flag(50) else i - len(sdims))], I64, ()).name
            return b.op("Unsqueeze", [gi, b.ints([0])], I64, (1,)).name
        return b.op("Slice", [s, b.ints([i]), b.ints([i + 1])], I64, (1,)).name

    variant = g.choice(["flatten", "merge", "split_last", "expand", "const_of_shape", "range"])
    off = r - len(sdims)
    if variant == "flatten":  # [d0, rest...] -> [d0, prod(rest)]
        if off:
            return None
        tail = b.ints([-1])
        t = b.op("Concat", [dim(0), tail], I64, (2,), axis=0).name
        rest = x.shape[1:]
        out = (x.shape[0], numel(rest) if SYM not in rest else UNK)
        return b.op("Reshape", [x.name, t], x.elem, out, exact=x.exact)
    if variant == "merge" and len(sdims) >= 2:  # [a, b, rest...] -> [a * b, rest...]
        prod = b.op("Mul", [dim(0), dim(1)], I64, (1,)).name
        parts = [prod] + ([b.op("Slice", [s, b.ints([2]), b.ints([INT64_MAX])], I64, (len(sdims) - 2,)).name]
                          if len(sdims) > 2 else [])
        t = b.op("Concat", parts, I64, (len(sdims) - 1,), axis=0).name if len(parts) > 1 else prod
        if off:
            t = b.op("Concat", [b.ints([0]), t], I64, (len(sdims),), axis=0).name
        a, c = sdims[0], sdims[1]
        head = (a * c,) if isinstance(a, int) and isinstance(c, int) else None
        out = tuple(x.shape[:off]) + (head or (UNK,)) + tuple(sdims[2:])
        return b.op("Reshape", [x.name, t], x.elem, out, exact=x.exact)
    if variant == "split_last" and isinstance(sdims[-1], int) and sdims[-1] % 2 == 0:  # [..., 2m] -> [..., 2, m]
        last = dim(len(sdims) - 1)
        half = b.op("Div", [last, b.ints([2])], I64, (1,)).name
        head = b.op("Slice", [s, b.ints([0]), b.ints([len(sdims) - 1])], I64, (len(sdims) - 1,)).name
        t = b.op("Concat", [head, b.ints([2]), half], I64, (len(sdims) + 1,), axis=0).name
        if off:
            return None
        return b.op("Reshape", [x.name, t], x.elem, x.shape[:-1] + (2, sdims[-1] // 2), exact=x.exact)
    if variant == "expand" and not off:  # a row broadcast to x's shape
        y = g.pick(lambda v: v.elem == x.elem and _known(v) and v.shape == x.shape[-len(v.shape):]
                   and len(v.shape) <= r) if g.flag(50) else None
        if y is None:
            if x.elem != F32 or not isinstance(x.shape[-1], int):
                return None
            y = Val(b.weight((x.shape[-1],), scale=1.0), F32, (x.shape[-1],))
        return b.op("Expand", [y.name, s], x.elem, x.shape, exact=y.exact)
    if variant == "const_of_shape" and not off:
        val = np.array([g.choice([0.0, 1.0, 2.5])], np.float32)
        from onnx import numpy_helper

        c = b.op("ConstantOfShape", [s], F32, x.shape, exact=True, value=numpy_helper.from_array(val))
        if x.elem == F32:
            return b.op(g.choice(["Add", "Mul"]), [x.name, c.name], F32, x.shape)
        return c
    if variant == "range":  # Range(0, d, 1) over one dimension, cast and added
        i = g.int(0, len(sdims) - 1)
        d = b.op("Gather", [s, b.ints(i)], I64, ()).name
        rg = b.op("Range", [b.const(np.int64(0), I64).name, d, b.const(np.int64(1), I64).name], I64, (sdims[i],))
        return b.op("Cast", [rg.name], F32, (sdims[i],), exact=True, to=F32)
    return None


def shape_values(g: Gen) -> Val | None:
    """Shape(x) carried through the ops the symbolic shape oracle models (Gather with negative
    indices, Slice with negative steps, Concat, Unsqueeze, Squeeze, Reshape, Cast to int32,
    arithmetic with constants that overflow), the result a value of the graph."""
    b = g.b
    x = g.pick(lambda v: _known(v))
    if x is None:
        return None
    r = len(x.shape)
    v = b.op("Shape", [x.name], I64, (r,), exact=True)
    for _ in range(g.int(1, 4)):
        n = v.shape[0] if len(v.shape) == 1 else None
        op = g.choice(["gather", "slice", "concat", "unsqueeze", "cast32", "arith", "arith", "reshape"])
        if op == "gather" and n:
            idx = g.choice([0, -1, n - 1, [0, -1], [n - 1, 0, 0]])
            shape = () if isinstance(idx, int) else (len(idx),)
            v = b.op("Gather", [v.name, b.ints(idx)], v.elem, shape, exact=True)
        elif op == "slice" and n:
            step = g.choice([1, -1, 2])
            start, end = (0, INT64_MAX) if step > 0 else (-1, -INT64_MAX)
            v = b.op("Slice", [v.name, b.ints([start]), b.ints([end]), b.ints([0]), b.ints([step])], v.elem,
                     (len(range(n)[::step]),), exact=True)
        elif op == "concat" and len(v.shape) == 1:
            c = b.const(np.array(g.choice([[1], [-1, 3], [2**40 if v.elem == I64 else 2**30]]), NP_OF[v.elem]),
                        v.elem)
            v = b.op("Concat", [v.name, c.name] if g.flag(50) else [c.name, v.name], v.elem,
                     (v.shape[0] + c.shape[0],), exact=True, axis=0)
        elif op == "unsqueeze":
            v = b.op("Unsqueeze", [v.name, b.ints([0])], v.elem, (1, *v.shape), exact=True)
            if g.flag(50):
                v = b.op("Squeeze", [v.name, b.ints([0])], v.elem, v.shape[1:], exact=True)
        elif op == "reshape" and len(v.shape) <= 1:
            column = g.flag(50)
            v = b.op("Reshape", [v.name, b.ints([-1, 1] if column else [-1])], v.elem,
                     (numel(v.shape), 1) if column else (numel(v.shape),), exact=True)
            if g.flag(50):
                v = b.op("Reshape", [v.name, b.ints([-1])], v.elem, (numel(v.shape),), exact=True)
        elif op == "cast32":
            to = I32 if v.elem == I64 else I64
            v = b.op("Cast", [v.name], to, v.shape, exact=True, to=to)
        else:
            k = g.choice([2, -3, 2**31, 2**62, -(2**63), 7])
            if v.elem == I32:
                k = int(np.array(k).astype(np.int32)) if abs(k) > 2**31 - 1 else k
            arith = g.choice(["Mul", "Add", "Sub", "Div"])
            if arith == "Div" and k in (0, -1):
                k = 2
            c = b.const(np.array(k, NP_OF[v.elem]), v.elem).name
            v = b.op(arith, [v.name, c] if arith == "Div" or g.flag(50) else [c, v.name], v.elem, v.shape,
                     exact=True)
    return v


NP_OF = {I64: np.int64, I32: np.int32}


def squeeze_unsqueeze(g: Gen) -> Val | None:
    b = g.b
    x = g.pick(lambda v: v.shape is not None)
    if x is None:
        return None
    r = len(x.shape)
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    if ones and g.flag(50):
        axes = sorted(set(g.draw(g.st.lists(g.st.sampled_from(ones), min_size=1, max_size=len(ones)))))
        out = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        ins = [x.name] + ([b.ints([a - r if g.flag(30) else a for a in axes])] if g.flag(90) else [])
        if len(ins) == 1:  # no axes: every dimension of size 1, N's too where it is 1
            out = None if SYM in x.shape else tuple(d for d in x.shape if d != 1)
        return b.op("Squeeze", ins, x.elem, out, exact=x.exact)
    k = g.int(1, 2)
    axes = sorted(g.draw(g.st.lists(g.st.integers(0, r + k - 1), min_size=k, max_size=k, unique=True)))
    out = list(x.shape)
    for a in axes:
        out.insert(a, 1)
    y = b.op("Unsqueeze", [x.name, b.ints(axes)], x.elem, tuple(out), exact=x.exact)
    if g.flag(30):  # and back
        return b.op("Squeeze", [y.name, b.ints(axes)], x.elem, x.shape, exact=x.exact)
    return y


def flatten(g: Gen) -> Val | None:
    x = g.pick(lambda v: _known(v) and SYM not in v.shape[1:])
    if x is None:
        return None
    r = len(x.shape)
    axis = g.int(1 if x.shape[0] == SYM else 0, r)
    head, tail = x.shape[:axis], x.shape[axis:]
    out = ((x.shape[0] if axis == 1 else numel(head) if axis else 1), numel(tail) if tail else 1)
    if SYM in head and axis != 1:
        return None
    return g.b.op("Flatten", [x.name], x.elem, out, exact=x.exact, axis=axis - r if g.flag(20) else axis)


def concat(g: Gen) -> Val | None:
    b = g.b
    x = g.pick(lambda v: _known(v) and v.elem in (F32, I64))
    if x is None:
        return None
    axes = [i for i, d in enumerate(x.shape) if d != SYM]
    if not axes:
        return None
    a = g.choice(axes)
    parts, total = [x], x.shape[a]
    for _ in range(g.int(0, 2)):
        if g.flag(50):
            y = g.pick(lambda v, x=x, a=a: v.elem == x.elem and _known(v) and len(v.shape) == len(x.shape)
                       and all(p == q for i, (p, q) in enumerate(zip(v.shape, x.shape, strict=True)) if i != a)
                       and v.shape[a] != SYM)
            if y is not None:
                parts.append(y)
                total += y.shape[a]
                continue
        k = g.int(1, 3)
        shape = tuple(k if i == a else d for i, d in enumerate(x.shape))
        if SYM in shape:  # a constant cannot have N: repeat x instead
            parts.append(x)
            total += x.shape[a]
            continue
        arr = b.rng.standard_normal(shape).astype(np.float32) if x.elem == F32 else b.rng.integers(-3, 4, shape)
        parts.append(b.const(arr, x.elem, pool=False))
        total += k
    out = tuple(total if i == a else d for i, d in enumerate(x.shape))
    axis = a - len(x.shape) if g.flag(30) else a
    return b.op("Concat", [p.name for p in parts], x.elem, out, exact=all(p.exact for p in parts), axis=axis)


def _slice_len(d: int, start: int, end: int, step: int) -> int:
    return len(range(d)[slice(start, end, step)])


def slice_(g: Gen) -> Val | None:
    b = g.b
    x = g.pick(lambda v: _known(v) and any(isinstance(d, int) for d in v.shape))
    if x is None:
        return None
    r = len(x.shape)
    cand = [i for i, d in enumerate(x.shape) if isinstance(d, int)]
    axes = sorted(set(g.draw(g.st.lists(g.st.sampled_from(cand), min_size=1, max_size=len(cand)))))
    if SYM in x.shape and g.flag(20):  # the symbolic axis, whole
        axes.append(x.shape.index(SYM))
    starts, ends, steps, out = [], [], [], list(x.shape)
    for a in axes:
        d = x.shape[a]
        if d == SYM:
            starts.append(0), ends.append(INT64_MAX), steps.append(1)
            continue
        step = g.choice([1, 1, 1, 2, -1, -2])
        start = g.choice([0, 1, -1, d, -d - 3, d + 3, INT64_MAX if step < 0 else 0])
        end = g.choice([d, -1, 1, INT64_MAX, -INT64_MAX, -d - 5] if step > 0 else [-d - 5, 0, -INT64_MAX, 1])
        n = _slice_len(d, start, end, step)
        if n == 0:
            start, end, step, n = 0, d, 1, d
        starts.append(start), ends.append(end), steps.append(step)
        out[a] = n
    ins = [x.name, b.ints(starts), b.ints(ends)]
    use_steps = any(s != 1 for s in steps) or g.flag(30)
    if use_steps or g.flag(70) or axes != list(range(len(axes))):
        ins.append(b.ints([a - r if g.flag(30) else a for a in axes]))
    if use_steps:
        ins.append(b.ints(steps))
    return b.op("Slice", ins, x.elem, tuple(out), exact=x.exact)


def gather(g: Gen) -> Val | None:
    b = g.b
    x = g.pick(_known)
    if x is None:
        return None
    r = len(x.shape)
    a = g.int(0, r - 1)
    d = x.shape[a]
    lo, hi = (-1, 0) if d == SYM else (-d, d - 1)  # valid for every size of N
    kind = g.choice(["scalar", "list", "list", "matrix", "input"])
    if kind == "input" and d != SYM:
        k = g.int(1, 3)
        idx = b.input(I64, (k,), lo=lo, hi=hi, index_bound=d)
        ishape = (k,)
        iname = idx.name
    else:
        ishape = {"scalar": (), "list": (g.int(1, 4),), "matrix": (2, g.int(1, 2)), "input": (2,)}[kind]
        vals = b.rng.integers(lo, hi + 1, size=ishape)
        alts = [b.rng.integers(lo, hi + 1, size=ishape)] if g.flag(20) else None
        iname = b.ints(vals, alts)
    out = x.shape[:a] + ishape + x.shape[a + 1:]
    return b.op("Gather", [x.name, iname], x.elem, out, exact=x.exact, axis=a - r if g.flag(30) else a)


def split(g: Gen) -> Val | None:
    b = g.b
    x = g.pick(lambda v: _known(v) and any(isinstance(d, int) and d >= 2 for d in v.shape))
    if x is None:
        return None
    r = len(x.shape)
    a = g.choice([i for i, d in enumerate(x.shape) if isinstance(d, int) and d >= 2])
    d = x.shape[a]
    k = g.int(2, min(d, 4))
    ins = [x.name]
    attrs = {"axis": a - r if g.flag(30) else a}
    if b.opset >= 18 and g.flag(50):
        sizes = [-(-d // k)] * (d // -(-d // k)) + ([d % -(-d // k)] if d % -(-d // k) else [])
        attrs["num_outputs"] = len(sizes)
    elif d % k == 0 and g.flag(30):
        sizes = [d // k] * k
        if b.opset >= 18:
            attrs["num_outputs"] = k
    else:
        cuts = sorted(g.draw(g.st.lists(g.st.integers(1, d - 1), min_size=k - 1, max_size=k - 1, unique=True)))
        sizes = [q - p for p, q in zip([0, *cuts], [*cuts, d], strict=True)]
        ins.append(b.ints(sizes))
    outs = b.node("Split", ins, n_out=len(sizes), **attrs)
    vals = [b.add(Val(o, x.elem, tuple(s if i == a else dd for i, dd in enumerate(x.shape)), x.exact))
            for o, s in zip(outs, sizes, strict=True)]
    return vals[g.int(0, len(vals) - 1)]


def expand(g: Gen) -> Val | None:
    b = g.b
    x = g.pick(lambda v: known(v) and SYM not in v.shape)
    if x is None:
        return None
    target = [g.choice([d, 1]) if d != 1 else g.choice([1, 2, 3]) for d in x.shape]
    lead = [g.int(1, 3) for _ in range(g.int(0, 1))]
    target = lead + target
    out = tuple(lead) + tuple(max(p, q) for p, q in zip(x.shape, target[len(lead):], strict=True))
    alts = None
    if g.flag(15):
        alts = [[1] * len(target)]  # another shape: the result's shape is then unknown
        out = (UNK,) * len(target)
    return b.op("Expand", [x.name, b.ints(target, alts)], x.elem, out, exact=x.exact)


def tile(g: Gen) -> Val | None:
    b = g.b
    x = g.pick(_known)
    if x is None:
        return None
    reps = [g.choice([1, 1, 2, 3]) for _ in x.shape]
    out = tuple(d if k == 1 else (d * k if isinstance(d, int) else None) for d, k in zip(x.shape, reps, strict=True))
    if None in out:
        return None
    return b.op("Tile", [x.name, b.ints(reps)], x.elem, out, exact=x.exact)


def pad(g: Gen) -> Val | None:
    b = g.b
    x = g.pick(lambda v: _known(v) and v.elem == F32)
    if x is None:
        return None
    r = len(x.shape)
    mode = g.choice(["constant", "constant", "reflect", "edge"])
    pads = []
    for _side in range(2):
        for d in x.shape:
            if d == SYM:
                pads.append(0)
            elif mode == "reflect":
                pads.append(g.int(0, min(2, d - 1)))
            else:
                pads.append(g.choice([0, 0, 1, 2] + ([-1] if mode == "constant" and d >= 3 else [])))
    out = tuple(d if d == SYM else d + pads[i] + pads[r + i] for i, d in enumerate(x.shape))
    ins = [x.name, b.ints(pads)]
    if mode == "constant" and g.flag(50):
        ins.append(b.scalar(g.choice([0.0, 1.5])))
    return b.op("Pad", ins, F32, out, exact=x.exact, mode=mode)


def cast(g: Gen) -> Val | None:
    b = g.b
    x = g.pick(lambda v: v.shape is not None)
    if x is None:
        return None
    if x.elem == F32:
        to = g.choice([F32, I64, I32, BOOL]) if x.exact else F32
    elif x.elem == BOOL:
        to = g.choice([F32, I64, BOOL])
    else:
        to = g.choice([F32, I64, I32, x.elem])
    if b.opset >= 15 and g.flag(15):
        like = b.const(np.zeros((), {F32: np.float32, I64: np.int64, I32: np.int32, BOOL: np.bool_}[to]), to).name
        return b.op("CastLike", [x.name, like], to, x.shape, exact=x.exact)
    return b.op("Cast", [x.name], to, x.shape, exact=x.exact or to != F32, to=to)


TEMPLATES = {
    "transpose": (transpose, 3), "reshape": (reshape, 3), "shape_chain": (shape_chain, 4),
    "shape_values": (shape_values, 3),
    "squeeze_unsqueeze": (squeeze_unsqueeze, 2), "flatten": (flatten, 1), "concat": (concat, 3),
    "slice": (slice_, 3), "gather": (gather, 3), "split": (split, 2), "expand": (expand, 2), "tile": (tile, 1),
    "pad": (pad, 1), "cast": (cast, 2),
}
