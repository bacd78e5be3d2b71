"""Symbolic values of shape tensors: what the small int64 tensors of shape arithmetic hold,
where an entry may be a symbolic dimension.

`Shape(x)` holds x's shape, whose dimensions are numbers or symbols (eqsat.shapes); Gather,
Concat, Slice, Unsqueeze, Squeeze, Cast and integer arithmetic carry such values along.
Two uses:
- a value whose entries are all numbers is a constant: the fold oracle makes it a literal
  (this is how Shape -> Gather -> Concat chains fold when shapes are static);
- a Reshape target whose entries are known up to its input's own dimensions becomes a
  literal with 0 ("copy this dimension") and at most one -1, so the shape arithmetic
  feeding it is no longer needed even when the shapes are symbolic.
"""

from __future__ import annotations

from ..shapes import is_symbol
from .view import View

Entry = int | None  # a number, a symbol id (<= SYM_BASE), or None (unknown)
INT64_MAX = 2**63 - 1


class SymValues:
    def __init__(self, view: View) -> None:
        self.v = view
        self.memo: dict[str, list[Entry] | None] = {}

    def of(self, eclass: str) -> list[Entry] | None:
        if eclass in self.memo:
            return self.memo[eclass]
        self.memo[eclass] = None  # cycles read as unknown
        out = None
        for node in self.v.nodes_of(eclass):
            out = self._node(node)
            if out is not None:
                break
        self.memo[eclass] = out
        return out

    def _index_list(self, eclass: str) -> list[int] | None:
        vals = self.of(eclass)
        if vals is None or any(e is None or is_symbol(e) for e in vals):
            return None
        return vals

    def _node(self, n) -> list[Entry] | None:
        v, op, k = self.v, n.op, n.children
        if op == "Ints":
            return v.ivec(k[0])
        if op == "ScalarI":
            return [v.lit(k[0])] if v.nodes_of(k[1])[0].op in ("I64", "I32") and len(v.ivec(k[2])) <= 1 else None
        if op == "Shape":
            sx = v.shape(k[0])
            if sx is None:
                return None
            end_node = v.nodes_of(k[1])[0]
            end = None if end_node.op == "NoInt" else v.lit(end_node.children[0])
            return list(sx[v.lit(k[2]) : end])
        if op in ("Unsqueeze", "Squeeze", "Identity", "Flatten"):
            return self.of(k[0])
        if op == "Cast":
            return self.of(k[0]) if v.nodes_of(k[3])[0].op in ("I64", "I32") else None
        if op == "Reshape":
            target = v.nodes_of(k[1])[0]
            return self.of(k[0]) if target.op == "Ints" and len(v.ivec(target.children[0])) == 1 else None
        if op == "Gather":
            data, idx = self.of(k[0]), self._index_list(k[1])
            if data is None or idx is None or v.lit(k[2]) != 0:
                return None
            try:
                return [data[i] for i in idx]
            except IndexError:
                return None
        if op == "Concat":
            if v.lit(k[1]) not in (0, -1):
                return None
            out: list[Entry] = []
            for item in v.oplist(k[0]):
                part = self.of(item)
                if part is None:
                    return None
                out.extend(part)
            return out
        if op == "Slice":
            data, starts, ends = self.of(k[0]), self._index_list(k[1]), self._index_list(k[2])
            if data is None or starts is None or ends is None or len(starts) != 1 or len(ends) != 1:
                return None
            for extra, allowed in ((k[3], ([0], [-1])), (k[4], ([1],))):  # axes 0, step 1
                if v.nodes_of(extra)[0].op != "Absent" and self._index_list(extra) not in allowed:
                    return None
            return data[slice(starts[0], ends[0])]
        if op in ("Add", "Sub", "Mul", "Div"):
            a, b = self.of(k[0]), self.of(k[1])
            if a is None or b is None or not (len(a) == len(b) or 1 in (len(a), len(b))):
                return None
            n_out = max(len(a), len(b))
            a = a * n_out if len(a) == 1 else a
            b = b * n_out if len(b) == 1 else b
            return [_arith(op, x, y) for x, y in zip(a, b, strict=True)]
        return None


def _arith(op: str, x: Entry, y: Entry) -> Entry:
    if x is None or y is None:
        return None
    if is_symbol(x) or is_symbol(y):
        if op in ("Mul", "Div") and y == 1:
            return x
        if op == "Mul" and x == 1:
            return y
        if op in ("Add", "Sub") and y == 0:
            return x
        if op == "Add" and x == 0:
            return y
        return None
    if op == "Add":
        return x + y
    if op == "Sub":
        return x - y
    if op == "Mul":
        return x * y
    if y == 0:
        return None
    q = abs(x) // abs(y)  # ONNX integer Div truncates toward zero
    return q if (x >= 0) == (y >= 0) else -q


def concrete(vals: list[Entry] | None) -> bool:
    return vals is not None and all(e is not None and not is_symbol(e) for e in vals)


def reshape_target(target: list[Entry], input_shape: list[int] | None) -> list[int] | None:
    """A literal Reshape target (allowzero = 0) equal to `target` for an input of
    `input_shape`: a symbol at the position where the input has the same symbol becomes 0
    (copy), and a single unknown entry becomes -1 (the size fixes it). None if the target
    cannot be written as a literal."""
    out: list[int | None] = []
    for i, e in enumerate(target):
        if e is not None and not is_symbol(e):
            if e == 0:
                return None  # a computed 0 would read as "copy" in a literal
            out.append(e)
        elif e is not None and input_shape is not None and i < len(input_shape) and input_shape[i] == e:
            out.append(0)
        else:
            out.append(None)
    unknown = [i for i, e in enumerate(out) if e is None]
    if len(unknown) > 1 or (unknown and -1 in out):
        return None
    for i in unknown:
        out[i] = -1
    return out  # type: ignore[return-value]
