"""Reshape targets computed by shape arithmetic become literals.

`Reshape(x, Concat(Gather(Shape(x), 0), Gather(Shape(x), 1), 12, 64))` is
`Reshape(x, [0, 0, 12, 64])` whatever the batch and sequence sizes are: the target's
symbolic value (symbolic.py) names x's own dimensions at those positions. A literal target
frees the Shape/Gather/Concat chain for dead-code elimination, and lets rules read the
target (attention rules read the head count from it).
"""

from __future__ import annotations

from eqsat.lang import terms as T
from eqsat.oracle.symbolic import SymValues, reshape_target
from eqsat.oracle.view import View


class ReshapeTargets:
    def __init__(self) -> None:
        self.rewritten = 0
        self.seen: set[tuple] = set()

    def __call__(self, v: View) -> list:
        sym = SymValues(v)
        cmds = []
        for n in v.nodes_with_op(["Reshape"]):
            x, target, allowzero = n.children
            if v.lit(allowzero) != 0 or any(t.op == "Ints" for t in v.nodes_of(target)):
                continue
            vals = sym.of(target)
            if vals is None:
                continue
            lit = reshape_target(vals, v.shape(x))
            if lit is None or (n.eclass, tuple(lit)) in self.seen:
                continue
            self.seen.add((n.eclass, tuple(lit)))
            cmds.append(T.union(v.expr(n.eclass), T.call("Reshape", v.expr(x), T.call("Ints", T.ivec(lit)), T.i64(0))))
            self.rewritten += 1
        return cmds
