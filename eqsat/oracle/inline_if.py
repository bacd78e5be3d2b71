"""If with a constant condition: the taken branch is inlined.

The branch's nodes are encoded as terms whose outer references are the If node's captures,
and each output `(Out if k)` is unioned with the branch's output k. The If stays in the
e-graph; extraction prefers the inlined branch, which needs neither the If nor the other
branch. An If whose condition is not constant is never touched.
"""

from __future__ import annotations

import numpy as np
from onnx import ModelProto

from eqsat.core.encode import Encoder, graph_outer_refs
from eqsat.core.shapes import DimTable
from eqsat.core.store import ProtoStore, TensorStore
from eqsat.lang import terms as T
from eqsat.oracle.view import View


class IfInliner:
    def __init__(self, model: ModelProto, tensors: TensorStore, protos: ProtoStore, dims: DimTable) -> None:
        self.model = model
        self.tensors = tensors
        self.protos = protos
        self.dims = dims
        self.done: set[str] = set()  # If e-classes already inlined
        self.inlined = 0
        self._round = 0

    def condition(self, v: View, eclass: str) -> bool | None:
        for n in v.nodes_of(eclass):
            if n.op == "ScalarI":
                return bool(v.lit(n.children[0]))
            if n.op == "Const":
                arr = self.tensors.array(v.lit(n.children[0]))
                if arr.size == 1:
                    return bool(np.asarray(arr).reshape(()))
        return None

    def __call__(self, v: View) -> list:
        self._round += 1
        cmds: list = []
        outs_of: dict[str, dict[int, str]] = {}
        for n in v.nodes_with_op(["Out"]):
            outs_of.setdefault(n.children[0], {})[v.lit(n.children[1])] = n.eclass
        for n in v.nodes_with_op(["If"]):
            if n.eclass in self.done:
                continue
            cond = self.condition(v, n.children[0])
            if cond is None:
                continue
            else_key, then_key = v.lit(n.children[1]), v.lit(n.children[2])
            captures = v.oplist(n.children[3])
            names: list[str] = []
            for key in (else_key, then_key):  # the encoder's order: attributes by name
                for r in graph_outer_refs(self.protos.graphs[key].graph):
                    if r not in names:
                        names.append(r)
            if len(names) != len(captures):
                continue
            env = {name: v.expr(c) for name, c in zip(names, captures, strict=True)}
            branch = self.protos.graphs[then_key if cond else else_key].graph
            enc = Encoder(self.model, {}, self.tensors, self.protos, self.dims,
                          prefix=f"if{self._round}_{len(self.done)}_")
            outputs = enc.encode_subgraph(branch, {k: e for k, e in env.items() if k in graph_outer_refs(branch)})
            cmds += enc.cmds
            for k, out_class in outs_of.get(n.eclass, {}).items():
                if k < len(outputs):
                    cmds.append(T.union(v.expr(out_class), outputs[k]))
            self.done.add(n.eclass)
            self.inlined += 1
        return cmds
