"""ONNX graph -> egglog actions that build one term per value.

The actions are sent as one batch (`Saturator.run_batch`: one one-shot rule), in which
every value of the main graph is a local `let` name `vK` bound to its term, and its e-class
also holds the handle `(Value N)` by which later batches and the serializer find it (its
number N in `Encoded.value_id`). A command per value, with an egglog global each, made
loading quadratic (each command cost time in proportion to the globals before it:
benchmarks/results/scaling.md). The shape
and dtype of every value whose type is known are set with the `shape` and `dtype` functions. Nodes
that the op language types (eqsat.lang.ops) become their constructor; any other node is
carried as `Opaque` with its attributes, and a node with subgraphs lists the outer values
those subgraphs read (its captures) so that the decoder can rename them.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, numpy_helper

from eqsat.core.initializers import fixed_initializers
from eqsat.core.randomness import INSTANCE_ATTR, RandomNodes
from eqsat.core.scopes import graph_outer_refs, implicit_inputs, subgraphs
from eqsat.core.shapes import DimTable, ValueType
from eqsat.core.store import ProtoStore, TensorStore
from eqsat.errors import InvalidModelError
from eqsat.lang import terms as T
from eqsat.lang.dtypes import FLOAT_CODES, INT_CODES
from eqsat.lang.ops import Attr, OpSpec, spec_for

INTS_LITERAL_MAX = 64  # 1-D int64 constants up to this length become (Ints ...) literals

_ATTR_TYPE = {
    "int": AttributeProto.INT,
    "float": AttributeProto.FLOAT,
    "str": AttributeProto.STRING,
    "ints": AttributeProto.INTS,
    "floats": AttributeProto.FLOATS,
    "dtype": AttributeProto.INT,
    "int?": AttributeProto.INT,
    "float?": AttributeProto.FLOAT,
    "tensor": AttributeProto.TENSOR,
    "graph": AttributeProto.GRAPH,
}


class NotTyped(Exception):
    """A node that its spec cannot express; it is carried as Opaque. The message says why."""


def plain_float(v: float) -> bool:
    """egglog merges -0.0 with 0.0 and all NaNs, so only other floats go in as literals."""
    return not (math.isnan(v) or (v == 0.0 and math.copysign(1.0, v) < 0))


def node_captures(node: NodeProto) -> list[str]:
    """Outer-scope names read by all subgraphs of a node, attributes in name order."""
    return implicit_inputs(node, by_name=True)


def constant_term(t: TensorProto, store: TensorStore):
    """The term for a constant tensor: a literal when small, else a store reference."""
    dims = tuple(int(d) for d in t.dims)
    numel = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if t.data_type == TensorProto.INT64 and len(dims) == 1 and numel <= INTS_LITERAL_MAX:
        return T.call("Ints", T.ivec(numpy_helper.to_array(t).tolist()))
    if numel == 1 and t.data_type in FLOAT_CODES:
        v = float(numpy_helper.to_array(t).reshape(()))
        if plain_float(v):
            return T.call("ScalarF", T.f64(v), T.dtype(t.data_type), T.ivec(dims))
    if numel == 1 and t.data_type in INT_CODES:
        v = int(numpy_helper.to_array(t).reshape(()))
        if -(2**63) <= v < 2**63:
            return T.call("ScalarI", T.i64(v), T.dtype(t.data_type), T.ivec(dims))
    return T.call("Const", T.string(store.add(t)))


UNIFORM_CHECK_MAX = 1 << 24  # elements: larger constants are not checked for one repeated value


def uniform_facts(t: TensorProto, term) -> list:
    """Facts that a stored constant is uniform, for rules that simplify with it (rules/lang.egg):
    (splat-f term x) for a float tensor whose elements all equal the finite x, (all-true term)
    for a bool tensor of trues, (int-range term lo hi) for an 8- to 32-bit integer tensor
    (its smallest and largest element), (float-range term lo hi) for a finite float tensor of
    up to FLOAT_RANGE_MAX elements. Empty for other tensors, empty ones and larger than
    UNIFORM_CHECK_MAX elements."""
    numel = int(np.prod(t.dims, dtype=np.int64)) if t.dims else 1
    if numel == 0 or numel > UNIFORM_CHECK_MAX or t.data_location == TensorProto.EXTERNAL:
        return []
    if t.data_type in SMALL_INT_CODES:
        return _int_range_facts(t, term)
    if t.data_type != TensorProto.BOOL and t.data_type not in FLOAT_CODES:
        return []
    if t.HasField("raw_data") and t.data_type in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16,
                                                   TensorProto.BOOL):
        # a view of the bytes (read once: each read of raw_data copies them), not a converted
        # array: most weights differ in their first and last element
        a = np.frombuffer(t.raw_data, dtype=onnx.helper.tensor_dtype_to_np_dtype(t.data_type).newbyteorder("<"))
    else:
        a = numpy_helper.to_array(t).reshape(-1)
    if a.size != numel:
        return []
    facts = _float_range_facts(a, term) if t.data_type != TensorProto.BOOL and numel <= FLOAT_RANGE_MAX else []
    if a[0] != a[-1] or not bool((a == a[0]).all()):
        return facts
    if t.data_type == TensorProto.BOOL:
        return [T.fact("all-true", term)] if bool(a[0]) else []
    v = float(a[0])
    if not (T.is_finite(v) and plain_float(v)):
        return facts
    return [*facts, T.fact("splat-f", term, T.f64(v))]


# Float constants up to this many elements get (float-range term lo hi): scales and zero points,
# not weights (rules/qdq.egg asks it of a DequantizeLinear's scale)
FLOAT_RANGE_MAX = 1 << 16


def _float_range_facts(a: np.ndarray, term) -> list:
    """(float-range term lo hi): the smallest and largest element of a float tensor whose
    elements are all finite (none for one with an inf or a NaN)."""
    a = np.asarray(a, np.float64)
    if not bool(np.isfinite(a).all()):
        return []
    return [T.fact("float-range", term, T.f64(float(a.min()) + 0.0), T.f64(float(a.max()) + 0.0))]


# Integer types whose stored constants get (int-range term lo hi): the 8- to 32-bit ones that
# quantized models hold (weights, zero points, biases; rules/qdq.egg).
SMALL_INT_CODES = frozenset({TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16,
                             TensorProto.INT32})


def _int_range_facts(t: TensorProto, term) -> list:
    """(int-range term lo hi): the smallest and largest element of an integer tensor."""
    a = numpy_helper.to_array(t)
    return [T.fact("int-range", term, T.i64(int(a.min())), T.i64(int(a.max())))]


def constant_node_tensor(node: NodeProto) -> TensorProto | None:
    """The tensor a Constant node produces, or None for a sparse constant."""
    if len(node.attribute) != 1:
        raise NotTyped("Constant with several attributes")
    a = node.attribute[0]
    v = onnx.helper.get_attribute_value(a)
    if a.name == "value":
        return v
    if a.name == "sparse_value":
        return None
    if a.name == "value_float":
        return numpy_helper.from_array(np.array(v, np.float32))
    if a.name == "value_floats":
        return numpy_helper.from_array(np.array(v, np.float32))
    if a.name == "value_int":
        return numpy_helper.from_array(np.array(v, np.int64))
    if a.name == "value_ints":
        return numpy_helper.from_array(np.array(v, np.int64))
    if a.name == "value_string":
        return onnx.helper.make_tensor("", TensorProto.STRING, [], [v])
    if a.name == "value_strings":
        return onnx.helper.make_tensor("", TensorProto.STRING, [len(v)], list(v))
    raise NotTyped(f"Constant attribute {a.name}")


@dataclass
class Encoded:
    commands: list
    value_id: dict[str, int]  # ONNX value name -> N: its e-class is (value N)
    outputs: list[str]
    opaque: Counter = field(default_factory=Counter)  # "op_type: reason" -> count
    n_nodes: int = 0
    instances: dict[str, str] = field(default_factory=dict)  # random nodes: tag -> first output name


class Encoder:
    def __init__(
        self,
        model: ModelProto,
        types: dict[str, ValueType],
        tensors: TensorStore,
        protos: ProtoStore,
        dims: DimTable,
        prefix: str = "v",
    ) -> None:
        self.model = model
        self.prefix = prefix
        self.types = types
        self.tensors = tensors
        self.protos = protos
        self.dims = dims
        self.opset = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
        self.cmds: list = []
        self.var: dict[str, str] = {}
        self.opaque: Counter = Counter()
        self.random = RandomNodes(model)
        self.instances: dict[str, str] = {}  # a random node's tag -> its first output's name
        self._n = 0
        self._instances = 0

    # ---- names (local to the batch that loads the model: Saturator.run_batch)
    def _bind(self, expr) -> str:
        name = f"{self.prefix}{self._n}"
        self._n += 1
        self.cmds.append(T.let(name, expr))
        return name

    def _ref(self, value: str):
        if value == "":
            return T.call("Absent")
        if value not in self.var:
            raise InvalidModelError(f"value '{value}' is used before it is defined (or never defined)")
        return T.var(self.var[value])

    def _define(self, value: str, expr) -> None:
        if value in self.var:
            raise InvalidModelError(f"value '{value}' is defined twice")
        self.var[value] = self._bind(expr)

    def _define_constant(self, value: str, t: TensorProto) -> None:
        """_define for a constant tensor, with its uniform_facts."""
        self._define(value, constant_term(t, self.tensors))
        self.cmds.extend(uniform_facts(t, T.var(self.var[value])))

    # ---- model
    def encode(self) -> Encoded:
        g = self.model.graph
        # An initializer a caller may override is an Input, never folded (eqsat.core.initializers).
        inits = fixed_initializers(self.model)
        inputs = {i.name for i in g.input}
        for i in g.input:
            if i.name in inits:
                self._define_constant(i.name, inits[i.name])
            else:
                self._define(i.name, T.call("Input", T.string(i.name)))
        for t in g.initializer:
            if t.name not in inputs:
                self._define_constant(t.name, t)
        for st in g.sparse_initializer:
            if st.values.name not in inputs:
                raise InvalidModelError(
                    f"sparse initializer '{st.values.name}' is not supported; "
                    "convert it to a dense initializer first"
                )
        used = self._used_names(g)
        for node in _topological(g):
            self._node(node, used)
        uses = self._uses(g)
        ids: dict[str, int] = {}
        for value in self.var:
            self._set_type(value)
            self.cmds.append(T.set_fn("uses", [T.var(self.var[value])], T.i64(uses.get(value, 0))))
            ids[value] = len(ids)
            self.cmds.append(T.union(T.value(ids[value]), T.var(self.var[value])))
        for o in g.output:
            if o.name not in self.var:
                raise InvalidModelError(f"graph output '{o.name}' is not produced by any node or input")
        return Encoded(self.cmds, ids, [o.name for o in g.output], self.opaque, len(g.node), self.instances)

    def encode_subgraph(self, g: GraphProto, env: dict[str, object]) -> list:
        """Terms for the outputs of subgraph `g`, whose outer references are the
        expressions in `env` (by name). Used to inline the taken branch of an If."""
        saved, self.var = self.var, {}
        try:
            for name, expr in env.items():
                self.var[name] = self._bind(expr)
            for t in g.initializer:
                self.var[t.name] = self._bind(constant_term(t, self.tensors))
            used = self._used_names(g)
            for node in _topological(g):
                self._node(node, used)
            return [T.var(self.var[o.name]) for o in g.output]
        finally:
            self.var = saved

    @staticmethod
    def _uses(g: GraphProto) -> Counter:
        """(uses v) for rules/qdq.egg: how many times the input model reads each value, as
        onnxruntime counts a node's output edges: once per node input that names it (a node
        that reads it twice counts twice), once per node whose subgraphs read it, and once
        for being a graph output. Set for every value of the main graph; the function's merge
        adds (rules/lang.egg), so values that the e-graph finds equal count their uses together."""
        uses: Counter = Counter(o.name for o in g.output)
        for node in g.node:
            uses.update(v for v in node.input if v)
            uses.update(node_captures(node))
        return uses

    @staticmethod
    def _used_names(g: GraphProto) -> set[str]:
        used = {o.name for o in g.output}
        for node in g.node:
            used.update(node.input)
            for a in node.attribute:
                for sub in subgraphs(a):
                    used.update(graph_outer_refs(sub))
        return used

    def _set_type(self, value: str) -> None:
        t = self.types.get(value)
        if t is None:
            return
        v = T.var(self.var[value])
        if t.elem:
            self.cmds.append(T.set_fn("dtype", [v], T.dtype(t.elem)))
        if t.dims is not None:
            self.cmds.append(T.set_fn("shape", [v], T.ivec(self.dims.encode(t.dims))))

    # ---- nodes
    def _node(self, node: NodeProto, used: set[str]) -> None:
        domain = "" if node.domain == "ai.onnx" else node.domain
        if self.random.why(node):  # its own e-class, whatever it has in common with another
            self._opaque(node, instance=True)
            return
        if domain == "" and node.op_type == "Constant":
            try:
                tensor = constant_node_tensor(node)
            except NotTyped:
                tensor = None
            if tensor is not None:
                self._define_constant(node.output[0], tensor)
                return
        spec = spec_for(domain, node.op_type)
        if spec is not None:
            try:
                self._typed(node, spec, used)
                return
            except NotTyped as why:
                self.opaque[f"{node.op_type}: {why}"] += 1
        self._opaque(node)

    def _since_version(self, node: NodeProto) -> int | None:
        domain = "" if node.domain == "ai.onnx" else node.domain
        version = self.opset.get(domain)
        if version is None:
            return None
        try:
            return onnx.defs.get_schema(node.op_type, version, domain).since_version
        except Exception:  # noqa: BLE001 - unknown op or version: carried opaque
            return None

    def _typed(self, node: NodeProto, spec: OpSpec, used: set[str]) -> None:
        if spec.contrib:
            since = 1 if spec.domain in self.opset or not spec.domain else None
        else:
            since = self._since_version(node)
        if since is None:
            raise NotTyped("no ONNX schema for this opset")
        if since < spec.min_version:
            raise NotTyped(f"version {since} < {spec.min_version}")
        if not spec.n_outputs and any(o and o in used for o in node.output[1:]):
            raise NotTyped("uses an optional output")
        legacy = {name: li for name, li in spec.legacy.items() if since < li.until}
        legacy_attrs = {li.attr: name for name, li in legacy.items()}
        attrs = {a.name: a for a in node.attribute}
        by_name = {a.name: a for a in spec.attrs}
        for name, a in attrs.items():
            if name in legacy_attrs:
                continue
            want = by_name.get(name)
            if want is None:
                raise NotTyped(f"attribute {name}")
            if a.type != _ATTR_TYPE[want.kind] or a.ref_attr_name:
                raise NotTyped(f"attribute {name} of type {a.type}")

        args = []
        actual = list(node.input)
        pos = 0
        for inp in spec.inputs:
            name = inp.rstrip("?*")
            if name in legacy:
                args.append(self._legacy_input(node, legacy[name], attrs.get(legacy[name].attr)))
                continue
            if inp.endswith("*"):
                args.append(T.oplist([self._ref(v) for v in actual[pos:]]))
                pos = len(actual)
                continue
            value = actual[pos] if pos < len(actual) else ""
            pos += 1
            if value == "" and not inp.endswith("?"):
                raise NotTyped(f"missing input {name}")
            args.append(self._ref(value))
        if pos < len(actual):
            raise NotTyped("more inputs than the op language expects")

        for a in spec.attrs:
            args.append(self._attr_arg(a, attrs.get(a.name)))
        if spec.captures:
            args.append(T.oplist([self._ref(c) for c in node_captures(node)]))
        if spec.n_outputs:
            args.append(T.i64(len(node.output)))

        term = T.call(spec.ctor, *args)
        if spec.n_outputs:
            self._define_outputs(node, term)
        else:
            self._define(node.output[0], term)

    def _legacy_input(self, node: NodeProto, li, a: AttributeProto | None):
        if a is None:
            return T.call("Absent")
        if li.kind == "ints":
            return T.call("Ints", T.ivec(a.ints))
        # a float attribute that became a scalar input of the data's type
        t = self.types.get(node.input[0])
        if t is None or t.elem not in FLOAT_CODES:
            raise NotTyped(f"attribute {li.attr} needs the input's float type")
        if not plain_float(a.f):
            raise NotTyped(f"attribute {li.attr} is -0.0 or NaN")
        return T.call("ScalarF", T.f64(a.f), T.dtype(t.elem), T.ivec([]))

    def _attr_arg(self, spec: Attr, a: AttributeProto | None):
        k = spec.kind
        if k == "int":
            if a is None and spec.default is None:
                raise NotTyped(f"required attribute {spec.name} missing")
            return T.i64(a.i if a is not None else spec.default)
        if k == "float":
            if a is None and spec.default is None:
                raise NotTyped(f"required attribute {spec.name} missing")
            v = float(np.float32(a.f if a is not None else spec.default))
            if not plain_float(v):
                raise NotTyped(f"attribute {spec.name} is -0.0 or NaN")
            return T.f64(v)
        if k == "str":
            if a is None and spec.default is None:
                raise NotTyped(f"required attribute {spec.name} missing")
            try:
                return T.string(a.s.decode("utf-8") if a is not None else spec.default)
            except UnicodeDecodeError:
                raise NotTyped(f"attribute {spec.name} is not UTF-8") from None
        if k == "ints":
            return T.ivec(a.ints if a is not None else [])
        if k == "floats":
            vals = [float(v) for v in (a.floats if a is not None else [])]
            if not all(plain_float(v) for v in vals):
                raise NotTyped(f"attribute {spec.name} holds -0.0 or NaN")
            return T.fvec(vals)
        if k == "dtype":
            if a is None:
                raise NotTyped(f"required attribute {spec.name} missing")
            return T.dtype(a.i)
        if k == "int?":
            return T.opt_int(a.i if a is not None else None)
        if k == "float?":
            if a is not None and not plain_float(a.f):
                raise NotTyped(f"attribute {spec.name} is -0.0 or NaN")
            return T.opt_float(a.f if a is not None else None)
        if k == "tensor":
            return T.call("Absent") if a is None else constant_term(a.t, self.tensors)
        if k == "graph":
            if a is None:
                raise NotTyped(f"required attribute {spec.name} missing")
            return T.string(self.protos.add_graph(a.g, graph_outer_refs(a.g)))
        raise AssertionError(k)

    def _define_outputs(self, node: NodeProto, term) -> None:
        var = self._bind(term)
        for k, o in enumerate(node.output):
            if o:
                self._define(o, T.call("Out", T.var(var), T.i64(k)))

    def _opaque(self, node: NodeProto, instance: bool = False) -> None:
        """`node` as an Opaque term; `instance` tags it with its own number (a random node:
        eqsat.core.randomness), so that no other node is ever the same term."""
        attrs = T.call("ANil")
        if instance:
            self._instances += 1
            tag = f"{self.prefix}{self._instances}"  # prefixes differ per batch
            self.instances[tag] = node.output[0] if node.output else ""
            attrs = T.call("ACons", T.string(INSTANCE_ATTR), T.call("AStr", T.string(tag)), attrs)
        for a in sorted(node.attribute, key=lambda a: a.name, reverse=True):
            attrs = T.call("ACons", T.string(a.name), self._attr_val(a), attrs)
        term = T.call(
            "Opaque",
            T.string(node.domain),
            T.string(node.op_type),
            T.oplist([self._ref(v) for v in node.input]),
            attrs,
            T.oplist([self._ref(c) for c in node_captures(node)]),
            T.i64(len(node.output)),
        )
        self._define_outputs(node, term)

    def _attr_val(self, a: AttributeProto):
        if a.ref_attr_name or a.doc_string:  # kept whole: the decoder rebuilds neither
            return T.call("ARaw", T.string(self.protos.add_attr(a)))
        try:
            if a.type == AttributeProto.INT:
                return T.call("AInt", T.i64(a.i))
            if a.type == AttributeProto.FLOAT and plain_float(a.f):
                return T.call("AFloat", T.f64(a.f))
            if a.type == AttributeProto.STRING:
                return T.call("AStr", T.string(a.s.decode("utf-8")))
            if a.type == AttributeProto.INTS:
                return T.call("AInts", T.ivec(a.ints))
            if a.type == AttributeProto.FLOATS and all(plain_float(v) for v in a.floats):
                return T.call("AFloats", T.fvec(a.floats))
            if a.type == AttributeProto.STRINGS:
                return T.call("AStrs", T.svec([s.decode("utf-8") for s in a.strings]))
        except UnicodeDecodeError:
            pass
        if a.type == AttributeProto.TENSOR:  # exact: the tensor's name and doc string come back
            return T.call("ATensor", T.string(self.tensors.add_exact(a.t)))
        if a.type == AttributeProto.GRAPH:
            return T.call("AGraph", T.string(self.protos.add_graph(a.g, graph_outer_refs(a.g))))
        return T.call("ARaw", T.string(self.protos.add_attr(a)))


def _topological(g: GraphProto) -> list[NodeProto]:
    """The graph's nodes in a valid order: the stored order when it is one (ONNX requires
    it), else a stable topological sort. A cycle is an invalid model."""
    defined = {i.name for i in g.input} | {t.name for t in g.initializer}
    defined |= {t.values.name for t in g.sparse_initializer}
    ok = True
    avail = set(defined)
    for node in g.node:
        if any(i and i not in avail for i in node.input):
            ok = False
            break
        avail.update(node.output)
    if ok:
        return list(g.node)
    producer = {o: k for k, n in enumerate(g.node) for o in n.output if o}
    order: list[NodeProto] = []
    state = [0] * len(g.node)  # 0 new, 1 on stack, 2 done
    for root in range(len(g.node)):
        stack = [(root, 0)]
        while stack:
            k, i = stack.pop()
            if i == 0:
                if state[k] == 2:
                    continue
                state[k] = 1
            deps = [producer[x] for x in g.node[k].input if x in producer]
            if i < len(deps):
                stack.append((k, i + 1))
                d = deps[i]
                if state[d] == 1:
                    raise InvalidModelError(f"the graph has a cycle through node '{g.node[d].name}'")
                if state[d] == 0:
                    stack.append((d, 0))
            else:
                state[k] = 2
                order.append(g.node[k])
    return order
