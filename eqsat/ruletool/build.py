"""Small ONNX graphs from op-language nodes: the checker's instantiation target.

Contract: a `GraphBuilder` collects graph inputs (random feeds), initializers and nodes,
each op-language constructor written as its ONNX node in the newest form (the op table in
`eqsat.lang.ops` says inputs, attributes, defaults, domains). `infer(name)` gives the
static shape and element type ONNX shape inference finds for a value; `run(outputs)` runs
the graph under onnxruntime, in a child process (`runner.py`), and returns the named values.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from eqsat.backends.ort.target import NCHWC_DOMAIN
from eqsat.lang.contrib import INTERNAL_DOMAIN
from eqsat.lang.dtypes import CTOR_TO_CODE, np_dtype
from eqsat.lang.ops import BY_CTOR, OpSpec
from eqsat.ruletool.prims import DV

OPSET = 23
IR_VERSION = 10
MS = "com.microsoft"


class BuildError(Exception):
    """The nodes do not make a valid graph (the instantiation is rejected, not the rule)."""


def dtype_code(v: DV) -> int:
    if v.ctor == "DTypeCode":
        return int(v.args[0])
    return CTOR_TO_CODE[v.ctor]


class GraphBuilder:
    def __init__(self) -> None:
        self.inputs: list[onnx.ValueInfoProto] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.inits: dict[str, TensorProto] = {}
        self.consts: dict[str, np.ndarray] = {}  # initializer values, for reports
        self.nodes: list[onnx.NodeProto] = []
        self.types: dict[str, tuple[int, tuple | None]] = {}  # value -> (elem type, shape)
        self._n = 0

    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{hint.replace('~', '_')}_{self._n}"

    # ---- leaves
    def add_input(self, hint: str, arr: np.ndarray) -> str:
        name = self.fresh(hint)
        self.inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape))
        self.feeds[name] = arr
        self.types[name] = (helper.np_dtype_to_tensor_dtype(arr.dtype), tuple(arr.shape))
        return name

    def add_const(self, hint: str, arr: np.ndarray) -> str:
        name = self.fresh(hint)
        self.inits[name] = numpy_helper.from_array(np.asarray(arr), name)
        self.consts[name] = np.asarray(arr)
        self.types[name] = (helper.np_dtype_to_tensor_dtype(np.asarray(arr).dtype), tuple(np.shape(arr)))
        return name

    def literal(self, ctor: str, args: list, hint: str = "lit") -> str:
        """Ints / ScalarF / ScalarI as an initializer."""
        if ctor == "Ints":
            return self.add_const(hint, np.array(list(args[0]), dtype=np.int64))
        v, t, shape = args
        with np.errstate(over="ignore"):  # a value beyond the type's range is inf there, as in a model
            arr = np.array(v).astype(np_dtype(dtype_code(t))).reshape(tuple(shape))
        return self.add_const(hint, arr)

    # ---- nodes
    def add_node(self, ctor: str, args: list, hint: str = "v") -> list[str]:
        """`args` in constructor order: value names ('' for Absent) or lists of them for an
        OpList, then attribute values, then the number of outputs. Returns output names."""
        args = list(args)
        if ctor == "NchwcConv" and args[4] == "Identity" and not args[5]:
            # the rules' intermediate form of a plain blocked conv (onnxruntime rejects the
            # activation "Identity"; rules/layout.egg rewrites it to NchwcConvPlain)
            ctor, args = "NchwcConvPlain", args[:4] + args[6:]
        spec = BY_CTOR.get(ctor)
        if spec is None:
            raise BuildError(f"no ONNX op for constructor {ctor}")
        inputs: list[str] = []
        for inp in spec.inputs:
            a = args.pop(0)
            inputs.extend(a if inp.endswith("*") else [a])
        while inputs and inputs[-1] == "":
            inputs.pop()
        attrs = []
        for a in spec.attrs:
            attr = _attr(spec, a, args.pop(0), self)
            if attr is not None:
                attrs.append(attr)
        if spec.captures:
            raise BuildError(f"{ctor} has subgraphs")
        if spec.domain == INTERNAL_DOMAIN:
            return [self._fold_internal(spec, inputs, attrs, hint)]
        n_out = int(args.pop(0)) if spec.n_outputs else 1
        outs = [self.fresh(hint) for _ in range(n_out)]
        node = helper.make_node(spec.onnx_type, inputs, outs, domain=spec.domain or None)
        node.attribute.extend(attrs)
        self.nodes.append(node)
        return outs

    def _fold_internal(self, spec: OpSpec, inputs: list[str], attrs: list, hint: str) -> str:
        """An eqsat-internal op (ReorderFilter, PadChannels, PackNBits*) on constants, evaluated as the
        folding oracle evaluates it: onnxruntime has no kernel for it."""
        from eqsat.oracle.layout import pad_channels, reorder_filter
        from eqsat.oracle.nbits import pack_weight, pack_zero_point

        if not inputs or any(x not in self.consts and self.reads_input(x) for x in inputs):
            raise BuildError(f"{spec.ctor} of a tensor that is not a constant")
        for x in inputs:  # a computation of constants: run it, as the oracle folds it
            if x not in self.consts:
                self.consts[x] = self.run([x])[x]
        a = {x.name: helper.get_attribute_value(x) for x in attrs}
        a = {k: v.decode() if isinstance(v, bytes) else v for k, v in a.items()}
        try:
            if spec.ctor == "ReorderFilter":
                out = reorder_filter(self.consts[inputs[0]], int(a.get("block", 0)), a.get("layout", ""))
            elif spec.ctor == "PadChannels":
                out = pad_channels(self.consts[inputs[0]], int(a.get("channels", 0)), int(a.get("axis", 0)))
            elif spec.ctor == "PackNBitsWeight":
                out = pack_weight(self.consts[inputs[0]], int(a.get("block_size", 0)))
            elif spec.ctor == "PackNBitsZeroPoint":
                out = pack_zero_point(self.consts[inputs[0]], int(a.get("blocks", 0)), int(a.get("columns", 0)))
            else:
                raise BuildError(f"the checker cannot evaluate {spec.ctor}")
        except ValueError as e:
            raise BuildError(str(e)) from None
        return self.add_const(hint, out)

    def reads_input(self, name: str) -> bool:
        """Whether value `name` depends on a graph input."""
        need = {name}
        for n in reversed(self.nodes):
            if need & set(n.output):
                need.update(x for x in n.input if x)
        return bool(need & set(self.feeds))

    def model(self, outputs: list[str]) -> onnx.ModelProto:
        """The graph of the nodes `outputs` need (all nodes for none): the matched side can
        run alone when the rewritten side's nodes are invalid."""
        nodes = self.nodes
        if outputs:
            need, keep = set(outputs), []
            for n in reversed(self.nodes):
                if need & set(n.output):
                    keep.append(n)
                    need.update(x for x in n.input if x)
            nodes = keep[::-1]
        g = helper.make_graph(
            nodes, "ruletool", self.inputs,
            [helper.make_empty_tensor_value_info(o) for o in outputs],
            initializer=list(self.inits.values()),
        )
        m = helper.make_model(
            g, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MS, 1),
                              helper.make_opsetid(NCHWC_DOMAIN, 1)], ir_version=IR_VERSION
        )
        return m

    def infer(self) -> None:
        """Shapes and types of every value, by ONNX shape inference (unknown ones stay)."""
        outs = [o for n in self.nodes for o in n.output if o and o not in self.types]
        if not outs:
            return
        m = self.model([])
        try:
            m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
        except Exception as e:  # noqa: BLE001 - an invalid node: the instantiation is rejected
            raise BuildError(str(e).splitlines()[-1][:300]) from None
        for vi in m.graph.value_info:
            tt = vi.type.tensor_type
            if not tt.HasField("shape"):
                continue
            dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
            if None in dims:
                continue
            self.types[vi.name] = (tt.elem_type, dims)

    def type_by_running(self, name: str) -> tuple[int, tuple] | None:
        """The element type and shape of a value that shape inference leaves unknown (an
        onnxruntime contrib op's output), from running the graph up to it; None if it fails."""
        try:
            arr = self.run([name])[name]
        except BuildError:
            return None
        self.types[name] = (helper.np_dtype_to_tensor_dtype(arr.dtype), tuple(arr.shape))
        return self.types[name]

    def run(self, outputs: list[str]) -> dict[str, np.ndarray]:
        """The named values, computed by onnxruntime in a child process (`runner.py`: a
        kernel that kills its process fails this instance, not the check)."""
        from eqsat.ruletool.runner import RunError
        from eqsat.ruletool.runner import run as run_isolated

        m = self.model(outputs)
        try:
            res = run_isolated(m.SerializeToString(), self.feeds)
        except RunError as e:
            msg = " ".join(str(e).split())
            # onnxruntime's cause comes last, after the place in its sources
            raise BuildError(msg if len(msg) <= 400 else msg[:120] + " ... " + msg[-280:]) from None
        return dict(zip(outputs, res, strict=True))


def _attr(spec: OpSpec, a, v, gb: GraphBuilder) -> AttributeProto | None:
    k = a.kind
    if k in ("int", "float", "str"):
        if a.default is not None and v == a.default:
            return None
        t = {"int": AttributeProto.INT, "float": AttributeProto.FLOAT, "str": AttributeProto.STRING}[k]
        return helper.make_attribute(a.name, v, attr_type=t)
    if k in ("ints", "floats"):
        if not v:
            return None
        t = AttributeProto.INTS if k == "ints" else AttributeProto.FLOATS
        return helper.make_attribute(a.name, list(v), attr_type=t)
    if k == "dtype":
        return helper.make_attribute(a.name, dtype_code(v), attr_type=AttributeProto.INT)
    if k in ("int?", "float?"):
        if v.ctor in ("NoInt", "NoFloat"):
            return None
        t = AttributeProto.INT if k == "int?" else AttributeProto.FLOAT
        return helper.make_attribute(a.name, v.args[0], attr_type=t)
    if k == "tensor":
        if v == "":
            return None
        if v not in gb.consts:
            raise BuildError(f"{spec.ctor}.{a.name} needs a constant tensor")
        return helper.make_attribute(a.name, numpy_helper.from_array(gb.consts[v], ""), attr_type=AttributeProto.TENSOR)
    raise BuildError(f"{spec.ctor}: attribute kind {k} is not supported by the checker")
