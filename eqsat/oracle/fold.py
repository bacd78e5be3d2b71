"""Constant folding between saturation rounds.

An e-class is constant when one of its nodes is a literal, or an op that is safe to
evaluate (not random, no side effects, no subgraph) whose inputs are all constant. Each
constant e-class without a literal is evaluated once (onnx's reference evaluator, on a
small ONNX model decoded from the constant nodes) and unioned with a literal of its value,
so that rules see `(Const k)` / `(Ints v)` / `(ScalarF x t s)` in the next round.

It refuses, and says why in the report:
- random ops (their value differs run to run);
- a result over the fold limit that is larger than the inputs it is computed from (an
  Expand or Tile of a scalar would bloat the file), except a filter padded to the NCHWc
  block (PadChannels, which adds less than one block of channels);
- arithmetic across different dtypes (a rule that mixed float16 and float32 would
  otherwise be folded at the wrong precision);
- a result whose dtype differs from the e-class's.
Initializers that are also graph inputs are `Input`s, never constants.

eqsat's internal ops (domain eqsat.internal: ReorderFilter, PadChannels, eqsat/oracle/layout.py) fold
like any op; extraction never chooses them, so a value computed by one reaches the output
model only as the folded constant.
"""

from __future__ import annotations

import warnings
from collections import ChainMap
from collections.abc import Mapping

import numpy as np
from onnx import ModelProto, helper, numpy_helper

from ..decode import LITERALS, Decoder
from ..encode import constant_term, uniform_facts
from ..lang import terms as T
from ..lang.dtypes import CTOR_TO_CODE, np_dtype
from ..lang.ops import BY_CTOR
from ..randomness import INSTANCE_ATTR, RANDOM_OPS
from ..store import ProtoStore, TensorStore
from .layout import NEW_OPS
from .symbolic import SymValues
from .view import View

# Ops whose inputs must share one dtype (ONNX type constraint T on all of them).
SAME_DTYPE = frozenset(
    {"Add", "Sub", "Mul", "Div", "MatMul", "Gemm", "Concat", "Sum", "Max", "Min", "Equal", "Less",
     "Greater", "And", "Or", "BatchNormalization", "LayerNormalization", "Conv"}
)
STRUCTURE = frozenset({"Absent", "Nil", "Cons", "Out"})


class Folder:
    def __init__(self, model: ModelProto, tensors: TensorStore, protos: ProtoStore, fold_limit: int) -> None:
        self.model = model
        self.tensors = tensors
        self.protos = protos
        self.fold_limit = fold_limit
        self.refused: dict[str, set[str]] = {}  # reason -> e-classes refused for it
        self.folded = 0

    def _refuse(self, reason: str, eclass: str) -> None:
        self.refused.setdefault(reason, set()).add(eclass)

    def refusals(self) -> dict[str, int]:
        """Reason -> how many values were not folded for it."""
        return dict(sorted(((r, len(c)) for r, c in self.refused.items()), key=lambda x: (-x[1], x[0])))

    # ---- which e-classes are constant
    def constant_classes(self, v: View) -> dict[str, str]:
        """e-class -> a node that computes it from constants only (children first, so the
        choice is acyclic)."""
        const: dict[str, str] = {}
        parents = v.egraph.parents()
        pending = [nid for nid, n in v.egraph.nodes.items() if n.op in LITERALS or n.op in ("Absent", "Nil")]
        while pending:
            nxt = []
            for nid in pending:
                n = v.egraph.nodes[nid]
                if n.eclass in const or not self._foldable(v, n, const):
                    continue
                const[n.eclass] = nid
                nxt.extend(parents[n.eclass])
            pending = list(dict.fromkeys(nxt))
        return const

    def _foldable(self, v: View, n, const: dict[str, str]) -> bool:
        if n.op in LITERALS or n.op in ("Absent", "Nil"):
            return True
        kids = [k for k in n.children if v.egraph.class_type(k) in ("Op", "OpList")]
        if not all(k in const for k in kids):
            return False
        if n.op in STRUCTURE:
            return True
        if n.op == "Opaque":
            domain, op_type = v.lit(n.children[0]), v.lit(n.children[1])
            if op_type in RANDOM_OPS:
                self._refuse(f"{op_type}: random op", n.eclass)
                return False
            attrs = v.nodes_of(n.children[3])
            has_graph = False
            while attrs and attrs[0].op == "ACons":
                if v.lit(attrs[0].children[0]) == INSTANCE_ATTR:  # eqsat.randomness
                    self._refuse(f"{op_type}: random op", n.eclass)
                    return False
                has_graph |= v.nodes_of(attrs[0].children[1])[0].op in ("AGraph", "ARaw")
                attrs = v.nodes_of(attrs[0].children[2])
            return domain in ("", "ai.onnx") and not has_graph and not v.oplist(n.children[4])
        spec = BY_CTOR.get(n.op)
        return spec is not None and not spec.contrib and not spec.captures

    # ---- folding
    def __call__(self, v: View) -> list:
        const = self.constant_classes(v)
        sym = SymValues(v)
        cmds: list = []
        targets: list[str] = []
        for c, nid in const.items():
            if v.egraph.class_type(c) != "Op" or any(n.op in LITERALS for n in v.nodes_of(c)):
                continue
            node = v.egraph.nodes[nid]
            if node.op == "Absent":
                continue  # a missing input: no value
            if node.op == "Opaque" or (node.op in BY_CTOR and BY_CTOR[node.op].n_outputs):
                continue  # a node with several outputs: its (Out c k) e-classes are the values
            why = self._refuse_before(v, node)
            if why:
                self._refuse(why, c)
                continue
            targets.append(c)
        # Shape arithmetic whose value is fully known, whatever it is computed from.
        for c in v.egraph.classes:
            if c in const or v.egraph.class_type(c) != "Op" or v.dtype(c) not in ("I64", "I32"):
                continue
            known = sym.tensor(c)
            if known is None or not known.concrete() or list(known.shape) != v.shape(c):
                continue
            cmds += self._union(v, c, known.array())
        if targets:
            for c, arr in self._evaluate(v, const, targets).items():
                cmds += self._union(v, c, arr)
        return cmds

    def _refuse_before(self, v: View, node) -> str | None:
        if node.op in SAME_DTYPE:
            kids = [k for k in node.children if v.egraph.class_type(k) == "Op"]
            kids += [i for k in node.children if v.egraph.class_type(k) == "OpList" for i in v.oplist(k)]
            dts = {v.dtype(k) for k in kids if v.dtype(k) is not None and v.nodes_of(k)[0].op != "Absent"}
            if len(dts) > 1:
                return f"{node.op}: mixed dtypes {', '.join(sorted(dts))}"
        size = self._bytes(v, node.eclass)
        # PadChannels (a filter's output channels padded to the NCHWc block) grows a weight by
        # less than one block of channels, as onnxruntime's own padded filters do: not bloat
        if size is not None and size > self.fold_limit and node.op != "PadChannels":
            inputs = [self._bytes(v, k) for k in node.children if v.egraph.class_type(k) == "Op"]
            inputs += [self._bytes(v, i) for k in node.children
                       if v.egraph.class_type(k) == "OpList" for i in v.oplist(k)]
            if any(x is None for x in inputs) or size > sum(x for x in inputs if x):
                return f"{node.op}: result of {size} bytes is over the fold limit and larger than its inputs"
        return None

    @staticmethod
    def _bytes(v: View, eclass: str) -> int | None:
        shape, dt = v.shape(eclass), v.dtype(eclass)
        if shape is None or dt not in CTOR_TO_CODE or any(d < 0 for d in shape):
            return None
        return int(np.prod(shape, dtype=np.int64)) * np_dtype(CTOR_TO_CODE[dt]).itemsize

    def _evaluate(self, v: View, const: dict[str, str], targets: list[str]) -> dict[str, np.ndarray]:
        """Evaluate all targets at once; when that fails, halve the batch until the failing
        targets are found (a few runs for a few failures, not one run per target)."""
        choice = ChainMap(const, v.choice())
        try:
            return self._run(v, const, choice, targets)
        except Exception as e:  # noqa: BLE001 - find the ones that fail, fold the rest
            if len(targets) == 1:
                c = targets[0]
                op = v.egraph.nodes[const[c]].op
                self._refuse(f"{op}: evaluation failed ({type(e).__name__}: {str(e).splitlines()[0][:80]})", c)
                return {}
        half = len(targets) // 2
        return {**self._evaluate(v, const, targets[:half]), **self._evaluate(v, const, targets[half:])}

    def _run(self, v: View, const: dict[str, str], choice: Mapping[str, str],
             targets: list[str]) -> dict[str, np.ndarray]:
        from onnx.reference import ReferenceEvaluator

        m = ModelProto()
        m.ir_version = max(self.model.ir_version, 7)
        m.opset_import.extend(self.model.opset_import)
        m.graph.name = "fold"
        m.graph.output.extend(helper.make_empty_tensor_value_info(f"fold_{i}") for i in range(len(targets)))
        dec = Decoder(m, v.egraph, choice, self.tensors, self.protos, {})
        model = dec.decode(targets)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = ReferenceEvaluator(model, new_ops=NEW_OPS).run(None, {})
        result = {}
        for c, arr in zip(targets, outs, strict=True):
            if not isinstance(arr, np.ndarray | np.generic):  # a sequence, map or optional: no tensor literal
                self._refuse(f"{v.egraph.nodes[const[c]].op}: result is a {type(arr).__name__}, not a tensor", c)
                continue
            arr = np.asarray(arr)
            dt = v.dtype(c)
            if dt in CTOR_TO_CODE and arr.dtype != np_dtype(CTOR_TO_CODE[dt]):
                self._refuse(f"{v.egraph.nodes[const[c]].op}: result dtype {arr.dtype} is not the value's {dt}", c)
                continue
            if arr.nbytes > self.fold_limit and v.shape(c) is None:
                self._refuse(f"{v.egraph.nodes[const[c]].op}: result of {arr.nbytes} bytes is over the fold limit", c)
                continue
            result[c] = arr
        return result

    def _union(self, v: View, eclass: str, arr: np.ndarray) -> list:
        t = numpy_helper.from_array(arr)
        lit = constant_term(t, self.tensors)
        self.folded += 1
        return [T.union(v.expr(eclass), lit),
                T.set_fn("shape", [lit], T.ivec(arr.shape)),
                T.set_fn("dtype", [lit], T.dtype(_code(arr)))] + uniform_facts(t, lit)


def _code(arr: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(arr.dtype)
