"""The e-graph as the oracles see it between rounds: the serialized JSON, indexed, with a
way to name any e-class in a new egglog command.

An oracle reads e-classes and adds facts (`union`s with new terms). To write an action
about an e-class it needs an expression that evaluates to it: `(Value N)` when the class
holds an encoded value, else a term rebuilt from one of its nodes, whose own children are
named the same way and bound by `let`s (local to the batch the oracle's actions are run in,
`Saturator.run_batch`) so that each is built once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from eqsat.extract import EGraph, get_extractor
from eqsat.extract.costs import NodeCount
from eqsat.lang import terms as T
from eqsat.lang.literals import parse_float, parse_int, parse_string


@dataclass
class View:
    egraph: EGraph
    data: dict  # the JSON, with eqsat's metadata
    prefix: str  # for the names this view binds (no `$`: they are local to a batch)
    lets: list = field(default_factory=list)  # actions binding them, to run before the unions
    _expr: dict[str, object] = field(default_factory=dict)
    _choice: dict[str, str] | None = None
    _n: int = 0

    @classmethod
    def of(cls, data: dict, prefix: str) -> View:
        v = cls(EGraph.from_json(data, trusted=True), data, prefix)
        for vid, c in data["eqsat"]["value_class"].items():  # (Value N) handles, by eqsat.core.serialize
            v._expr.setdefault(c, T.value(int(vid)))
        return v

    # ---- reading
    def nodes_of(self, eclass: str):
        return [self.egraph.nodes[n] for n in self.egraph.classes.get(eclass, ())]

    def nodes_with_op(self, ops: Iterable[str]):
        want = set(ops)
        return [n for n in self.egraph.nodes.values() if n.op in want]

    def shape(self, eclass: str) -> list[int] | None:
        return self.egraph.class_data.get(eclass, {}).get("shape")

    def dtype(self, eclass: str) -> str | None:
        return self.egraph.class_data.get(eclass, {}).get("dtype")

    def lit(self, eclass: str):
        """The value of a primitive e-class (i64, f64, String, bool)."""
        n = self.nodes_of(eclass)[0]
        t = self.egraph.class_type(eclass)
        if t == "i64":
            return parse_int(n.op)
        if t == "f64":
            return parse_float(n.op)
        if t == "String":
            return parse_string(n.op)
        return n.op == "true"

    def ivec(self, eclass: str) -> list[int]:
        n = self.nodes_of(eclass)[0]
        return [] if n.op == "vec-empty" else [self.lit(c) for c in n.children]

    def oplist(self, eclass: str) -> list[str]:
        out = []
        nodes = self.nodes_of(eclass)
        while nodes and nodes[0].op == "Cons":
            out.append(nodes[0].children[0])
            nodes = self.nodes_of(nodes[0].children[1])
        return out

    # ---- naming e-classes in commands
    def choice(self) -> dict[str, str]:
        """A finite term for every e-class that has one (tree-greedy by node count)."""
        if self._choice is None:
            self._choice = get_extractor("tree-greedy").choose_all(self.egraph, NodeCount())
        return self._choice

    def expr(self, eclass: str):
        """An expression that evaluates to `eclass` (binding new names as needed)."""
        if eclass in self._expr:
            return self._expr[eclass]
        stack = [eclass]
        while stack:
            c = stack[-1]
            if c in self._expr:
                stack.pop()
                continue
            nid = self.choice().get(c)
            if nid is None:
                raise KeyError(f"e-class {c} has no finite term")
            node = self.egraph.nodes[nid]
            missing = [k for k in node.children if k not in self._expr and not self._is_data(k)]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            e = T.call(node.op, *[self._expr[k] if k in self._expr else self._data_expr(k) for k in node.children])
            if self.egraph.class_type(c) == "Op":
                name = f"{self.prefix}{self._n}"
                self._n += 1
                self.lets.append(T.let(name, e))
                e = T.var(name)
            self._expr[c] = e
        return self._expr[eclass]

    def _is_data(self, eclass: str) -> bool:
        return self.egraph.class_type(eclass) not in ("Op", "OpList")

    def _data_expr(self, eclass: str):
        """Primitive and attribute values (i64, IVec, DType, Attrs, ...), rebuilt literally."""
        t = self.egraph.class_type(eclass)
        nid = self.choice().get(eclass) or self.egraph.classes[eclass][0]
        node = self.egraph.nodes[nid]
        if t == "i64":
            return T.i64(parse_int(node.op))
        if t == "f64":
            return T.f64(parse_float(node.op))
        if t == "String":
            return T.string(parse_string(node.op))
        if t == "bool":
            return T.bool_(node.op == "true")
        return T.call(node.op, *[self._data_expr(k) for k in node.children])
