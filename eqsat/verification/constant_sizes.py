"""Sizes for a model's symbolic dimensions read from its constants, for verification to try
where none of `verification_dims` runs the original.

An export can fix a symbolic size by the constants the symbol meets: a ViT's position
embeddings [1, 5, d] fix the patch count (2 x 2 patches and a class token: 32 x 32 pixels
under a 16-wide patch Conv), a Reshape to [4, 4] or a MatMul with a [24, 10] weight fixes a
product, an Add of a [1, 197, d] table fixes a sequence. Such a model was "not possible" to
verify, and a wrong rewrite of it was written unchecked. `constant_sizes` lists candidate
sizes drawn from those constants, each tried for every free symbolic dimension that is not
a batch at once, bounded in number (CONSTANT_TRIES) and in the elements of the inputs (at
most those of the largest size `verification_dims` tries). Where none of those runs,
`separate_sizes` gives each such dimension its own candidate: a height and a width that two
weights fix apart take no one size.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import chain, product

import numpy as np
import onnx
import onnx.shape_inference
from onnx import ModelProto, TensorProto, numpy_helper

from eqsat.core.scopes import all_graphs, subgraphs

CONSTANT_TRIES = 16  # sizes constant_sizes (and separate_sizes) returns, at most
SEPARATE_DIMS = 4  # separate_sizes gives each its own candidate for at most this many dimensions
SEPARATE_EACH = 4  # candidates separate_sizes keeps for each dimension
SEPARATE_PROBES = 64  # candidates separate_sizes looks at for each dimension, at most
SHAPE_LIKE = 16  # integer constants of at most this many elements are read as shapes (their values and product)
WINDOW_OPS = {"Conv", "MaxPool", "AveragePool", "LpPool"}
# beyond_sizes: constants' values above this are "to the end" (INT64_MAX as a Slice's end), not a bound
BEYOND_LIMIT = 4096
BEYOND_FACTOR = 128  # beyond_sizes scales the sizes by at most this
# ops whose outputs _bound_values computes where their inputs are small integer constants
FOLDED = {"Add", "Sub", "Mul", "Div", "Neg", "Abs", "Max", "Min", "Concat", "Unsqueeze", "Squeeze", "Reshape",
          "Cast", "Gather", "Slice", "ReduceProd", "ReduceSum", "Identity"}


def constant_sizes(model: ModelProto, free: list[str], base: dict[str, int],
                   tried: list[dict[str, int]]) -> list[dict[str, int]]:
    """Sizes to try after `tried`: `base` with every dimension of `free` that is not a batch
    (all of `free` where each is a batch) set to one candidate c, for the candidates in this
    order, each tier ascending: sizes a Conv or pool window needs to give an output of r
    (`(r - 1) * stride + kernel`), r the square root of a constant's dimension or of that
    minus one (a class token), then r one of the numbers (dimensions of constants, values and
    products of small integer constants, quotients of two of those); then those numbers and
    roots themselves; then windows' sizes for an output of 1 (which broadcasts against
    anything: a ViT runs on one patch, which leaves the patches' order unverified). Sizes
    already in `tried`, and those whose inputs have more elements than the largest of
    `tried`, are left out."""
    names = _names(free)
    if not names:
        return []
    return _new_within_budget(model, ({**base, **dict.fromkeys(names, c)} for c in _candidates(model)), tried)


def separate_sizes(model: ModelProto, free: list[str], base: dict[str, int],
                   tried: list[dict[str, int]]) -> list[dict[str, int]]:
    """Sizes to try after `constant_sizes`, where two or more of `free` are not a batch: each
    of those at its own candidate. A candidate fits a dimension where onnx's shape inference
    (strict) takes the model with that dimension alone set to it (the others symbolic: a
    16-wide patch Conv, then a [4, 5] weight on the patch columns and a [2, 3] one on the rows
    take w = 64 and h = 32, which no one size for both gives); the first SEPARATE_EACH that fit
    each dimension (or the first candidates, where inference refuses the model as it is), then
    their combinations, those of the earlier candidates first, at most CONSTANT_TRIES in
    number, none in `tried` nor with more elements than its largest."""
    names = _names(free)
    if len(names) < 2 or len(names) > SEPARATE_DIMS:
        return []
    candidates = _candidates(model)
    probe = _ShapeProbe(model)
    fits = {n: _fitting(probe, n, candidates) for n in names} if probe.takes({}) else \
        dict.fromkeys(names, candidates[:SEPARATE_EACH])
    if any(not f for f in fits.values()):
        return []
    combos = sorted(product(*(range(len(fits[n])) for n in names)), key=lambda ranks: (sum(ranks), ranks))
    return _new_within_budget(
        model, ({**base, **{n: fits[n][r] for n, r in zip(names, ranks, strict=True)}} for ranks in combos), tried)


def beyond_sizes(model: ModelProto, free: list[str], base: dict[str, int],
                 tried: list[dict[str, int]]) -> dict[str, int] | None:
    """`base` with every dimension of `free` that is not a batch (all of `free` where each
    is) times the least factor k >= 2 that puts each beyond every value of the model's small
    integer constants up to BEYOND_LIMIT (a Slice's bound, a Pad, a Reshape part, a product
    of those): a rewrite right only for sizes up to such a value (a Slice to 5 taken for the
    identity) passed sizes of 0 to 3. Scaling keeps the sizes' sums and differences (a KV
    cache's total = past + sequence). k is at most BEYOND_FACTOR and no larger than keeps
    the inputs within the elements of the largest of `tried` (k = 2 always is); None where
    `free` is empty."""
    names = _names(free)
    if not names:
        return None
    bound = max((v for v in bound_values(model) if v <= BEYOND_LIMIT), default=1)
    least = min(base.get(n, 2) for n in names) or 1
    k = min(max(2, bound // least + 1), BEYOND_FACTOR)
    budget = max([_elements(model, t) for t in tried] + [_elements(model, {**base, **{n: base.get(n, 2) * 2
                                                                                      for n in names}})])
    while k >= 2:
        at = {**base, **{n: base.get(n, 2) * k for n in names}}
        if _elements(model, at) <= budget:
            return at
        k //= 2
    return None


def bound_values(model: ModelProto) -> set[int]:
    """The values (and products) of the main graph's integer constants of at most SHAPE_LIKE
    elements, and of what its nodes compute from those alone (FOLDED ops: a Slice's end 3 * 4
    was 12 where no constant held it): what may bound a size, unlike a weight's dimensions.
    Those of every body (If branches, Loop and Scan bodies, nested ones) too: a Scan over a
    symbolic number of rows whose body counts them against its constant 10 reads some outer
    value only past row 10."""
    out: set[int] = set()
    for v in constant_values(model).values():
        out |= _shape_numbers(v)
    for n in model.graph.node:
        for a in n.attribute:
            for body in subgraphs(a):
                out |= bound_values(onnx.helper.make_model(body))
    return out


def constant_values(model: ModelProto) -> dict[str, np.ndarray]:
    """The main graph's integer constants of at most SHAPE_LIKE elements (initializers, Constant
    nodes) and what its FOLDED nodes compute from those alone, by name."""
    known: dict[str, np.ndarray] = {}
    for t in model.graph.initializer:
        if t.data_type in (6, 7) and math.prod(t.dims) <= SHAPE_LIKE and not t.data_location:
            known[t.name] = numpy_helper.to_array(t)
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx") or not n.output:
            continue
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and a.t.data_type in (6, 7) and math.prod(a.t.dims) <= SHAPE_LIKE:
                    known[n.output[0]] = numpy_helper.to_array(a.t)
                elif a.name in ("value_ints", "value_int"):
                    known[n.output[0]] = np.array(list(a.ints) if a.name == "value_ints" else [a.i], np.int64)
        elif n.op_type in FOLDED and n.input and all(i in known for i in n.input if i):
            folded = _folded(n, known)
            if folded is not None:
                known[n.output[0]] = folded
    return known


def _folded(node: onnx.NodeProto, known: dict[str, np.ndarray]) -> np.ndarray | None:
    """The output of `node` (of FOLDED) from `known` inputs, where it is a small integer tensor; else None."""
    from onnx.reference import ReferenceEvaluator

    try:
        graph = onnx.helper.make_graph([node], "fold", [], [onnx.helper.make_empty_tensor_value_info(node.output[0])],
                                       [numpy_helper.from_array(known[i], i) for i in dict.fromkeys(node.input) if i])
        got = ReferenceEvaluator(onnx.helper.make_model(graph)).run(None, {})[0]
    except Exception:  # noqa: BLE001 - the reference evaluator refuses it: not a bound
        return None
    got = np.asarray(got)
    return got if got.dtype.kind == "i" and got.size <= SHAPE_LIKE else None


def _new_within_budget(model: ModelProto, proposed: Iterable[dict[str, int]],
                       tried: list[dict[str, int]]) -> list[dict[str, int]]:
    """The first CONSTANT_TRIES of `proposed` that are new (not in `tried`, not repeated) and
    have no more elements than the largest of `tried`."""
    budget = max((_elements(model, t) for t in tried), default=0)
    out: list[dict[str, int]] = []
    for at in proposed:
        if at in tried or at in out or _elements(model, at) > budget:
            continue
        out.append(at)
        if len(out) == CONSTANT_TRIES:
            break
    return out


def _fitting(probe: _ShapeProbe, name: str, candidates: list[int]) -> list[int]:
    """The first SEPARATE_EACH candidates with which shape inference takes the model, `name` set
    to each (at most SEPARATE_PROBES looked at)."""
    out = []
    for c in candidates[:SEPARATE_PROBES]:
        if probe.takes({name: c}):
            out.append(c)
            if len(out) == SEPARATE_EACH:
                break
    return out


class _ShapeProbe:
    """onnx's strict shape inference on the model's graph with some symbolic input dimensions
    set to numbers: a copy without the initializers' data (those of more than SHAPE_LIKE
    elements become inputs of their type and shape), the graph's outputs and value_info
    without their shapes (inference finds them)."""

    def __init__(self, model: ModelProto) -> None:
        g = model.graph
        graph = onnx.GraphProto(name=g.name)
        graph.node.extend(g.node)
        graph.input.extend(g.input)
        names = {vi.name for vi in g.input}
        for t in g.initializer:
            if math.prod(t.dims) <= SHAPE_LIKE and not t.data_location:
                graph.initializer.append(t)
            elif t.name not in names:
                graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        graph.output.extend(onnx.helper.make_empty_tensor_value_info(o.name) for o in g.output)
        self.model = onnx.helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
        self.model.functions.extend(model.functions)

    def takes(self, sizes: dict[str, int]) -> bool:
        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        for vi in m.graph.input:
            for d in vi.type.tensor_type.shape.dim:
                if d.dim_param in sizes:
                    d.dim_value = sizes[d.dim_param]
        try:
            onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True, data_prop=True)
        except Exception:  # noqa: BLE001 - onnx raises several kinds (InferenceError, ValidationError, ...)
            return False
        return True


def _names(free: list[str]) -> list[str]:
    """The dimensions of `free` that get a candidate: those that are not a batch (all, where each is)."""
    return [n for n in free if "batch" not in n.lower()] or list(free)


def _candidates(model: ModelProto) -> list[int]:
    """Candidate sizes in `constant_sizes`' order: windows' sizes for outputs of the roots, then of
    the numbers, then the numbers and roots, then windows' sizes for an output of 1."""
    numbers = _numbers(model)
    numbers |= {a // b for a in numbers for b in numbers if b > 1 and a > b and a % b == 0}
    roots = {r for v in numbers for r in (math.isqrt(v), math.isqrt(v - 1)) if r > 1 and r * r in (v, v - 1)}
    windows = _windows(model)
    sized = [sorted({(r - 1) * s + k for k, s in windows for r in rs}) for rs in (roots, numbers, {1})]
    return list(dict.fromkeys(chain(sized[0], sized[1], sorted(numbers | roots), sized[2])))


def _numbers(model: ModelProto) -> set[int]:
    """Numbers above 1 the main graph's constants hold as sizes: every dimension of an
    initializer or Constant, and the values and product of the positive values of an integer
    one of at most SHAPE_LIKE elements."""
    out: set[int] = set()
    tensors = list(model.graph.initializer)
    for n in model.graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            for a in n.attribute:
                if a.name == "value":
                    tensors.append(a.t)
                elif a.name in ("value_ints", "value_int"):
                    vals = list(a.ints) if a.name == "value_ints" else [a.i]
                    out |= _shape_numbers(np.array(vals, np.int64))
    for t in tensors:
        out |= {int(d) for d in t.dims if d > 1}
        if t.data_type in (6, 7) and math.prod(t.dims) <= SHAPE_LIKE and not t.data_location:
            out |= _shape_numbers(numpy_helper.to_array(t))
    return out


def _shape_numbers(a: np.ndarray) -> set[int]:
    vals = [int(v) for v in a.reshape(-1) if v > 0]
    out = {v for v in vals if v > 1}
    if len(vals) > 1 and math.prod(vals) > 1:
        out.add(math.prod(vals))
    return out


def _windows(model: ModelProto) -> set[tuple[int, int]]:
    """(kernel, stride) of each spatial axis of the main graph's Conv and pool nodes, where known,
    and (P, P) for P the product of their strides (a VGG's five pools of stride 2 before a
    Flatten: 7 x 7 positions need 224 pixels; a chain of windows as one)."""
    chained: list[int] = []
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    weights |= {n.output[0]: list(a.t.dims) for n in model.graph.node if n.op_type == "Constant"
                for a in n.attribute if a.name == "value"}
    out: set[tuple[int, int]] = set()
    for n in model.graph.node:
        if n.op_type not in WINDOW_OPS or n.domain not in ("", "ai.onnx"):
            continue
        attrs = {a.name: list(a.ints) for a in n.attribute}
        kernel = attrs.get("kernel_shape")
        if not kernel and n.op_type == "Conv" and len(n.input) > 1:
            kernel = weights.get(n.input[1], [])[2:]
        strides = attrs.get("strides") or [1] * len(kernel or [])
        out |= {(int(k), int(s)) for k, s in zip(kernel or [], strides, strict=False) if k > 0 and s > 0}
        chained.append(max([1, *strides]))
    total = math.prod(chained)
    if total > max((s for _, s in out), default=1):
        out.add((total, total))
    return out


def _elements(model: ModelProto, sizes: dict[str, int]) -> int:
    """Elements of the graph's inputs at these symbolic sizes (an unknown dimension counts 2)."""
    total = 0
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        total += math.prod(d.dim_value if d.HasField("dim_value") else sizes.get(d.dim_param, 2) for d in dims)
    return total


# ops that compare: an input that reaches one of them beside a constant takes that constant in
# verification's edge runs (`compared_values`)
COMPARED = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}
# ops whose output holds their input 0's values (moved, cast): `compared_values` follows them
COMPARED_THROUGH = {"Cast", "CastLike", "Identity", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Expand",
                    "Transpose"}
# ops whose output 0 holds some of their input 0's values (picked, gathered, |x| at x >= 0):
# `compared_values` follows them, so ReduceMax(x) > 10 puts elements of x at 10
COMPARED_PICKS = {"ReduceMax", "ReduceMin", "Abs", "Relu", "Gather", "GatherElements", "GatherND", "Slice",
                  "Tile", "Pad", "TopK", "Split", "Compress"}
# ops whose output holds values of any of their inputs (Where of its inputs 1 and 2)
COMPARED_ANY = {"Concat", "Max", "Min", "Where"}
COMPARED_MOST = 8  # values compared_values keeps for each input
COMPARED_DEPTH = 8  # ops compared_values follows from an input, at most


def compared_values(model: ModelProto, names: Iterable[str]) -> dict[str, list[float]]:
    """For each of `names` (main graph inputs), the values it takes where it equals a constant
    it is compared with: it reaches a comparison (COMPARED) whose other input is a constant of
    at most SHAPE_LIKE elements (an initializer, a Constant, what FOLDED ops compute from those,
    in the main graph or in the If, Loop or Scan body that compares), through ops that keep its
    values (COMPARED_THROUGH) or pick among them (COMPARED_PICKS, COMPARED_ANY: a ReduceMax,
    a Gather of its elements, a Concat with others), into a Loop's carried value, and through the addition or
    subtraction of a scalar constant (i + 1 == 5000 holds at i = 4999), an integer input's
    values a wrap apart too where a Cast narrows it (Cast(i, int8) == 5 at i = 261); or it is Mod's dividend
    with a constant divisor (Mod(i, 5000) == 0 holds at i = 5000). At most COMPARED_MOST values
    each, in the order found; names that reach none are left out. A rewrite of such a
    comparison (its constant moved by one) is wrong only at and beside those values, which no
    draw in [-9, 9] reaches."""
    graphs = all_graphs(model.graph)
    if not any(n.op_type in COMPARED or n.op_type == "Mod" for g in graphs for n in g.node):
        return {}
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    consts: dict[str, np.ndarray] = {}
    for g in graphs:
        for n in g.node:
            for k, name in enumerate(n.input):
                if name:
                    consumers.setdefault(name, []).append((n, k))
        consts |= _small_constants(g)
    out = {}
    ints = {i.name for i in model.graph.input if i.type.tensor_type.elem_type in _INTEGERS}
    for name in names:
        found = _compared_from(name, consumers, consts, name in ints)
        if found:
            out[name] = found
    return out


def counter_bounds(model: ModelProto) -> set[int]:
    """The trip numbers at which a Loop or Scan body's comparisons turn (`compared_values`'
    walk, from each body input of every Loop and Scan, nested ones too: a Loop's trip number
    and carried values, a Scan's state and elements), as whole numbers >= 0: a body that adds
    a value only once its counter passes 300 reads it only on a run of 302 trips."""
    out: set[int] = set()
    for g in all_graphs(model.graph):
        for n in g.node:
            if n.op_type not in ("Loop", "Scan") or n.domain not in ("", "ai.onnx"):
                continue
            for body in (a.g for a in n.attribute if a.name == "body"):
                consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
                consts: dict[str, np.ndarray] = {}
                for b in all_graphs(body):
                    for node in b.node:
                        for k, name in enumerate(node.input):
                            if name:
                                consumers.setdefault(name, []).append((node, k))
                    consts |= _small_constants(b)
                skip = {1} if n.op_type == "Loop" else set()  # a Loop body's condition
                for k, inp in enumerate(body.input):
                    if k not in skip:
                        out |= {math.ceil(v) for v in _compared_from(inp.name, consumers, consts) if v >= 0}
    return out


def _compared_from(name: str, consumers: dict, consts: dict[str, np.ndarray], integer: bool = False) -> list[float]:
    """`compared_values` of one input: a walk of (value, scale, shift, wrap) tuples, the value
    being scale * input + shift, cast on the way to an integer type that wraps around every
    `wrap` of the input (0: none; an `integer` input's alone: a float's cast out of range is
    undefined); a constant c it is compared with holds at input (c - shift) / scale, and a
    wrap apart from it (Cast(i, int8) == 5 at i = 261)."""
    found: list[float] = []
    queue, seen = [(name, 1.0, 0.0, 0.0, 0)], {name}
    while queue and len(found) < COMPARED_MOST:
        value, scale, shift, wrap, depth = queue.pop(0)
        for n, k in consumers.get(value, ()):
            if n.domain not in ("", "ai.onnx"):
                continue
            other = n.input[1 - k] if k < 2 and len(n.input) == 2 else ""
            scalar = float(consts[other].reshape(-1)[0]) if other in consts and consts[other].size == 1 else None
            nexts: list[tuple[str, float, float]] = []
            wraps = wrap
            if n.op_type in COMPARED and other in consts:
                at = [(float(v) - shift) / scale for v in consts[other].reshape(-1)]
                found += [x + w for x in at for w in ((0.0, wrap, -wrap) if wrap else (0.0,))]
            elif n.op_type == "Mod" and k == 0 and other in consts:
                found += [(float(abs(v)) - shift) / scale for v in consts[other].reshape(-1) if v]
            elif (n.op_type in COMPARED_THROUGH | COMPARED_PICKS and k == 0
                  or n.op_type in COMPARED_ANY and (k > 0 or n.op_type != "Where")):
                nexts = [(o, scale, shift) for o in (n.output if n.op_type == "Split" else n.output[:1])]
                wraps = _wrapped(n, scale, wrap) if integer else 0.0
            elif n.op_type == "Neg":
                nexts = [(n.output[0], -scale, -shift)]
            elif scalar is not None and (step := _affine(n.op_type, k, scalar, scale, shift)):
                nexts = [(n.output[0], *step)]
            elif n.op_type == "Loop" and k >= 2:  # a carried value: the body's input k
                body = next((a.g for a in n.attribute if a.name == "body"), None)
                nexts = [(body.input[k].name, scale, shift)] if body is not None and len(body.input) > k else []
            for o, a, b in nexts:
                if o and o not in seen and depth < COMPARED_DEPTH:
                    seen.add(o)
                    queue.append((o, a, b, wraps, depth + 1))
    return list(dict.fromkeys(v for v in found if math.isfinite(v)))[:COMPARED_MOST]


_INTEGERS = {TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32,
             TensorProto.UINT32, TensorProto.INT64, TensorProto.UINT64}
# the integer types a Cast wraps around in, by their bits
_WRAPS = {TensorProto.INT8: 8, TensorProto.UINT8: 8, TensorProto.INT16: 16, TensorProto.UINT16: 16,
          TensorProto.INT32: 32, TensorProto.UINT32: 32}


def _wrapped(n: onnx.NodeProto, scale: float, wrap: float) -> float:
    """`wrap` after `n`: a Cast to an integer type of b bits wraps every 2^b of its input, which
    is scale * the input; the narrowest wrap kept (0: none)."""
    to = next((a.i for a in n.attribute if a.name == "to"), None) if n.op_type == "Cast" else None
    if to not in _WRAPS or not scale:
        return wrap
    period = 2.0 ** _WRAPS[to] / abs(scale)
    return min(wrap, period) if wrap else period


def _affine(op: str, k: int, c: float, scale: float, shift: float) -> tuple[float, float] | None:
    """(scale, shift) of `op`'s output where its input k is scale * input + shift and its
    other input the scalar constant c: a sum, a difference either way round, a product, or a
    quotient by c (an integer quotient truncates: it equals c' at the input's value for
    c * c' and the next ones); None for another op or a zero factor."""
    if op == "Add":
        return scale, shift + c
    if op == "Sub":
        return (scale, shift - c) if k == 0 else (-scale, c - shift)
    if op == "Mul" and c:
        return scale * c, shift * c
    if op == "Div" and k == 0 and c:
        return scale / c, shift / c
    return None


def _small_constants(g: onnx.GraphProto) -> dict[str, np.ndarray]:
    """The numeric constants of `g` of at most SHAPE_LIKE elements (initializers, Constant nodes,
    of any integer or floating-point type) and its FOLDED integer ones (`constant_values`)."""
    out: dict[str, np.ndarray] = {}
    tensors = [(t.name, t) for t in g.initializer]
    tensors += [(n.output[0], a.t) for n in g.node if n.op_type == "Constant" and n.output
                for a in n.attribute if a.name == "value"]
    for name, t in tensors:
        if math.prod(t.dims) <= SHAPE_LIKE and not t.data_location:
            try:
                v = numpy_helper.to_array(t)
            except Exception:  # noqa: BLE001, S112 - a type numpy does not hold: not compared
                continue
            if v.dtype.kind in "iuf":
                out[name] = v
    return out | constant_values(onnx.helper.make_model(g))
