"""Oracles: Python that adds facts to the e-graph between saturation rounds, for what
egglog rules cannot compute (tensor arithmetic, shape arithmetic, subgraphs).

`Oracle` is the saturation hook: it serializes the e-graph once per round and runs
constant folding (fold.py), symbolic shape rewriting (symbolic.py, reshape.py) and If
inlining (inline_if.py) on that view. The view sees eqsat's internal ops (ReorderFilter,
layout.py), which extraction never may choose: they exist to be folded here.
"""

from __future__ import annotations

from onnx import ModelProto

from eqsat.core.shapes import DimTable
from eqsat.core.store import ProtoStore, TensorStore
from eqsat.lang.contrib import INTERNAL_DOMAIN
from eqsat.lang.ops import SPECS
from eqsat.oracle.fold import Folder
from eqsat.oracle.inline_if import IfInliner
from eqsat.oracle.reshape import ReshapeTargets
from eqsat.oracle.view import View

INTERNAL_CTORS = frozenset(s.ctor for s in SPECS if s.domain == INTERNAL_DOMAIN)


def _with_internal_ops(data: dict) -> dict:
    """The serialized e-graph with eqsat's internal ops no longer forbidden."""
    meta = data.get("eqsat")
    if not meta or not meta.get("forbidden"):
        return data
    forbidden = [c for c in meta["forbidden"] if c not in INTERNAL_CTORS]
    return {**data, "eqsat": {**meta, "forbidden": forbidden}}


class Oracle:
    def __init__(self, model: ModelProto, tensors: TensorStore, protos: ProtoStore, dims: DimTable,
                 serialize, fold_limit: int) -> None:
        self.serialize = serialize  # () -> JSON dict of the current e-graph
        self.folder = Folder(model, tensors, protos, fold_limit)
        self.inliner = IfInliner(model, tensors, protos, dims)
        self.reshapes = ReshapeTargets()
        self.rounds = 0

    def __call__(self, _saturator) -> list:
        self.rounds += 1
        v = View.of(_with_internal_ops(self.serialize()), prefix=f"o{self.rounds}_")
        facts = self.folder(v) + self.reshapes(v) + self.inliner(v)
        return v.lets + facts

    def report(self) -> dict:
        return {
            "folded": self.folder.folded,
            "fold_refused": self.folder.refusals(),
            "reshape_targets_rewritten": self.reshapes.rewritten,
            "if_inlined": self.inliner.inlined,
        }
