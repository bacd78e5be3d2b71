"""Symbolic values of shape tensors: what the small integer tensors of shape arithmetic
hold, where an entry may be a symbolic dimension.

`Shape(x)` holds x's shape, whose dimensions are numbers or symbols (eqsat.core.shapes); Gather,
Concat, Slice, Reshape, Flatten, Unsqueeze, Squeeze, Identity, Cast and Add/Sub/Mul/Div carry
such values along. Two uses:
- a value whose entries are all numbers is a constant: the fold oracle makes it a literal
  (this is how Shape -> Gather -> Concat chains fold when shapes are static);
- the shape of a Pad whose amounts are known by now is its input's plus them, where shape
  inference left it symbolic (SymValues.value_shape);
- a Reshape target whose entries are known up to its input's own dimensions becomes a
  literal with 0 ("copy this dimension") and at most one -1 (only beside sizes >= 1:
  `reshape_target`), so the shape arithmetic feeding it is no longer needed even when the
  shapes are symbolic.

Contract: a value is a `SymTensor` (dtype int64 or int32, a static shape, entries), and each
modelled op follows ONNX exactly: ranks, negative axes and indices, Slice's clamping and
steps, Reshape's 0 and -1, numpy broadcasting, and integer arithmetic that wraps around in
the value's dtype with Div truncating toward zero. An entry is a number, a `Sym` (a
symbolic dimension, never negative) or None (unknown). Anything it does not model, or an
input the op would reject at run time (an index out of range, a division by zero,
INT64_MIN / -1), gives None for the whole value: the oracle declines, it never guesses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from eqsat.core.shapes import is_symbol
from eqsat.oracle.view import View

MAX_ELEMENTS = 4096  # larger values are not shape arithmetic: declined
DTYPES = {"I64": (np.int64, 64), "I32": (np.int32, 32)}


@dataclass(frozen=True)
class Sym:
    """A symbolic dimension, by its id in the e-graph (eqsat.core.shapes.DimTable)."""

    id: int


Entry = int | Sym | None


@dataclass
class SymTensor:
    dtype: str  # "I64" or "I32"
    values: np.ndarray  # dtype object, of the tensor's shape: int, Sym or None entries

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(DTYPES[self.dtype][0])

    def entries(self) -> list[Entry]:
        return list(self.values.reshape(-1))

    def concrete(self) -> bool:
        return all(isinstance(e, int) for e in self.entries())

    def array(self) -> np.ndarray:
        """The value as a numpy array (only when `concrete`)."""
        return np.array(self.entries(), dtype=self.np_dtype).reshape(self.shape)


def _tensor(dtype: str, entries: list[Entry], shape: tuple[int, ...]) -> SymTensor | None:
    if dtype not in DTYPES or int(np.prod(shape, dtype=np.int64)) != len(entries) or len(entries) > MAX_ELEMENTS:
        return None
    arr = np.empty(len(entries), dtype=object)
    arr[:] = entries
    return SymTensor(dtype, arr.reshape(shape))


def wrap(value: int, dtype: str) -> int:
    """`value` wrapped around into the dtype's range, as integer arithmetic in C does."""
    bits = DTYPES[dtype][1]
    half = 1 << (bits - 1)
    return (value + half) % (1 << bits) - half


class SymValues:
    def __init__(self, view: View) -> None:
        self.v = view
        self.memo: dict[str, SymTensor | None] = {}

    def tensor(self, eclass: str) -> SymTensor | None:
        """The e-class's value, or None where it is not known to be modelled shape arithmetic."""
        if eclass in self.memo:
            return self.memo[eclass]
        self.memo[eclass] = None  # cycles read as unknown
        out = None
        want = self.v.dtype(eclass)
        for node in self.v.nodes_of(eclass):
            try:
                out = self._node(node)
            except (ValueError, IndexError, TypeError, OverflowError):
                out = None
            if out is not None and want is not None and out.dtype != want:
                out = None  # the op's result type contradicts the e-class's: not ours to say
            if out is not None:
                break
        self.memo[eclass] = out
        return out

    def of(self, eclass: str) -> list[Entry] | None:
        """The entries of a 1-D int64 value (a Reshape target), else None."""
        t = self.tensor(eclass)
        return t.entries() if t is not None and t.dtype == "I64" and len(t.shape) == 1 else None

    # ---- reading the e-graph
    def _ints(self, eclass: str) -> list[int] | None:
        """A concrete 1-D value's entries (axes, starts, a Reshape target); else None."""
        t = self.tensor(eclass)
        if t is None or len(t.shape) != 1 or not t.concrete():
            return None
        return [int(e) for e in t.entries()]

    def _absent(self, eclass: str) -> bool:
        return self.v.nodes_of(eclass)[0].op == "Absent"

    def _dtype_of(self, eclass: str) -> str | None:
        nodes = self.v.nodes_of(eclass)
        return nodes[0].op if nodes else None

    def _node(self, n) -> SymTensor | None:
        v, op, k = self.v, n.op, n.children
        if op == "Ints":
            vals = v.ivec(k[0])
            return _tensor("I64", vals, (len(vals),))
        if op == "ScalarI":
            dt, dims = self._dtype_of(k[1]), tuple(v.ivec(k[2]))
            value = v.lit(k[0])
            if dt not in DTYPES or wrap(value, dt) != value:
                return None
            return _tensor(dt, [value], dims)
        if op == "Shape":
            return self._shape(k)
        if op == "Identity":
            return self.tensor(k[0])
        if op in ("Unsqueeze", "Squeeze"):
            return self._squeeze(op, k)
        if op == "Flatten":
            return self._flatten(k)
        if op == "Cast":
            return self._cast(k)
        if op == "Reshape":
            return self._reshape(k)
        if op == "Gather":
            return self._gather(k)
        if op == "Concat":
            return self._concat(k)
        if op == "Slice":
            return self._slice(k)
        if op in ("Add", "Sub", "Mul", "Div"):
            return self._arith(op, k)
        return None

    # ---- ops
    def value_shape(self, eclass: str, depth: int = 0) -> list[int] | None:
        """The e-class's shape (eqsat.core.shapes: symbolic dims negative), with a symbolic dim
        made a number where a Pad in the class fixes it: the Pad's input dim (a number) plus
        pads known by now (shape inference leaves them symbolic when the amounts are
        computed: Swin's `(window - H % window) % window`). A number is never changed."""
        sx = self.v.shape(eclass)
        if sx is None or not any(is_symbol(d) for d in sx) or depth > 8:
            return sx
        for node in self.v.nodes_of(eclass):
            if node.op != "Pad" or len(node.children) < 4:
                continue
            x, pads, _value, axes = node.children[:4]
            inner = self.value_shape(x, depth + 1)
            amounts = self._ints(pads)
            which = list(range(len(inner))) if inner is not None and self._absent(axes) else self._ints(axes)
            out = padded(inner, amounts, which) if inner is not None and len(inner) == len(sx) else None
            if out is not None:
                return [o if is_symbol(d) and not is_symbol(o) else d for d, o in zip(sx, out, strict=True)]
        return sx

    def _shape(self, k) -> SymTensor | None:
        sx = self.value_shape(k[0])
        if sx is None:
            return None
        r = len(sx)
        end_node = self.v.nodes_of(k[1])[0]
        end = r if end_node.op == "NoInt" else self.v.lit(end_node.children[0])
        start = self.v.lit(k[2])
        start, end = (min(max(i + r if i < 0 else i, 0), r) for i in (start, end))
        dims = [Sym(d) if is_symbol(d) else d for d in sx[start:end]]
        return _tensor("I64", dims, (len(dims),))

    def _squeeze(self, op: str, k) -> SymTensor | None:
        data = self.tensor(k[0])
        if data is None:
            return None
        shape = list(data.shape)
        if op == "Squeeze" and self._absent(k[1]):
            new = [d for d in shape if d != 1]
        else:
            axes = self._ints(k[1])
            if axes is None:
                return None
            r = len(shape) + (len(axes) if op == "Unsqueeze" else 0)
            norm = [a + r if a < 0 else a for a in axes]
            if any(not 0 <= a < r for a in norm) or len(set(norm)) != len(norm):
                return None
            if op == "Unsqueeze":
                it = iter(shape)
                new = [1 if i in norm else next(it) for i in range(r)]
            else:
                if any(shape[a] != 1 for a in norm):
                    return None
                new = [d for i, d in enumerate(shape) if i not in norm]
        return SymTensor(data.dtype, data.values.reshape(new))

    def _flatten(self, k) -> SymTensor | None:
        data, axis = self.tensor(k[0]), self.v.lit(k[1])
        if data is None:
            return None
        r = len(data.shape)
        axis = axis + r if axis < 0 else axis
        if not 0 <= axis <= r:
            return None
        outer = int(np.prod(data.shape[:axis], dtype=np.int64))
        inner = int(np.prod(data.shape[axis:], dtype=np.int64))
        return SymTensor(data.dtype, data.values.reshape(outer, inner))

    def _cast(self, k) -> SymTensor | None:
        data, to = self.tensor(k[0]), self._dtype_of(k[3])
        if data is None or to not in DTYPES:
            return None
        if to == data.dtype:
            return data
        # a symbolic dimension is any size: in int32 it may wrap, so it becomes unknown
        out = [wrap(e, to) if isinstance(e, int) else None for e in data.entries()]
        return _tensor(to, out, data.shape)

    def _reshape(self, k) -> SymTensor | None:
        data, target, allowzero = self.tensor(k[0]), self._ints(k[1]), self.v.lit(k[2])
        if data is None or target is None:
            return None
        shape = list(data.shape)
        out = []
        for i, t in enumerate(target):
            if t == 0 and not allowzero:
                if i >= len(shape):
                    return None
                out.append(shape[i])
            elif t < -1:
                return None
            else:
                out.append(t)
        if out.count(-1) > 1:
            return None
        size = int(np.prod(shape, dtype=np.int64))
        if -1 in out:
            rest = int(np.prod([d for d in out if d != -1], dtype=np.int64))
            if rest == 0 or size % rest:
                return None
            out[out.index(-1)] = size // rest
        if int(np.prod(out, dtype=np.int64)) != size:
            return None
        return SymTensor(data.dtype, data.values.reshape(out))

    def _gather(self, k) -> SymTensor | None:
        data, itensor, axis = self.tensor(k[0]), self.tensor(k[1]), self.v.lit(k[2])
        if data is None or itensor is None or not itensor.concrete() or not data.shape:
            return None
        r = len(data.shape)
        axis = axis + r if axis < 0 else axis
        if not 0 <= axis < r:
            return None
        n = data.shape[axis]
        idx = itensor.array().astype(np.int64)
        if ((idx < -n) | (idx >= n)).any():
            return None  # onnxruntime rejects it
        idx = np.where(idx < 0, idx + n, idx)
        shape = data.shape[:axis] + idx.shape + data.shape[axis + 1:]
        out = np.empty(shape, dtype=object)
        out[...] = np.take(data.values, idx, axis=axis)  # a 0-d take is the entry itself
        return SymTensor(data.dtype, out)

    def _concat(self, k) -> SymTensor | None:
        parts = [self.tensor(item) for item in self.v.oplist(k[0])]
        if not parts or any(p is None for p in parts):
            return None
        r = len(parts[0].shape)
        axis = self.v.lit(k[1])
        axis = axis + r if axis < 0 else axis
        if r == 0 or not 0 <= axis < r or any(p.dtype != parts[0].dtype for p in parts):
            return None
        for p in parts:
            if len(p.shape) != r or any(a != b for i, (a, b) in enumerate(zip(p.shape, parts[0].shape, strict=True))
                                        if i != axis):
                return None
        return SymTensor(parts[0].dtype, np.concatenate([p.values for p in parts], axis=axis))

    def _slice(self, k) -> SymTensor | None:
        data, starts, ends = self.tensor(k[0]), self._ints(k[1]), self._ints(k[2])
        if data is None or starts is None or ends is None or len(starts) != len(ends):
            return None
        r = len(data.shape)
        axes = list(range(len(starts))) if self._absent(k[3]) else self._ints(k[3])
        steps = [1] * len(starts) if self._absent(k[4]) else self._ints(k[4])
        if axes is None or steps is None or len(axes) != len(starts) or len(steps) != len(starts):
            return None
        axes = [a + r if a < 0 else a for a in axes]
        if any(not 0 <= a < r for a in axes) or len(set(axes)) != len(axes) or 0 in steps:
            return None
        out = data.values
        for a, s, e, step in zip(axes, starts, ends, steps, strict=True):
            n = data.shape[a]
            s, e = (x + n if x < 0 else x for x in (s, e))
            if step > 0:
                s, e = min(max(s, 0), n), min(max(e, 0), n)
            else:
                s, e = min(max(s, 0), n - 1), min(max(e, -1), n - 1)
            out = np.take(out, np.arange(s, e, step, dtype=np.int64), axis=a)
        return SymTensor(data.dtype, np.asarray(out, dtype=object).reshape(out.shape))

    def _arith(self, op: str, k) -> SymTensor | None:
        a, b = self.tensor(k[0]), self.tensor(k[1])
        if a is None or b is None or a.dtype != b.dtype:
            return None
        shape = np.broadcast_shapes(a.shape, b.shape)
        if int(np.prod(shape, dtype=np.int64)) > MAX_ELEMENTS:
            return None
        xs, ys = np.broadcast_to(a.values, shape).reshape(-1), np.broadcast_to(b.values, shape).reshape(-1)
        out = []
        for x, y in zip(xs, ys, strict=True):
            e = _arith(op, x, y, a.dtype)
            if e is _REJECTED:
                return None  # the runtime fails or crashes here: nothing to fold
            out.append(e)
        return _tensor(a.dtype, out, tuple(shape))


_REJECTED = object()


def _arith(op: str, x: Entry, y: Entry, dtype: str) -> Entry | object:
    """One entry of x op y in `dtype`; None if unknown, _REJECTED where the runtime rejects it."""
    if isinstance(x, int) and isinstance(y, int):
        if op == "Add":
            return wrap(x + y, dtype)
        if op == "Sub":
            return wrap(x - y, dtype)
        if op == "Mul":
            return wrap(x * y, dtype)
        if y == 0 or (y == -1 and x == -(1 << (DTYPES[dtype][1] - 1))):
            return _REJECTED  # division by zero; INT_MIN / -1 overflows (SIGFPE in onnxruntime)
        q = abs(x) // abs(y)  # ONNX integer Div truncates toward zero
        return q if (x >= 0) == (y >= 0) else -q
    if x is None or y is None:
        return None
    # a symbolic dimension with an identity element
    if op in ("Mul", "Div") and y == 1:
        return x
    if op == "Mul" and x == 1:
        return y
    if op in ("Add", "Sub") and y == 0:
        return x
    if op == "Add" and x == 0:
        return y
    return None


def reshape_target(target: list[Entry], input_shape: list[int] | None) -> list[int] | None:
    """A literal Reshape target (allowzero = 0) equal to `target` for an input of
    `input_shape` (dims as the e-graph holds them: symbols as ids): a symbol at the position
    where the input has the same symbol becomes 0 (copy), and a single unknown entry becomes
    -1 (the size fixes it) where every other entry is a number >= 1: onnxruntime refuses a -1
    beside a 0 (an input of 0 elements fixes no size), so a -1 beside a copy of a symbolic
    dimension would fail where the caller binds it to 0 ([0, -1] for x [B, S, 4] and
    [B, S * 4]), and the original does not. None if the target cannot be written as a
    literal, or is not a valid target (a number below -1)."""
    out: list[int | None] = []
    for i, e in enumerate(target):
        if isinstance(e, int):
            if e == 0 or e < -1:
                return None  # a computed 0 would read as "copy" in a literal; < -1 is invalid
            out.append(e)
        elif isinstance(e, Sym) and input_shape is not None and i < len(input_shape) and input_shape[i] == e.id:
            out.append(0)
        else:
            out.append(None)
    unknown = [i for i, e in enumerate(out) if e is None]
    if len(unknown) > 1 or (unknown and (-1 in out or any(e is not None and e < 1 for e in out))):
        return None
    for i in unknown:
        out[i] = -1
    return out  # type: ignore[return-value]


def padded(shape: list[int], amounts: list[int] | None, axes: list[int] | None) -> list[int] | None:
    """The shape of Pad(x of `shape`, pads `amounts` on `axes`) in any mode, or None where
    it is not known: a symbolic dim (negative id) is kept where nothing is added to it; a
    negative size (more cropped than there is) is onnxruntime's to refuse."""
    r = len(shape)
    if amounts is None or axes is None or len(amounts) != 2 * len(axes):
        return None
    axes = [a + r if a < 0 else a for a in axes]
    if any(not 0 <= a < r for a in axes) or len(set(axes)) != len(axes):
        return None
    out = list(shape)
    for i, a in enumerate(axes):
        grow = amounts[i] + amounts[i + len(axes)]
        if grow == 0:
            continue
        if is_symbol(shape[a]) or shape[a] + grow < 0:
            return None
        out[a] = shape[a] + grow
    return out
