"""Random inputs for running a model: what verification feeds the original and the
optimized model.

Contract of `Feeds.draw(sizes, seed, wide)`:
- floating-point inputs: standard normal values; booleans: fair coin flips; strings: each
  element one of STRINGS at random (every element "a" made any two string inputs equal);
- with `wide`, integers are drawn by how the model uses them (`Feeds.roles`), so that an
  unsound integer rewrite shows while every input stays valid:
  - an index (Gather's, GatherElements', GatherND's, ScatterND's, OneHot's, an embedding's
    ids, possibly through Cast/Reshape/Unsqueeze/...) stays within its table: [-n, n) where
    its op counts from the end (SIGNED_INDEX), [0, n) for the others, n the indexed axis's
    size where it is known (GatherND's, ScatterND's: the smallest of the axes they index),
    else [0, 2);
  - a mask (a name holding "mask", or an attention op's mask input) is 0 or 1;
  - a size (it reaches a Reshape target, Slice bound, axes, repeats, pads, ... through
    integer arithmetic) is 0 or 1 as before, or its default where it has one;
  - a divisor (Div's or Mod's second input) is in [-9, 9] without 0;
  - a quantized code (DequantizeLinear's input, a QLinear op's quantized input, possibly
    through Reshape/Transpose/...) of 8 or 16 bits spans its type's whole range (a rewrite
    of quantized values that is wrong only beyond [-9, 9], such as a DequantizeLinear ->
    QuantizeLinear pair taken for the identity where its float product overflows, showed
    on none of them);
  - any other integer is in [-9, 9] (unsigned: [0, 9]);
- without `wide`, every integer is 0 or 1 (what a model that takes ids, sizes and masks
  alike always accepts);
- an overridable input (eqsat.core.initializers) gets its default value; `vary_overridable`
  (`other_overridable`) scales each floating-point default elementwise by a factor in
  [0.5, 1.5] with a sign drawn for each element (the caller may feed any values: with the
  signs kept, a rule file's Relu(w) -> w of a positive default passed), negates booleans, and
  reverses the order of each integer default's elements, or where that leaves it as it is,
  takes 1 off its ones above 1 (a rule file's Reshape(x, s) -> x of s = [2, 3] for x[2, 3]
  passed on the default alone), or where that too leaves it as it is (all 0 or 1), adds 1
  to each (an Expand(x, s) to s = [1, 1] taken for x passed); "floats" varies the
  floating-point ones alone.
`with_special_values` puts zeros or large magnitudes among the floats drawn (zeros among the
floating-point overridable inputs too: other values never give them 0);
`with_integer_extremes` puts each general integer's type minimum and maximum among it;
`with_large_sizes` makes every size 2 or 3 (a rewrite right for sizes 0 and 1 only, such as
an Expand taken for a no-op, passed every draw of 0 or 1 that gave 1), `with_larger_sizes`
4 to 9 (TopK(x, Min(k, 3)) taken for TopK(x, k) passed those), `with_negative_sizes`
puts a -1 among those (a Slice bound or axis from the end, a Reshape's inferred size);
`with_flags_negated` negates booleans and masks (each takes both values with the draw it negates);
`with_masks_widened` draws masks in [-2, 3] (a rule right for masks of 0 and 1 alone passed those);
`with_booleans_set` makes every boolean all true or all false (two conditions drew both true nowhere).
`with_compared` puts each general integer (overridable too), index (within its range) or float input
that reaches a comparison with a constant (constant_sizes.compared_values: through Cast, Reshape,
..., into If, Loop and Scan bodies) at that constant and one below it, or one above it, or (one of
one element) one below it (Equal(i, 5000) taken for Equal(i, 5001) passed every draw), or at
some of those constants and not the others (`compared_splits`: max(x) > 10 and min(x) < -10).
`describe()` says what was drawn, for the verification report.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass

import numpy as np
from onnx import ModelProto, TensorProto, numpy_helper

from eqsat.core import native
from eqsat.core.initializers import overridable_inputs
from eqsat.core.shapes import _skeleton, type_of
from eqsat.errors import EqsatError
from eqsat.io import external
from eqsat.lang.dtypes import np_dtype

GENERAL = (-9, 10)  # integers drawn in [-9, 9]
# what a string element is drawn from: where every element was "a", a rule file's Where(c, a, b) -> b
# on two string inputs passed (they were always equal); cases and a space for what normalizes or splits
STRINGS = ("a", "b", "ab", "Ba", "a b")
SCALED = 100  # Feeds.with_special_values(kind="scaled"): the floats drawn times this
# Feeds.with_special_values(kind="far"): the floats drawn times this, or the type's largest value / 64
# where that is less (float16: 1023, so that no draw overflows)
SCALED_FAR = 10000
# Feeds.with_special_values(kind="small"): the floats drawn times this (float16 and bfloat16: SMALL_HALF,
# so that they stay normal numbers)
SMALL = 1e-4
SMALL_HALF = 1e-2
LARGER_SIZES = (4, 10)  # Feeds.with_larger_sizes: sizes in [4, 9]
LARGER_SIZES_MAX = 4  # elements of a size input that Feeds.with_larger_sizes sets so
MASK_WIDE = (-2, 4)  # Feeds.with_masks_widened: masks in [-2, 3]
LARGE_SIZES_MAX = 8  # elements of a size input that Feeds.with_large_sizes sets to 2 or 3 (a shape of rank 8)

# (domain, op type) -> {input position: how the indexed axis is found}: "axis" reads the
# node's axis attribute on input 0, an int names that input's first axis, "nd" the smallest
# of the axes of input 0 that the indices' last dimension spans after batch_dims (GatherND's,
# ScatterND's)
INDEX_USES: dict[tuple[str, str], dict[int, object]] = {
    ("", "Gather"): {1: "axis"},
    ("", "GatherElements"): {1: "axis"},
    ("", "GatherND"): {1: "nd"},
    ("", "ScatterElements"): {1: "axis"},
    ("", "Scatter"): {1: "axis"},
    ("", "ScatterND"): {1: "nd"},
    ("", "OneHot"): {0: "depth"},
    ("com.microsoft", "EmbedLayerNormalization"): {0: 2, 1: 3},
    ("com.microsoft", "GatherBlockQuantized"): {1: "axis"},
}
# the ops above whose indices may be negative (counted from the end): their indices are drawn in [-n, n)
SIGNED_INDEX = {("", "Gather"), ("", "GatherElements"), ("", "ScatterElements"), ("", "Scatter"), ("", "OneHot"),
                ("", "GatherND"), ("", "ScatterND")}
MASK_USES: dict[tuple[str, str], set[int]] = {
    ("com.microsoft", "Attention"): {3},
    ("com.microsoft", "MultiHeadAttention"): {4},
    ("com.microsoft", "EmbedLayerNormalization"): {7},
    ("", "Attention"): {3},
}
SIZE_USES: dict[str, set[int]] = {
    "Reshape": {1}, "Expand": {1}, "Tile": {1}, "ConstantOfShape": {0}, "Slice": {1, 2, 3, 4},
    "Pad": {1, 3}, "Squeeze": {1}, "Unsqueeze": {1}, "Split": {1}, "TopK": {1}, "Range": {0, 1, 2},
    "Resize": {2, 3}, "Upsample": {1}, "OneHot": {1}, "CumSum": {1}, "Trilu": {1}, "CenterCropPad": {1},
    "NonMaxSuppression": {2}, "ReduceSum": {1}, "ReduceMean": {1}, "ReduceMax": {1}, "ReduceMin": {1},
    "ReduceProd": {1}, "ReduceSumSquare": {1}, "ReduceL1": {1}, "ReduceL2": {1}, "ReduceLogSum": {1},
    "ReduceLogSumExp": {1}, "SplitToSequence": {1}, "RoiAlign": {2}, "Compress": {1},
    "Loop": {0}, "Mod": set(),
}
DIVISOR_USES = {"Div": {1}, "Mod": {1}}
# (domain, op type) -> the input positions that read quantized codes (any value of the type is valid)
CODE_USES: dict[tuple[str, str], set[int]] = {
    ("", "DequantizeLinear"): {0},
    ("com.microsoft", "DequantizeLinear"): {0},
    ("", "QLinearConv"): {0, 3},
    ("", "QLinearMatMul"): {0, 3},
    ("", "ConvInteger"): {0, 1},
    ("", "MatMulInteger"): {0, 1},
    ("com.microsoft", "QLinearConv"): {0, 3},
    ("com.microsoft", "QLinearAdd"): {0, 3},
    ("com.microsoft", "QLinearMul"): {0, 3},
    ("com.microsoft", "QLinearSigmoid"): {0},
    ("com.microsoft", "QLinearLeakyRelu"): {0},
    ("com.microsoft", "QLinearGlobalAveragePool"): {0},
    ("com.microsoft", "QLinearAveragePool"): {0},
    ("com.microsoft", "QGemm"): {0, 3},
    # Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) for each input
    ("com.microsoft", "QLinearConcat"): set(range(2, 2 + 3 * 256, 3)),
}
# ops whose output keeps the integer type of input 0 (or all inputs): an index or size may
# pass through them; `through` lists the positions that carry the value
THROUGH = {"Cast": {0}, "Identity": {0}, "Reshape": {0}, "Unsqueeze": {0}, "Squeeze": {0}, "Flatten": {0},
           "Expand": {0}, "Transpose": {0}}
# ops whose output has their first input's shape (a table behind them is still that table)
SAME_SHAPE = {"DequantizeLinear", "QuantizeLinear", "Cast", "Identity"}
# ops whose inputs past the first are weights: an overridable input they read is not scaled
# by with_special_values (`Feeds._free_float`)
WEIGHTED_OPS = frozenset({
    "Conv", "ConvTranspose", "MatMul", "Gemm", "Einsum", "BatchNormalization", "InstanceNormalization",
    "LayerNormalization", "GroupNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
    "SkipSimplifiedLayerNormalization", "FusedConv", "FusedGemm", "FusedMatMul", "LSTM", "GRU", "RNN",
    "Attention", "MultiHeadAttention", "EmbedLayerNormalization", "Gather", "GatherElements", "GatherND",
    "MatMulNBits", "RotaryEmbedding", "DeformConv", "Resize", "Upsample", "RoiAlign", "GridSample"})
INTEGER_OPS = frozenset({"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul"})
INT_ARITH = {"Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Concat", "Gather", "Slice", "Max", "Min",
             "Sum", "Tile", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "CumSum", "Where"}
INT_CODES = {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
             TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}


@dataclass(frozen=True)
class Table:
    """What an index indexes: the value, its axis (a pair (first, end): the smallest of the axes
    first to end, end None for the last), and whether negative indices are allowed
    (SIGNED_INDEX); or, for OneHot, its depth where that is a constant (`size`)."""

    value: str | None  # None: not known (OneHot's depth is computed)
    axis: int | tuple[int, int | None] = 0
    signed: bool = False
    size: int | None = None


@dataclass(frozen=True)
class Role:
    kind: str  # general | index | mask | size | divisor | code
    tables: tuple[Table, ...] = ()  # for an index


class Feeds:
    def __init__(self, model: ModelProto) -> None:
        g = model.graph
        self.model = model
        self.free = overridable_inputs(model)
        self.defaults = {t.name: t for t in g.initializer if t.name in self.free}
        self.specs: dict[str, tuple[list[int | str | None], int]] = {}
        for vi in g.input:
            if vi.name in {t.name for t in g.initializer} and vi.name not in self.free:
                continue
            t = type_of(vi.type)
            if t is None or not t.elem:
                raise EqsatError(f"input '{vi.name}' is not a tensor of known element type")
            self.specs[vi.name] = (list(t.dims or ()), t.elem)
        self.consumers: dict[str, list[tuple[object, int]]] = {}
        for n in g.node:
            for k, name in enumerate(n.input):
                if name:
                    self.consumers.setdefault(name, []).append((n, k))
        self.shapes = self._known_shapes()
        self._inferred: dict[str, list[int | str | None]] | None = None  # `_shape`'s, made where first needed
        self.roles = {name: self._role(name) for name, (_, elem) in self.specs.items()
                      if elem in INT_CODES and name not in self.free}
        # the overridable integer inputs' roles: the general ones take other values in the
        # zeros' and the extremes' edge runs (`_general`)
        self.free_roles = {name: self._role(name) for name, (_, elem) in self.specs.items()
                           if elem in INT_CODES and name in self.free}
        # the inputs compared with constants (general integers and floats, not overridable), and
        # those constants' values (`with_compared`)
        self.compared = self._compared()
        # how `draw` (with `wide`) draws sizes: "" 0 or 1, "large" 2 or 3 (with_large_sizes),
        # "negative" those with a -1 (with_negative_sizes); set by verification where the
        # original runs on no other
        self.size_mode = ""

    # ---- how inputs are used
    def _known_shapes(self) -> dict[str, list[int | str | None]]:
        g = self.model.graph
        out: dict[str, list[int | str | None]] = {}
        for vi in [*g.input, *g.value_info, *g.output]:
            t = type_of(vi.type)
            if t is not None and t.dims is not None:
                out[vi.name] = list(t.dims)
        for t in g.initializer:
            out.setdefault(t.name, [int(d) for d in t.dims])
        for n in g.node:  # a table may be a Constant node's
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.output and n.attribute \
                    and n.attribute[0].name == "value":
                out.setdefault(n.output[0], [int(d) for d in n.attribute[0].t.dims])
        for n in g.node:  # and a table may be a dequantized (cast, copied) one: its input's shape
            if n.op_type in SAME_SHAPE and n.domain in ("", "ai.onnx") and n.input and n.input[0] in out \
                    and n.output and n.output[0]:
                out.setdefault(n.output[0], out[n.input[0]])
        return out

    def _role(self, name: str) -> Role:
        if self._reaches_size(name):
            return Role("size")
        index = self._index_use(name)
        if index is not None:
            return index
        if "mask" in name.lower() or self._mask_use(name):
            return Role("mask")
        if any(n.op_type in DIVISOR_USES and k in DIVISOR_USES[n.op_type] and n.domain in ("", "ai.onnx")
               for n, k in self._carried(name)):
            return Role("divisor")
        if np_dtype(self.specs[name][1]).itemsize <= 2 and any(
                k in CODE_USES.get(("" if n.domain == "ai.onnx" else n.domain, n.op_type), ())
                for n, k in self._carried(name)):
            return Role("code")
        return Role("general")

    def _carried(self, name: str, depth: int = 6) -> list[tuple[object, int]]:
        """The (node, input position) pairs that read `name`'s values, directly or through
        ops that only move them (THROUGH)."""
        out, queue, seen = [], deque([(name, 0)]), {name}
        while queue:
            value, d = queue.popleft()
            for n, k in self.consumers.get(value, ()):
                out.append((n, k))
                if d < depth and n.domain in ("", "ai.onnx") and k in THROUGH.get(n.op_type, ()):
                    for o in n.output:
                        if o and o not in seen:
                            seen.add(o)
                            queue.append((o, d + 1))
        return out

    def _reaches_size(self, name: str, depth: int = 8) -> bool:
        queue, seen = deque([(name, 0)]), {name}
        while queue:
            value, d = queue.popleft()
            for n, k in self.consumers.get(value, ()):
                if n.domain not in ("", "ai.onnx"):
                    continue
                if k in SIZE_USES.get(n.op_type, ()):
                    return True
                passes = k in THROUGH.get(n.op_type, ()) or n.op_type in INT_ARITH
                if passes and d < depth:
                    for o in n.output[:1]:
                        if o and o not in seen:
                            seen.add(o)
                            queue.append((o, d + 1))
        return False

    def _index_use(self, name: str) -> Role | None:
        tables: list[Table] = []
        for n, k in self._carried(name):
            uses = INDEX_USES.get(("" if n.domain == "ai.onnx" else n.domain, n.op_type))
            if not uses or k not in uses:
                continue
            how = uses[k]
            axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
            signed = ("" if n.domain == "ai.onnx" else n.domain, n.op_type) in SIGNED_INDEX
            if how == "axis":
                tables.append(Table(n.input[0], axis, signed))
            elif how == "depth":
                depth = self._constant(n.input[1]) if len(n.input) > 1 else None
                tables.append(Table(None, 0, signed, int(depth.reshape(-1)[0]) if depth is not None
                                    and depth.size == 1 and np.issubdtype(depth.dtype, np.number) else None))
            elif how == "nd":  # the indices' last dimension k spans axes batch_dims to batch_dims + k
                b = next((a.i for a in n.attribute if a.name == "batch_dims"), 0)
                k = (self.shapes.get(n.input[1]) or [None])[-1]
                tables.append(Table(n.input[0], (b, b + k if isinstance(k, int) and k > 0 else None), signed))
            elif isinstance(how, int) and len(n.input) > how and n.input[how]:
                tables.append(Table(n.input[how], 0))
            else:
                tables.append(Table(None))
        return Role("index", tuple(tables)) if tables else None

    def _constant(self, name: str) -> np.ndarray | None:
        """The value of an initializer or Constant node's output (None where `name` is neither, or
        an overridable input)."""
        if name in self.free:
            return None
        for t in self.model.graph.initializer:
            if t.name == name:
                return None if external.is_external(t) else numpy_helper.to_array(t)
        for n in self.model.graph.node:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and n.output and n.output[0] == name \
                    and n.attribute and n.attribute[0].name == "value":
                return numpy_helper.to_array(n.attribute[0].t)
        return None

    def _mask_use(self, name: str) -> bool:
        for n, k in self._carried(name):
            if k in MASK_USES.get(("" if n.domain == "ai.onnx" else n.domain, n.op_type), ()):
                return True
        return False

    # ---- drawing
    def _dims(self, dims: list[int | str | None], sizes: dict[str, int]) -> list[int]:
        return [d if isinstance(d, int) else sizes.get(d, 2) if isinstance(d, str) else 2 for d in dims]

    def _shape(self, name: str) -> list[int | str | None] | None:
        """The dimensions of a value: declared (`shapes`), else as onnx's shape inference gives
        them (a table computed in the graph, Concat(a, b), declares none: its indices were drawn
        in [0, 2), and a rewrite wrong only past the first two rows passed); None where neither
        says. Inferred dimensions that inference made up (unk__N) are unknown."""
        if name in self.shapes:
            return self.shapes[name]
        if self._inferred is None:
            self._inferred = {}
            try:
                g = native.infer_shapes(_skeleton(self.model), check_type=False, strict_mode=False,
                                        data_prop=True).graph
            except Exception:  # noqa: BLE001 - inference is best effort: such a table stays unknown
                g = None
            for vi in g.value_info if g is not None else ():
                t = type_of(vi.type)
                if t is not None and t.dims is not None:
                    self._inferred[vi.name] = [None if isinstance(d, str) and d.startswith("unk__") else d
                                               for d in t.dims]
        return self._inferred.get(name)

    def _index_range(self, role: Role, sizes: dict[str, int]) -> tuple[int, int] | None:
        """[lo, hi) for an index: within the smallest table it indexes; None where a table's
        size is not known."""
        ns = []
        for t in role.tables:
            if t.size is not None:
                ns.append(t.size)
                continue
            dims = self._shape(t.value) if t.value is not None else None
            if dims is None:
                return None
            dims = self._dims(dims, sizes)
            if isinstance(t.axis, tuple):
                spanned = dims[t.axis[0]:t.axis[1]]
                ns.append(min(spanned) if spanned else 0)
                continue
            axis = t.axis + len(dims) if t.axis < 0 else t.axis
            if not 0 <= axis < len(dims):
                return None
            ns.append(dims[axis])
        n = min(ns)
        if n <= 0:
            return None
        return (-n if all(t.signed for t in role.tables) else 0), n

    def draw(self, sizes: dict[str, int] | None = None, seed: int = 0, wide: bool = True,
             vary_overridable: bool | str = False) -> dict[str, np.ndarray]:
        sizes = sizes or {}
        shapes = {name: (self._dims(dims, sizes), np_dtype(elem)) for name, (dims, elem) in self.specs.items()
                  if name not in self.free}
        need = sum(int(np.prod(shape, dtype=object)) * (8 + dt.itemsize) for shape, dt in shapes.values())
        if need > _memory() // 2:
            at = f"at these sizes ({', '.join(f'{k}={v}' for k, v in sizes.items())})" if sizes else "of these shapes"
            raise EqsatError(f"making random inputs {at} takes {need / (1 << 30):,.1f} GiB, more than half of "
                             "this machine's memory" + (": give smaller --dim values to verify" if sizes else ""))
        rng = np.random.default_rng(seed)
        feeds: dict[str, np.ndarray] = {}
        for name in self.specs:
            if name in self.free:
                t = self.defaults[name]
                value = external.read(t) if external.is_external(t) else numpy_helper.to_array(t)
                if vary_overridable:
                    value = other_overridable(value, rng, vary_overridable != "floats")
                feeds[name] = value
                continue
            shape, dt = shapes[name]
            if dt == np.bool_:
                feeds[name] = np.asarray(rng.random(shape) < 0.5)
            elif np.issubdtype(dt, np.integer):
                feeds[name] = self._integers(name, shape, dt, rng, sizes, wide)
            elif np.issubdtype(dt, np.floating):
                feeds[name] = rng.standard_normal(shape).astype(dt)
            elif dt == np.object_:
                feeds[name] = np.array([STRINGS[i] for i in rng.integers(0, len(STRINGS), int(np.prod(shape)))],
                                       dtype=object).reshape(shape)
            else:
                feeds[name] = rng.standard_normal(shape).astype(dt)
        if wide and self.size_mode == "large":
            return self.with_large_sizes(feeds, seed)
        if wide and self.size_mode == "negative":
            return self.with_negative_sizes(feeds, seed)
        return feeds

    def _integers(self, name: str, shape: list[int], dt: np.dtype, rng, sizes: dict[str, int],
                  wide: bool) -> np.ndarray:
        role = self.roles.get(name, Role("general"))
        unsigned = np.issubdtype(dt, np.unsignedinteger)
        if not wide or role.kind in ("size", "mask"):
            return rng.integers(0, 2, size=shape).astype(dt)
        if role.kind == "index":
            lo, hi = self._index_range(role, sizes) or (0, 2)
            return rng.integers(0 if unsigned else lo, hi, size=shape).astype(dt)
        if role.kind == "code":
            info = np.iinfo(dt)
            return rng.integers(int(info.min), int(info.max) + 1, size=shape).astype(dt)
        lo = 0 if unsigned else GENERAL[0]
        out = rng.integers(lo, GENERAL[1], size=shape)
        if role.kind == "divisor":
            out[out == 0] = 1
        return out.astype(dt)

    def with_special_values(self, feeds: dict[str, np.ndarray], seed: int, kind: str) -> dict[str, np.ndarray]:
        """`feeds` with special values among the floating-point inputs (the overridable ones
        for "zeros", "scaled" and "far" where `_free_float` says so: the others keep those
        weights; zeros among general integers too), for rewrites that are wrong only on such
        values:
        - "zeros": a quarter of the elements 0; general integer inputs too (role "general"),
          with at least one 0 (a scalar one drawn in [-9, 9] was 0 one draw in 19: Where(n == 0,
          -x, x) taken for x passed), an overridable one drawn in [-9, 9] first (its other
          values keep its default's signs and never hold 0: a rule file's Abs(w) -> w passed);
          floating-point overridable inputs too, with at least one 0 (the caller may set a
          weight to 0: their other values are scaled defaults, never 0, and a rule file's
          (x / w) * w -> x passed), but a quantizing op's (`_free_float`);
        - "scaled": every element times SCALED (100): standard normal values stay within 5, so
          what a model computes only beyond (a Where or If on x > 10) never ran, and the
          "large" case compares values only as far as rounding moves them; rounding grows
          with the values summed, so the
          absolute tolerance is up to SCALED times the random draw's, as far as the random
          draw's own differences times SCALED allow (compare's `scaled` and `noise`);
          Overridable inputs too where no op reads them as a weight (`_free_float`: their
          other values are their defaults times [0.5, 1.5], and Min(w, 1) taken for w passed
          a default of 0.5);
        - "far": every element times SCALED_FAR (10000; float16: 1023), compared as "scaled":
          between the values times 100 and the large ones, a Clip(x, -1000, 1000) taken for
          x passed;
        - "small": every element times SMALL (1e-4; float16, bfloat16: 1e-2): an epsilon
          added to a variance (about 1 on the random draw) is within the tolerance there, so
          a LayerNormalization whose epsilon a rewrite dropped passed;
        - "halves": half of the elements whole or half numbers in [-4, 4]: no other draw gives
          a rounding's ties or an integer but 0 (a rule file's Floor(x + 0.5) -> Round(x), which
          rounds 2.5 to 2, passed them all);
        - "large": one element +LARGE and one -LARGE, LARGE the type's largest value to the
          power 0.4 (about 2e15 in float32: its square, and a sum of a thousand squares, stay
          finite; its product by 1e30 does not); none in float16 or bfloat16 (LARGE would be
          below 100);
        The large values go to random positions, one of each, so that they seldom cancel
        against each other. No inf or NaN: onnxruntime's own kernels disagree on NaN (its NCHW
        and channel-blocked MaxPool skip or keep a NaN in a window by position, giving other
        finite maxima), and an inf becomes NaN in the first product with weights of both signs,
        so no rewrite that changes a kernel could keep what they give (README: what the
        rewrites do not keep)."""
        rng = np.random.default_rng(seed)
        out = {}
        for name, v in feeds.items():
            if kind == "zeros" and self._general(name, v):
                v = v.copy()
                flat = v.reshape(-1)
                if name in self.free:  # its default's signs alone were drawn: any, as a general input's
                    flat[:] = rng.integers(0 if v.dtype.kind == "u" else GENERAL[0], GENERAL[1], flat.size)
                flat[rng.random(flat.size) < 0.25] = 0
                flat[rng.integers(flat.size)] = 0
                out[name] = v
                continue
            if not isinstance(v, np.ndarray) or v.dtype.kind != "f" or v.size == 0 or \
                    (name in self.free and not self._free_float(name, kind)):
                out[name] = v
                continue
            v = v.copy()
            flat = v.reshape(-1)
            picks: list[float] = []
            if kind == "zeros":
                flat[rng.random(flat.size) < 0.25] = 0
                if name in self.free:  # a weight the caller may set to 0: x / w * w taken for x
                    flat[rng.integers(flat.size)] = 0
            elif kind == "scaled":
                flat *= SCALED
            elif kind == "far":
                flat *= min(SCALED_FAR, float(np.finfo(v.dtype).max) / 64)
            elif kind == "small":
                flat *= SMALL if v.dtype.itemsize >= 4 else SMALL_HALF
            elif kind == "halves":
                chosen = rng.random(flat.size) < 0.5
                flat[chosen] = rng.integers(-8, 9, int(chosen.sum())) / 2
            elif kind == "large" and v.dtype.itemsize >= 4:
                big = float(np.finfo(v.dtype).max) ** 0.4
                picks = [big, -big]
            for pos, val in zip(rng.permutation(flat.size)[:len(picks)], picks, strict=False):
                flat[pos] = val
            out[name] = v
        return out

    def _free_float(self, name: str, kind: str) -> bool:
        """Whether the "zeros", "scaled" or "far" case of `with_special_values` changes the
        overridable floating-point input `name`: "zeros" unless a quantizing op reads it (a
        scale of 0 is no model's), "scaled" and "far" only where no contraction, normalization
        or quantizing op reads it (a weight, where times 100 layer after layer overflows), but
        an element-wise op does: Min(w, 1) taken for w passed every value of a default of 0.5."""
        if kind not in ("zeros", "scaled", "far"):
            return False
        for n, k in self._carried(name):
            op = n.op_type
            if "Quant" in op or op.startswith(("QLinear", "QGemm", "QAttention")) or op in INTEGER_OPS:
                return False
            if kind != "zeros" and k > 0 and op in WEIGHTED_OPS:
                return False
        return True

    def _general(self, name: str, v: object) -> bool:
        """Whether `v`, the input `name`, is a non-empty general integer (role "general",
        overridable or not)."""
        role = self.roles.get(name) or self.free_roles.get(name, Role(""))
        return role.kind == "general" and isinstance(v, np.ndarray) and v.dtype.kind in "iu" and v.size > 0

    def has_general_integers(self) -> bool:
        """Whether an integer input is of role "general" (`with_integer_extremes` may change something)."""
        return any(role.kind == "general" for role in [*self.roles.values(), *self.free_roles.values()])

    def with_integer_extremes(self, feeds: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
        """`feeds` with one element of each general integer input (role "general",
        overridable or not) at its type's minimum and one at its maximum, at random positions: a
        rewrite right only where integer arithmetic does not wrap (Relu(Abs(x)) taken for
        Abs(x): |-128| is -128 in int8) passed every draw in [-9, 9]. A value that reaches a
        Div's or Mod's dividend gets the minimum plus one: INT_MIN / -1 kills onnxruntime
        (SIGFPE), and the other edge cases would be lost to that crash of the original."""
        rng = np.random.default_rng(seed)
        out = dict(feeds)
        for name, role in [*self.roles.items(), *self.free_roles.items()]:
            v = feeds.get(name)
            if role.kind != "general" or not isinstance(v, np.ndarray) or v.dtype.kind not in "iu" or v.size == 0:
                continue
            info = np.iinfo(v.dtype)
            lo = int(info.min)
            if lo < 0 and any(n.op_type in DIVISOR_USES and k == 0 and n.domain in ("", "ai.onnx")
                              for n, k in self._carried(name)):
                lo += 1
            v = v.copy()
            flat = v.reshape(-1)
            for pos, val in zip(rng.permutation(flat.size)[:2], (lo, int(info.max)), strict=False):
                flat[pos] = val
            out[name] = v
        return out

    def _compared(self) -> dict[str, list[float]]:
        """constant_sizes.compared_values of the inputs that are general integers (overridable
        or not), indices, or floats that are not overridable."""
        from eqsat.verification.constant_sizes import compared_values

        names = [name for name, (_, elem) in self.specs.items()
                 if (self.roles.get(name) or self.free_roles.get(name, Role(""))).kind in ("general", "index")
                 or (elem in _FLOAT_CODES and name not in self.free)]
        return compared_values(self.model, names) if names else {}

    def has_compared(self) -> bool:
        """Whether an input is compared with constants (`with_compared` may change something)."""
        return bool(self.compared)

    def has_single_compared(self) -> bool:
        """Whether an input compared with constants may hold one element (its shape's product is
        1 or not known): `with_compared` with `step` -1 may give it a value the others do not."""
        return any(not all(isinstance(d, int) for d in self.specs[n][0]) or int(np.prod(self.specs[n][0])) <= 1
                   for n in self.compared)

    def compared_splits(self) -> list[tuple[tuple[tuple[str, int], ...], bool]]:
        """Splits of the constants inputs are compared with, for `with_compared`'s `only`: each
        (the (input, index among its values) pairs put at their constants, whether the others
        keep their draws). First over the inputs (`_split_groups`): those of a group at all their
        constants and the others one above, and the reverse (an If on i == 5000 and another on
        j == 7000 were taken together or not at all by the runs of steps 0 and 1); then over
        the pairs: those of a group at their constants and every other value of those inputs as
        drawn, and the reverse: ReduceMax(x) > 10 and ReduceMin(x) < -10 were true together on
        every run that put x at or beside both constants, and a run one above 10 is still above
        it. So every three inputs, and every three constants, are at their values each of the
        eight ways (SPLIT_THREE_WAYS of them at most; every two, beyond)."""
        pairs = [(name, k) for name, values in self.compared.items() for k in range(len(values))]
        splits: list[tuple[tuple[tuple[str, int], ...], bool]] = []
        for units, drawn in ((list(self.compared), False), (pairs, True)):
            for on in _split_groups(len(units)):
                for group in ([units[k] for k in on], [u for k, u in enumerate(units) if k not in on]):
                    splits.append((tuple(p for p in pairs if (p if drawn else p[0]) in group), drawn))
        return splits

    def split_label(self, split: tuple[tuple[tuple[str, int], ...], bool]) -> str:
        """How the verification report names a split of `compared_splits`."""
        on, drawn = split
        if not drawn:
            return "only for " + ", ".join(dict.fromkeys(name for name, _ in on))
        at = ", ".join(f"{name} at {self.compared[name][k]:g}" for name, k in on)
        return f"only for {at}, the others as drawn"

    def with_compared(self, feeds: dict[str, np.ndarray], step: int = 0,
                      sizes: dict[str, int] | None = None,
                      only: tuple[tuple[tuple[str, int], ...], bool] | None = None) -> dict[str, np.ndarray]:
        """`feeds` with each input compared with constants (`compared`: general integers,
        indices, and floats that are not overridable, which reach a comparison with a constant,
        such as a pad id, or an overridable integer's default's other values) at those
        constants' values: with `step` 0, element j at the (j // 3)-th value v (cycling) where
        j % 3 is 0, at v - 1 where it is 1, its draw where it is 2; with `step` 1 (-1), element j
        at the (j // 2)-th value v + 1 (v - 1) where j is even, its draw where it is odd (an input
        of one element takes v, v + 1 and v - 1 in three runs). A rewrite of Equal(i, 5000) to
        Equal(i, 5001), or of Greater(i, 300) to Greater(i, 299), is wrong at those values
        alone, and integers drawn in [-9, 9] and at their type's extremes reach none of them. A
        value beyond the type's range is clipped to it; an index keeps its draw where the value
        is outside its range at `sizes` (all of it where the range is not known). A float takes v + 0.25 away from 0
        instead of v: a comparison at v itself is a tie that a nudge flips
        (eqsat.verification.ties sets it aside), while a Cast to an integer still gives v
        (truncation toward 0), and where the type rounds v - 1 or v + 1 to v (float16 above 2048),
        the value next to v it holds (`_beside`). `only` (a split of `compared_splits`): its values as with `step`
        0, the other inputs as drawn or as with `step` 1, as the split says."""
        out = dict(feeds)
        for name, values in self.compared.items():
            v = feeds.get(name)
            if not isinstance(v, np.ndarray) or v.size == 0 or v.dtype.kind not in "iuf":
                continue
            step_here, values_here = step, values
            if only is not None:
                values_here = [values[k] for n, k in only[0] if n == name]
                step_here = 0 if values_here else 1
                if not values_here and only[1]:
                    continue
                values_here = values_here or values
            out[name] = self._at_compared(v, values_here, step_here, name, sizes)
        return out

    def _at_compared(self, v: np.ndarray, values: list[float], step: int, name: str,
                     sizes: dict[str, int] | None) -> np.ndarray:
        """`v` with its elements at `values` as `with_compared` puts them at `step`."""
        period = 3 if step == 0 else 2
        j = np.arange(v.size)
        base = np.asarray(values, np.float64)[(j // period) % len(values)]
        at = base + (step or -(j % period))
        if v.dtype.kind == "f":
            at = _beside(at + np.where(at >= 0, 0.25, -0.25), base, at - base, v.dtype)
        flat = np.where(j % period < 2 - (step != 0), at, v.astype(np.float64).reshape(-1))
        if v.dtype.kind in "iu":
            info = np.iinfo(v.dtype)
            flat = np.clip(np.trunc(flat), int(info.min), int(info.max))
        role = self.roles.get(name, Role(""))
        if role.kind == "index":
            lo, hi = self._index_range(role, sizes or {}) or (0, 0)
            flat = np.where((flat >= lo) & (flat < hi), flat, v.reshape(-1))
        return np.asarray(flat.reshape(v.shape).astype(v.dtype))

    def has_sizes(self) -> bool:
        """Whether an integer input is a size (`with_large_sizes` may change something)."""
        return any(role.kind == "size" for role in self.roles.values())

    def with_larger_sizes(self, feeds: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
        """`with_large_sizes` with sizes in [4, 9]: a rewrite right for sizes up to 3 alone
        (TopK(x, Min(k, 3)) taken for TopK(x, k)) passed every draw of 0 to 3. Sizes the
        original does not run with (a k beyond its axis, a Reshape target that does not fit)
        are the caller's to leave out. An input of more than LARGER_SIZES_MAX elements keeps
        its draw (9 at each of 8 axes is 43 million elements)."""
        return self.with_large_sizes(feeds, seed, LARGER_SIZES, LARGER_SIZES_MAX)

    def with_large_sizes(self, feeds: dict[str, np.ndarray], seed: int,
                         span: tuple[int, int] = (2, 4), most: int = LARGE_SIZES_MAX) -> dict[str, np.ndarray]:
        """`feeds` with every size input (role "size", not overridable) drawn from {2, 3}
        instead of {0, 1}: an Expand, Tile, Slice or Reshape that a rule took for a no-op by a
        shape it assumed computes as much as the original only for sizes it can hold. Sizes
        the original does not run with (a Reshape target that does not fit, an axis beyond the
        rank) are the caller's to leave out. An input of more than LARGE_SIZES_MAX elements
        keeps its draw: as a ConstantOfShape's or Expand's shape, 2 or 3 at each of 64 axes
        would ask for 2^64 elements."""
        rng = np.random.default_rng(seed)
        out = dict(feeds)
        for name, role in self.roles.items():
            v = feeds.get(name)
            if role.kind == "size" and isinstance(v, np.ndarray) and v.size <= most:
                out[name] = rng.integers(*span, size=v.shape).astype(v.dtype)
        return out

    def with_sizes_beyond(self, feeds: dict[str, np.ndarray], seed: int, value: int) -> dict[str, np.ndarray]:
        """`with_larger_sizes` with each size input of one element at `value`, past the model's
        constants (the caller's): sizes of 0 to 9 passed a Slice to 10 of ConstantOfShape(s)
        taken for ConstantOfShape(s). Inputs of more elements keep their draw (a shape, or a
        Tile's repeats, of several such values would ask for their product)."""
        out = self.with_larger_sizes(feeds, seed)
        for name, role in self.roles.items():
            v = out.get(name)
            if role.kind == "size" and isinstance(v, np.ndarray) and v.size == 1:
                out[name] = np.full(v.shape, value, v.dtype)
        return out

    def with_negative_sizes(self, feeds: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
        """`with_large_sizes` with one element of each size input at -1: a Slice bound, an axis
        and a Reshape target may count from the end or infer a size, which sizes of 0 to 3 never
        do (Slice(x, |s|, e) taken for Slice(x, s, e) passed them all)."""
        rng = np.random.default_rng(seed)
        out = self.with_large_sizes(feeds, seed)
        for name, role in self.roles.items():
            v = out.get(name)
            if role.kind == "size" and isinstance(v, np.ndarray) and v.size and v.size <= LARGE_SIZES_MAX \
                    and v.dtype.kind == "i":
                v = v.copy()
                v.reshape(-1)[rng.integers(v.size)] = -1
                out[name] = v
        return out

    def has_masks(self) -> bool:
        """Whether an integer input is a mask (`with_masks_widened` may change something)."""
        return any(role.kind == "mask" for role in self.roles.values())

    def with_masks_widened(self, feeds: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
        """`feeds` with every mask input (role "mask", not overridable) drawn in MASK_WIDE (unsigned:
        from 0) instead of {0, 1}, with one element at 2 and, where signed, one at -1: a user rule
        right for masks of 0 and 1 alone (Min(mask, 1) taken for the mask) passed every draw and
        its negation, while the original runs on any integer there. The caller leaves the case
        out where the original refuses it (an op that reads the mask as lengths)."""
        rng = np.random.default_rng(seed)
        out = dict(feeds)
        for name, role in self.roles.items():
            v = feeds.get(name)
            if role.kind != "mask" or not isinstance(v, np.ndarray) or v.size == 0 or v.dtype.kind not in "iu":
                continue
            signed = v.dtype.kind == "i"
            w = rng.integers(MASK_WIDE[0] if signed else 0, MASK_WIDE[1], size=v.shape)
            flat = w.reshape(-1)
            for pos, val in zip(rng.permutation(flat.size)[:2], (2, -1) if signed else (2,), strict=False):
                flat[pos] = val
            out[name] = w.astype(v.dtype)
        return out

    def has_flags(self) -> bool:
        """Whether an input is a boolean or a mask (`with_flags_negated` may change something)."""
        return any(np.dtype(np_dtype(elem)) == np.bool_ for name, (_, elem) in self.specs.items()
                   if name not in self.free) or any(role.kind == "mask" for role in self.roles.values())

    def with_flags_negated(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`feeds` with every boolean input (not overridable) negated and every mask m (0 or 1)
        made 1 - m: with the draw it was made from, each element takes both values, where the
        random draws of a scalar condition gave False at every seed verification ran (Where(c,
        a, b) taken for b passed)."""
        out = dict(feeds)
        for name, v in feeds.items():
            if name in self.free or not isinstance(v, np.ndarray):
                continue
            if v.dtype == np.bool_:
                out[name] = np.asarray(~v)
            elif self.roles.get(name, Role("general")).kind == "mask":
                out[name] = np.asarray(1 - v).astype(v.dtype)
        return out

    def _booleans(self) -> list[str]:
        """The boolean inputs that are not overridable."""
        return [name for name, (_, elem) in self.specs.items()
                if name not in self.free and np.dtype(np_dtype(elem)) == np.bool_]

    def has_several_flags(self) -> bool:
        """Whether the boolean inputs hold more than one element together, or one of unknown
        size (`with_booleans_set` may give them a combination no draw and its negation gave)."""
        return sum(int(np.prod([d if isinstance(d, int) else 2 for d in self.specs[n][0]], dtype=object))
                   for n in self._booleans()) > 1

    def with_booleans_set(self, feeds: dict[str, np.ndarray], value: bool) -> dict[str, np.ndarray]:
        """`feeds` with every element of every boolean input (not overridable) `value`: two
        scalar conditions drew (False, True), its negation (True, False) and (False, False),
        never both true, so Where(And(a, b), p, q) taken for q passed every run."""
        out = dict(feeds)
        for name in self._booleans():
            v = feeds.get(name)
            if isinstance(v, np.ndarray):
                out[name] = np.full(v.shape, value, np.bool_)
        return out

    def describe(self, sizes: dict[str, int] | None = None, wide: bool = True,
                 vary_overridable: bool = False) -> str:
        """What `draw` feeds the integer and overridable inputs, as one clause."""
        parts = []
        for name, role in self.roles.items():
            if not wide:
                parts.append(f"{name} 0 or 1")
                continue
            if role.kind == "index":
                lo, hi = self._index_range(role, sizes or {}) or (0, 2)
                parts.append(f"{name} an index in [{lo}, {hi})")
            elif role.kind == "code":
                info = np.iinfo(np_dtype(self.specs[name][1]))
                parts.append(f"{name} quantized codes in [{info.min}, {info.max}]")
            else:
                parts.append(f"{name} " + {"general": "in [-9, 9]", "mask": "a mask, 0 or 1",
                                           "size": {"": "a size, 0 or 1", "large": "a size, 2 or 3",
                                                    "negative": "a size, 2 or 3 with a -1"}[self.size_mode],
                                           "divisor": "in [-9, 9] but 0"}[role.kind])
        for name in self.free:
            if name in self.specs:
                floating = self.defaults[name].data_type in _FLOAT_CODES
                other = ""
                if floating and vary_overridable:
                    other = " and scaled by [0.5, 1.5] with signs drawn"
                elif vary_overridable and vary_overridable != "floats":
                    other = " and another" if self.defaults[name].data_type not in _OTHER_CODES \
                        else " and negated" if self.defaults[name].data_type == TensorProto.BOOL \
                        else " and reordered or less by 1 (more by 1 where all are 0 or 1)"
                parts.append(f"{name} its default{other}")
        return "; ".join(parts)

    def floating_overridable(self) -> bool:
        return any(self.defaults[n].data_type in _FLOAT_CODES for n in self.free if n in self.specs)

    def varied_overridable(self) -> bool:
        """Whether `draw`'s `vary_overridable` changes some input: an overridable one of a
        floating-point, integer or boolean type."""
        return any(self.defaults[n].data_type in _FLOAT_CODES | _OTHER_CODES for n in self.free if n in self.specs)


def other_overridable(value: np.ndarray, rng: np.random.Generator, integers: bool = True) -> np.ndarray:
    """Another value for an overridable input than its default `value` (`Feeds.draw`'s
    `vary_overridable`): floats scaled elementwise by [0.5, 1.5] with a sign drawn for each,
    and with `integers`, booleans negated and integers reversed in order (the same elements, so
    a Reshape target still fits), or where that changes nothing, less by 1 where above 1
    (never 0: onnxruntime refuses an integer division by 0, and the run would be lost), or
    where that changes nothing either (all 0 or 1), more by 1 where 0 or 1."""
    if np.issubdtype(value.dtype, np.floating):
        factor = rng.uniform(0.5, 1.5, value.shape) * rng.choice([-1.0, 1.0], value.shape)
        # (np.asarray: a 0-d product is a numpy scalar, which onnxruntime does not take)
        return np.asarray(value * factor).astype(value.dtype)
    if not integers or value.size == 0:
        return value
    if value.dtype == np.bool_:
        return np.logical_not(value)
    if np.issubdtype(value.dtype, np.integer):
        other = value.reshape(-1)[::-1].reshape(value.shape)
        if np.array_equal(other, value):
            other = np.where(value > 1, value - 1, value).astype(value.dtype)
        if np.array_equal(other, value):  # 0s and 1s alone: an Expand to [1, 1] taken for x passed
            other = np.where((value == 0) | (value == 1), value + 1, value).astype(value.dtype)
        return np.asarray(other)
    return value


SPLIT_THREE_WAYS = 8  # `compared_splits` puts every three of this many each way (2 * 7 runs)


def _split_groups(n: int) -> list[set[int]]:
    """Groups of range(n) that, with their complements, give every three of them each of the
    eight ways (where n <= SPLIT_THREE_WAYS, besides all and none, which the runs of steps 0 and
    1 give; else every two each of the four): for each nonzero mask of ceil(log2 n) bits, the
    indices whose bits under it hold an odd count. The affine functions <mask, k> + c of three
    distinct k reach every value (for pairs, the masks of one bit suffice: 2 * ceil(log2 n)
    runs). Three Ifs on i == 5000, j == 7000 and k == 9000 were never true, false, false
    with one group of each bit."""
    bits = max(0, n - 1).bit_length()
    masks = range(1, 1 << bits) if n <= SPLIT_THREE_WAYS else [1 << b for b in range(bits)]
    return [{k for k in range(n) if bin(k & mask).count("1") % 2} for mask in masks]


def _beside(at: np.ndarray, base: np.ndarray, offset: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """`at` (a constant `base` moved by `offset` and a quarter), where `dtype` rounds it to `base`
    though `offset` is not 0, the neighbour of `base` in `dtype` on `offset`'s side: above 2048,
    float16's values lie 2 apart, 2999.25 rounded to 3000, and Less(x, 3000) taken for
    Less(x, 2998) passed every run."""
    try:
        b = base.astype(dtype)
        rounded = at.astype(dtype)
        side = np.where(offset > 0, np.inf, -np.inf).astype(dtype)
        return np.where((rounded == b) & (offset != 0), np.nextafter(b, side), at).astype(np.float64)
    except (TypeError, ValueError):  # a type numpy has no nextafter for: as it is
        return at


_FLOAT_CODES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}
_OTHER_CODES = {TensorProto.BOOL, TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
                TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}


def _memory() -> int:
    """Bytes of physical memory (a large number where the system does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 50
