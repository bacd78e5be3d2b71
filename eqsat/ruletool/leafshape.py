"""Shapes for the tensors a checked rule leaves free (`instantiate.py`): what an op needs of
its inputs, and what the rule's guards ask of their dimensions, solved by construction
instead of hoped for by random tries.

Contract:
- `context_rank(ctor, pos)`: the rank input `pos` of `ctor` needs (None: any).
- `elementwise_shape(first, rank)`: a shape for the second input of Add/Sub/Mul/Div
  (`ELEMENTWISE`) that does not broadcast the first (used in some tries only: broadcasting
  must be tried too).
- `context_shape(ctor, pos, shapes)`: the shape input `pos` of `ctor` needs, given the
  shapes of its inputs before it (None: no need known; a None dim: free): a
  LayerNormalization's scale is [X's last dim], a SkipLayerNormalization's skip has the
  input's shape, a Conv's bias is [W's output channels], a BatchNormalization's scale is
  [X's channels], a MatMul's matrix B is [A's last dim, free].
- `DimGuards(guards, shape_of, find, const)`: the guards of a query on one dimension of a
  tensor (`(>= k 1024)`, `(= 0 (% (vec-get s 1) blk))`, `(= 1 (vec-get sw 1))`, ...),
  per (tensor variable, axis; -1 the last). `fix(var, dims, rng)` returns `dims` with every
  guarded axis that fails its guards set to a value that satisfies them; `sizes()` the small
  values that satisfy the guards of some axis (a trial's common size). A guard it cannot
  read is left to the random tries.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from eqsat.ruletool.sexp import SList, show
from eqsat.ruletool.unfold import is_var

# (ctor, input position) -> rank
_RANKS = {("Conv", 0): 4, ("Conv", 1): 4, ("Conv", 2): 1, ("BatchNormalization", 0): 4,
          ("Gemm", 0): 2, ("Gemm", 1): 2, ("Gemm", 2): 1, ("MatMul", 1): 2,
          ("LayerNormalization", 1): 1, ("LayerNormalization", 2): 1, ("RMSNormalization", 1): 1,
          ("SimplifiedLayerNormalization", 1): 1, ("FusedConv", 0): 4, ("FusedConv", 1): 4,
          ("FusedConv", 2): 1, ("FusedConv", 3): 4, ("SkipLayerNormalization", 0): 3,
          ("SkipSimplifiedLayerNormalization", 0): 3, ("BiasGelu", 1): 1, ("FastGelu", 1): 1,
          ("NchwcReorderInput", 0): 4, ("NchwcReorderOutput", 0): 4, ("NchwcConv", 0): 4,
          ("NchwcConv", 1): 4, ("NchwcConv", 2): 1, ("NchwcConv", 3): 4, ("NchwcConvPlain", 0): 4,
          ("NchwcConvPlain", 1): 4, ("NchwcConvPlain", 2): 1, ("NchwcConvPlain", 3): 4,
          ("NchwcMaxPool", 0): 4, ("NchwcAveragePool", 0): 4, ("NchwcGlobalAveragePool", 0): 4,
          ("NchwcGlobalMaxPool", 0): 4, ("ReorderFilter", 0): 4}
for _i in range(1, 5):
    _RANKS[("BatchNormalization", _i)] = 1

# (ctor, input position) -> (kind, input it follows): "same" its shape, "last" [its last
# dim], "chan" [its dim 1], "out" [its dim 0], "rows" [its last dim, free] (a matrix it
# multiplies), "cols" [free, its dim 0] (a matrix multiplying it), "filter" [free, its
# channels, kernel dims of at most 3 within its spatial dims] (a convolution's filter)
_DERIVED = {
    ("LayerNormalization", 1): ("last", 0), ("LayerNormalization", 2): ("last", 0),
    ("RMSNormalization", 1): ("last", 0), ("SimplifiedLayerNormalization", 1): ("last", 0),
    ("SkipLayerNormalization", 1): ("same", 0), ("SkipLayerNormalization", 2): ("last", 0),
    ("SkipLayerNormalization", 3): ("last", 0), ("SkipLayerNormalization", 4): ("last", 0),
    ("SkipSimplifiedLayerNormalization", 1): ("same", 0),
    ("SkipSimplifiedLayerNormalization", 2): ("last", 0),
    ("SkipSimplifiedLayerNormalization", 3): ("last", 0),
    ("BiasGelu", 1): ("last", 0), ("FastGelu", 1): ("last", 0),
    ("Conv", 2): ("out", 1), ("FusedConv", 2): ("out", 1), ("NchwcConv", 2): ("out", 1),
    ("NchwcConvPlain", 2): ("out", 1), ("MatMul", 1): ("rows", 0), ("MatMul", 0): ("cols", 1),
    ("Conv", 1): ("filter", 0), ("FusedConv", 1): ("filter", 0), ("NchwcConv", 1): ("filter", 0),
    ("NchwcConvPlain", 1): ("filter", 0),
    **{("BatchNormalization", i): ("chan", 0) for i in range(1, 5)},
}


ELEMENTWISE = ("Add", "Sub", "Mul", "Div")


def elementwise_shape(first: tuple | None, rank: int | None) -> tuple | None:
    """The second input of an element-wise op that does not broadcast the first: its shape,
    or [its last dim] where the second must be 1-D (a bias)."""
    if not first:
        return None
    if rank == 1:
        return (first[-1],)
    return tuple(first) if rank in (None, len(first)) else None


def context_rank(ctor: str, pos: int) -> int | None:
    return _RANKS.get((ctor, pos))


def context_shape(ctor: str, pos: int, shapes: list[tuple | None]) -> tuple | None:
    rule = _DERIVED.get((ctor, pos))
    if rule is None:
        return None
    kind, src = rule
    sh = shapes[src] if src < len(shapes) else None
    if not sh:
        return None
    if kind == "same":
        return tuple(sh)
    if kind == "last":
        return (sh[-1],)
    if kind == "chan":
        return (sh[1],) if len(sh) >= 2 else None
    if kind == "rows":
        return (sh[-1], None)
    if kind == "cols":
        return (None, sh[0]) if len(sh) == 2 else None
    if kind == "filter":
        return (None, sh[1], *(min(3, d) for d in sh[2:])) if len(sh) >= 3 else None
    return (sh[0],)


_FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "=", "!=": "!="}
_CMP: dict[str, Callable[[int, int], bool]] = {
    "<": lambda d, n: d < n, ">": lambda d, n: d > n, "<=": lambda d, n: d <= n,
    ">=": lambda d, n: d >= n, "=": lambda d, n: d == n, "!=": lambda d, n: d != n,
}
SMALL = 64  # the largest common size for every dimension of a trial


class DimGuards:
    def __init__(self, guards: list, shape_of: dict[str, str], find: Callable[[str], str],
                 const: Callable[[object], int | None]) -> None:
        self._shape_of = {find(k): find(v) for k, v in shape_of.items()}
        self._find = find
        self._const = const
        self._slot_of: dict[str, tuple[str, int]] = {}  # var -> (tensor, axis) it equals
        for g in guards:
            if isinstance(g, SList) and len(g) == 3 and g[0] == "=":
                for a, b in ((g[1], g[2]), (g[2], g[1])):
                    s = self._slot(b)
                    if is_var(a) and s is not None:
                        self._slot_of.setdefault(find(a), s)
        self.preds: dict[tuple[str, int], list[Callable[[int], bool]]] = {}
        self.cands: dict[tuple[str, int], set[int]] = {}
        for g in guards:
            if isinstance(g, SList) and len(g) == 3 and str(g[0]) in _CMP:
                self._read(str(g[0]), g[1], g[2]) or self._read(_FLIP[str(g[0])], g[2], g[1])

    def _slot(self, x) -> tuple[str, int] | None:
        """(tensor, axis) that expression x is a dimension of."""
        if is_var(x):
            return self._slot_of.get(self._find(x))
        if not (isinstance(x, SList) and len(x) == 3):
            return None
        if x[0] == "/":  # (/ d g): d / g over a multiple is read as d (g is a group count, often 1)
            return self._slot(x[1])
        if x[0] != "vec-get" or not is_var(x[1]):
            return None
        t = self._shape_of.get(self._find(x[1]))
        if t is None:
            return None
        if isinstance(x[2], int):
            return (t, x[2])
        if show(x[2]) == f"(- (vec-length {x[1]}) 1)":
            return (t, -1)
        return None

    def _num(self, x) -> int | None:
        if isinstance(x, bool):
            return None
        if isinstance(x, int):
            return x
        v = self._const(x)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def _add(self, slot, pred, cands) -> None:
        self.preds.setdefault(slot, []).append(pred)
        self.cands.setdefault(slot, set()).update(c for c in cands if c >= 0)

    def _read(self, op: str, a, b) -> bool:
        """`(op a b)` with a a dimension (or its remainder) and b a number."""
        n = self._num(b)
        if n is None:
            return False
        s = self._slot(a)
        if s is not None:
            cmp = _CMP[op]
            self._add(s, lambda d, n=n, cmp=cmp: cmp(d, n), [n - 1, n, n + 1, n + 3, 2 * n])
            return True
        if isinstance(a, SList) and len(a) == 3 and a[0] == "%":
            s, m = self._slot(a[1]), self._num(a[2])
            if s is None or not m or m <= 0:
                return False
            cmp = _CMP[op]
            self._add(s, lambda d, n=n, m=m, cmp=cmp: cmp(d % m, n), [m, 2 * m, m + n, m + 3, 2 * m + 3])
            return True
        return False

    def _ok(self, slot, d: int) -> bool:
        return all(p(d) for p in self.preds.get(slot, ()))

    def _choices(self, slot) -> list[int]:
        pool = set(self.cands.get(slot, ())) | {1, 2, 3, 4}
        return sorted(c for c in pool if c >= 1 and self._ok(slot, c))

    def fix(self, var: str, dims: tuple, rng: np.random.Generator) -> tuple:
        var = self._find(var)
        out = list(dims)
        for (t, axis), _ in self.preds.items():
            if t != var:
                continue
            ax = axis if axis >= 0 else len(out) + axis
            if not 0 <= ax < len(out) or self._ok((t, axis), out[ax]):
                continue
            ch = self._choices((t, axis))
            if ch:
                out[ax] = int(ch[int(rng.integers(min(2, len(ch))))])
        return tuple(out)

    def sizes(self) -> list[int]:
        out: set[int] = set()
        for slot in self.preds:
            out.update(c for c in self._choices(slot) if 4 < c <= SMALL)
        return sorted(out)
