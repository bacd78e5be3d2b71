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
- a result whose dtype differs from the e-class's;
- a result on which onnx's reference evaluator and onnxruntime disagree.
Initializers that are also graph inputs are `Input`s, never constants.

The value folded is the one onnxruntime computes, the runtime the model is verified on and
meant for: a batch with an op beyond plain data movement and IEEE arithmetic (EXACT_OPS,
where the two agree bit for bit) also runs under onnxruntime (graph optimizations off), and
a value where they differ beyond rounding is refused (the reference's LogSoftmax of
[1000, 0] is [0, -inf], onnxruntime's [0, -1000]; its ArgMax takes a NaN's index): folded,
`x < LogSoftmax(c)[1]` became `x < -inf`, false for every x, which random inputs around 0
never showed. Within rounding (Range adds its delta up in onnxruntime) onnxruntime's value
is taken. A value only the reference can compute (eqsat's internal ops) is the reference's.

eqsat's internal ops (domain eqsat.internal: ReorderFilter, PadChannels, eqsat/oracle/layout.py;
PackNBitsWeight, PackNBitsZeroPoint, eqsat/oracle/nbits.py) fold
like any op; extraction never chooses them, so a value computed by one reaches the output
model only as the folded constant.
"""

from __future__ import annotations

import warnings
from collections import ChainMap
from collections.abc import Mapping

import numpy as np
from onnx import ModelProto, helper, numpy_helper

from eqsat.core.decode import Decoder
from eqsat.core.encode import constant_term, uniform_facts
from eqsat.core.randomness import INSTANCE_ATTR, RANDOM_OPS
from eqsat.core.store import ProtoStore, TensorStore
from eqsat.lang import terms as T
from eqsat.lang.dtypes import CTOR_TO_CODE, np_dtype
from eqsat.lang.ops import BY_CTOR, LITERAL_CTORS
from eqsat.oracle.layout import NEW_OPS as LAYOUT_OPS
from eqsat.oracle.symbolic import SymValues
from eqsat.oracle.view import View


def _dequantize_linear_op() -> type:
    """onnx's reference DequantizeLinear for every opset: onnx implements it only from opset 19
    (1.23: 19, 21, 23, 25), so a model of opset 10 to 18 (quantize_static writes its model's
    own opset) had no kernel and no weight dequantized at optimization time. The opset-23
    kernel computes what the earlier opsets define for the types they allow (8-bit and int32,
    per tensor or per axis); the fold is checked against onnxruntime's value."""
    from onnx.reference.ops.op_dequantize_linear import DequantizeLinear_23

    return type("DequantizeLinear", (DequantizeLinear_23,), {"op_domain": ""})


NEW_OPS = [*LAYOUT_OPS, _dequantize_linear_op()]

# Ops whose inputs must share one dtype (ONNX type constraint T on all of them).
SAME_DTYPE = frozenset(
    {"Add", "Sub", "Mul", "Div", "MatMul", "Gemm", "Concat", "Sum", "Max", "Min", "Equal", "Less",
     "Greater", "And", "Or", "BatchNormalization", "LayerNormalization", "Conv"}
)
STRUCTURE = frozenset({"Absent", "Nil", "Cons", "Out"})
# internal ops whose result is no larger than their input's bytes (where the fold limit's
# input count cannot tell: a 4-bit input has no byte size here)
NO_BLOAT = frozenset({"PadChannels", "PackNBitsWeight", "PackNBitsZeroPoint"})
# ops whose reference implementation gives onnxruntime's bits on every input: data movement and
# correctly rounded IEEE arithmetic; a fold batch of these alone is not run under onnxruntime
EXACT_OPS = frozenset(
    {"Identity", "Reshape", "Transpose", "Concat", "Slice", "Squeeze", "Unsqueeze", "Flatten", "Expand",
     "Tile", "Shape", "Size", "Split", "Gather", "ConstantOfShape", "Add", "Sub", "Mul", "Div", "Neg",
     "Abs", "Sqrt"}
)
# agreement of the two evaluators on a floating-point value: rounding, not semantics
AGREE_RTOL = 1e-5


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
        pending = [nid for nid, n in v.egraph.nodes.items() if n.op in LITERAL_CTORS or n.op in ("Absent", "Nil")]
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
        if n.op in LITERAL_CTORS or n.op in ("Absent", "Nil"):
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
                if v.lit(attrs[0].children[0]) == INSTANCE_ATTR:  # eqsat.core.randomness
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
            if v.egraph.class_type(c) != "Op" or any(n.op in LITERAL_CTORS for n in v.nodes_of(c)):
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
        # less than one block of channels, as onnxruntime's own padded filters do: not bloat;
        # the 4-bit packing of MatMulNBits takes a byte for two codes, as its int4 input does
        if size is not None and size > self.fold_limit and node.op not in NO_BLOAT:
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
            ref = ReferenceEvaluator(model, new_ops=NEW_OPS)
            values = ref.run(None, {}, intermediate=True)
        outs = [values[o] for o in ref.output_names]
        checked = _onnxruntime_values(model, values)
        result = {}
        for c, arr, rt in zip(targets, outs, checked, strict=True):
            if not isinstance(arr, np.ndarray | np.generic):  # a sequence, map or optional: no tensor literal
                self._refuse(f"{v.egraph.nodes[const[c]].op}: result is a {type(arr).__name__}, not a tensor", c)
                continue
            arr = np.asarray(arr)
            if rt is not None:
                if not _agree(arr, rt):
                    self._refuse(f"{v.egraph.nodes[const[c]].op}: onnx's reference evaluator and onnxruntime "
                                 "disagree on its value", c)
                    continue
                arr = rt
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


def _onnxruntime_values(model: ModelProto, values: Mapping[str, object]) -> list[np.ndarray | None]:
    """The fold model's outputs under onnxruntime (graph optimizations off), None for each one
    it was not run for: all of them where the model holds only EXACT_OPS, where onnxruntime
    cannot run it or is not installed; those computed from eqsat's internal ops, and a Div or
    Mod itself. `values` are the reference's, intermediate ones included.

    An integer Div or Mod stops the process (SIGFPE) in onnxruntime on a division by zero or
    INT_MIN / -1, and onnxruntime refuses a float Mod with fmod 0 before opset 28: onnxruntime
    is given no Div or Mod, but the reference's result as a constant (IEEE division and fmod,
    C's integer division: the same values), so that what is computed from it is still checked."""
    from eqsat.lang.contrib import INTERNAL_DOMAIN

    g = model.graph
    none: list[np.ndarray | None] = [None] * len(g.output)
    if all(n.op_type in EXACT_OPS and n.domain in ("", "ai.onnx") for n in g.node):
        return none
    internal: set[str] = set()  # values left to the reference: eqsat's internal ops
    fed: set[str] = set()  # a Div's or Mod's outputs: the reference's, fed as constants
    for n in g.node:  # decoded in a topological order
        if n.domain == INTERNAL_DOMAIN or any(i in internal for i in n.input):
            internal.update(n.output)
        elif n.op_type in ("Div", "Mod") and n.domain in ("", "ai.onnx") and all(o in values for o in n.output):
            fed.update(n.output)
    wanted = [o.name for o in g.output if o.name not in internal and o.name not in fed]
    got = _onnxruntime_run(model, values, fed, wanted) if wanted else {}
    return [got.get(o.name) for o in g.output]


def _onnxruntime_run(model: ModelProto, values: Mapping[str, object], fed: set[str],
                     wanted: list[str]) -> dict[str, np.ndarray]:
    """`wanted` outputs of the fold model under onnxruntime, `fed` values given as constants.
    Where onnxruntime refuses the model (an op it lacks, for one output), the outputs are run
    in halves, so that the others are still checked; an output it cannot run is left out."""
    from eqsat.lang.contrib import INTERNAL_DOMAIN

    g = model.graph
    need, keep = set(wanted), []
    for n in reversed(g.node):
        if any(o in need and o not in fed for o in n.output):
            keep.append(n)
            need.update(i for i in n.input if i)
    sub = ModelProto()
    sub.ir_version = model.ir_version
    sub.opset_import.extend(o for o in model.opset_import if o.domain != INTERNAL_DOMAIN)
    sub.graph.name = g.name
    sub.graph.node.extend(reversed(keep))
    sub.graph.initializer.extend(t for t in g.initializer if t.name in need)
    sub.graph.initializer.extend(numpy_helper.from_array(np.asarray(values[o]), o) for o in sorted(fed & need))
    sub.graph.output.extend(o for o in g.output if o.name in wanted)
    try:
        from eqsat.verification import session

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return dict(zip(wanted, session(sub, optimize=False).run(wanted, {}), strict=True))
    except ImportError:  # onnxruntime is not installed: the reference alone
        return {}
    except Exception:  # noqa: BLE001 - onnxruntime lacks an op: find the outputs it can run
        if len(wanted) == 1:
            return {}
        half = len(wanted) // 2
        return {**_onnxruntime_run(model, values, fed, wanted[:half]),
                **_onnxruntime_run(model, values, fed, wanted[half:])}


def _agree(ref: np.ndarray, rt) -> bool:
    """Whether the two evaluators computed the same value: one dtype and shape; integers,
    booleans and strings equal; floats within rounding (AGREE_RTOL of each value, or of the
    largest), with NaN and infinities in the same places."""
    if not isinstance(rt, np.ndarray) or ref.dtype != rt.dtype or ref.shape != rt.shape:
        return False
    if ref.dtype.kind != "f":
        return ref.tobytes() == rt.tobytes() if ref.dtype.kind != "O" else bool(np.array_equal(ref, rt))
    a, b = ref.astype(np.float64), rt.astype(np.float64)
    finite = np.isfinite(a)
    if not (np.array_equal(finite, np.isfinite(b)) and np.array_equal(np.isnan(a), np.isnan(b))
            and np.array_equal(a[~finite & ~np.isnan(a)], b[~finite & ~np.isnan(b)])):
        return False
    if not finite.any():
        return True
    # rounding of a value near 0 (a sine at pi) is relative to the values around it
    scale = float(np.abs(a[finite]).max())
    return bool(np.allclose(a[finite], b[finite], rtol=AGREE_RTOL, atol=AGREE_RTOL * scale))


def _code(arr: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(arr.dtype)
