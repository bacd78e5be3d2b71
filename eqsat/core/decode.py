"""An extraction (one e-node per e-class) -> an ONNX model.

The graph's inputs and outputs keep their names, order and types; the opset imports,
metadata, doc strings, IR version and model-local functions are copied from the input
model. Values keep an original name where their e-class holds an original value; nodes are
written children first, so the order is topological. Constants become initializers
(deduplicated by content), or Constant nodes for IR versions before 4, where every
initializer must also be a graph input. A typed op is written in the form of the model's
opset (inputs that older opsets took as attributes become attributes again).
"""

from __future__ import annotations

from collections.abc import Mapping, Set

import numpy as np
import onnx
from onnx import (
    AttributeProto,
    GraphProto,
    ModelProto,
    NodeProto,
    TensorProto,
    helper,
    numpy_helper,
)

from eqsat.core.randomness import INSTANCE_ATTR
from eqsat.core.store import ProtoStore, TensorStore, tensor_key
from eqsat.errors import OptimizeError
from eqsat.extract import EGraph
from eqsat.io.modelio import model_shell
from eqsat.lang.dtypes import CTOR_TO_CODE, np_dtype
from eqsat.lang.literals import parse_bool, parse_float, parse_int, parse_string
from eqsat.lang.ops import BY_CTOR, LITERAL_CTORS, Attr, OpSpec


def all_names(g: GraphProto, out: set[str] | None = None) -> set[str]:
    """Every value name defined or used in a graph and its subgraphs."""
    return _names(g, set() if out is None else out, uses=True)


def defined_names(g: GraphProto, out: set[str] | None = None) -> set[str]:
    """Every value name that a graph or a subgraph in it defines (inputs, initializers,
    node outputs), not the names it reads from enclosing scopes."""
    return _names(g, set() if out is None else out, uses=False)


def _names(g: GraphProto, out: set[str], uses: bool) -> set[str]:
    out.update(i.name for i in g.input)
    out.update(t.name for t in g.initializer)
    out.update(t.values.name for t in g.sparse_initializer)
    if uses:
        out.update(o.name for o in g.output)
    for n in g.node:
        out.update(n.output)
        if uses:
            out.update(n.input)
        for a in n.attribute:
            if a.type == AttributeProto.GRAPH:
                _names(a.g, out, uses)
            elif a.type == AttributeProto.GRAPHS:
                for sub in a.graphs:
                    _names(sub, out, uses)
    out.discard("")
    return out


def rename_outer(g: GraphProto, mapping: Mapping[str, str]) -> GraphProto:
    """A copy of subgraph `g` whose references to enclosing-scope names follow `mapping`."""
    g2 = GraphProto()
    g2.CopyFrom(g)
    _rename_in_place(g2, dict(mapping))
    return g2


def _rename_in_place(g: GraphProto, mapping: dict[str, str]) -> None:
    local = {i.name for i in g.input} | {t.name for t in g.initializer}
    m = {k: v for k, v in mapping.items() if k not in local and k != v}
    for n in g.node:
        for i, name in enumerate(n.input):
            if name in m:
                n.input[i] = m[name]
        for a in n.attribute:
            subs = ([a.g] if a.type == AttributeProto.GRAPH
                    else list(a.graphs) if a.type == AttributeProto.GRAPHS else [])
            for sub in subs:
                _rename_in_place(sub, m)
        for o in n.output:
            m.pop(o, None)  # shadowed from here on (invalid in ONNX, but stay safe)
    for o in g.output:
        if o.name in m:
            # a subgraph output that is an outer value directly
            o.name = m[o.name]


class Decoder:
    def __init__(
        self,
        model: ModelProto,
        egraph: EGraph,
        choice: Mapping[str, str],
        tensors: TensorStore,
        protos: ProtoStore,
        value_names: Mapping[str, list[str]],  # e-class -> original value names, in graph order
        contradicted: Set[str] = frozenset(),  # value_info that inference contradicts: not written
    ) -> None:
        self.model = model
        self.contradicted = contradicted
        self.eg = egraph
        self.choice = choice
        self.tensors = tensors
        self.protos = protos
        self.value_names = value_names
        self.opset = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
        self.ir4 = model.ir_version >= 4
        g = model.graph
        self.input_names = [i.name for i in g.input]
        self.input_inits = {t.name for t in g.initializer} & set(self.input_names)
        self.taken: set[str] = set(self.input_names) | {o.name for o in g.output}
        for n in g.node:  # names that subgraphs define (those they read from here keep theirs)
            for a in n.attribute:
                for sub in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)):
                    defined_names(sub, self.taken)
        self.orig_by_output = {o: n for n in g.node for o in n.output if o}
        self.node_names: set[str] = {n.name for n in g.node if n.name}
        self.used_node_names: set[str] = set()
        self.nodes: list[NodeProto] = []
        self.inits: dict[str, TensorProto] = {}  # name -> tensor
        self.const_name: dict[str, str] = {}  # content key -> initializer name
        self.value: dict[str, str] = {}  # Op e-class -> value name
        self.tuple_outputs: dict[str, list[str]] = {}  # tuple e-class -> output names
        self.claimed: dict[str, str] = {}  # e-class -> graph output name it must produce
        self.instances: dict[str, str] = {}  # a random node's tag -> its first output's name here
        self.domains_used: set[str] = set()
        self._fresh = 0

    # ---- reading data e-classes
    def node(self, eclass: str):
        return self.eg.nodes[self.choice[eclass]]

    def lit(self, eclass: str):
        n = self.node(eclass)
        t = self.eg.class_type(eclass)
        if t == "i64":
            return parse_int(n.op)
        if t == "f64":
            return parse_float(n.op)
        if t == "String":
            return parse_string(n.op)
        if t == "bool":
            return parse_bool(n.op)
        raise OptimizeError(f"unexpected literal of sort {t!r} in e-class {eclass}")

    def vec(self, eclass: str) -> list:
        n = self.node(eclass)
        if n.op == "vec-empty":
            return []
        if n.op != "vec-of":
            raise OptimizeError(f"expected a vector in e-class {eclass}, got {n.op}")
        return [self.lit(c) for c in n.children]

    def oplist(self, eclass: str) -> list[str]:
        out = []
        n = self.node(eclass)
        while n.op == "Cons":
            out.append(n.children[0])
            n = self.node(n.children[1])
        if n.op != "Nil":
            raise OptimizeError(f"expected an OpList in e-class {eclass}, got {n.op}")
        return out

    def dtype(self, eclass: str) -> int:
        n = self.node(eclass)
        if n.op == "DTypeCode":
            return self.lit(n.children[0])
        return CTOR_TO_CODE[n.op]

    def optint(self, eclass: str) -> int | None:
        n = self.node(eclass)
        return None if n.op == "NoInt" else self.lit(n.children[0])

    def optfloat(self, eclass: str) -> float | None:
        n = self.node(eclass)
        return None if n.op == "NoFloat" else self.lit(n.children[0])

    # ---- names
    def fresh(self, hint: str = "v") -> str:
        while True:
            self._fresh += 1
            name = f"{hint}__{self._fresh}"
            if name not in self.taken:
                self.taken.add(name)
                return name

    def name_for(self, eclass: str) -> str:
        if eclass in self.claimed:
            return self.claimed[eclass]
        for n in self.value_names.get(eclass, ()):
            if n not in self.taken:
                self.taken.add(n)
                return n
        return self.fresh()

    def _node_name(self, op_type: str, orig: NodeProto | None) -> str:
        if orig is not None and orig.name and orig.name not in self.used_node_names:
            self.used_node_names.add(orig.name)
            return orig.name
        k = len(self.nodes)
        while True:
            name = f"{op_type}_{k}"
            if name not in self.used_node_names and name not in self.node_names:
                self.used_node_names.add(name)
                return name
            k += 1

    # ---- constants
    def constant_tensor(self, eclass: str) -> tuple[str, TensorProto]:
        """(content key, tensor) of a constant e-class."""
        n = self.node(eclass)
        if n.op == "Const":
            key = self.lit(n.children[0])
            return key, self.tensors.proto(key)
        if n.op == "Ints":
            arr = np.array(self.vec(n.children[0]), dtype=np.int64)
        elif n.op in ("ScalarF", "ScalarI"):
            v = self.lit(n.children[0])
            code = self.dtype(n.children[1])
            shape = self.vec(n.children[2])
            arr = np.array(v).astype(np_dtype(code)).reshape(shape)
        else:
            raise OptimizeError(f"expected a constant in e-class {eclass}, got {n.op}")
        t = numpy_helper.from_array(arr)
        return tensor_key(t), t

    def emit_constant(self, eclass: str) -> str:
        if not self.ir4:  # IR < 4: an initializer listed as a graph input is kept as it was
            for name in self.value_names.get(eclass, ()):
                if name in self.input_inits and eclass not in self.claimed:
                    return name
        key, t = self.constant_tensor(eclass)
        if eclass in self.claimed:  # a graph output that is a constant
            name = self.claimed[eclass]
            self._emit(helper.make_node("Constant", [], [name], value=_renamed(t, "")), "Constant")
            return name
        if key in self.const_name:
            return self.const_name[key]
        name = self.name_for(eclass)
        self.const_name[key] = name
        if self.ir4:
            self.inits[name] = _renamed(t, name)
        else:
            self._emit(helper.make_node("Constant", [], [name], value=_renamed(t, "")), "Constant")
        return name

    # ---- emission
    def _emit(self, node: NodeProto, op_type: str) -> None:
        """Append a node; one that computes an original node's first output with the same op
        keeps that node's name, doc string and metadata."""
        orig = self.orig_by_output.get(node.output[0]) if node.output else None
        if orig is not None and orig.op_type != op_type:
            orig = None
        node.name = self._node_name(op_type, orig)
        if orig is not None:
            node.doc_string = orig.doc_string
            node.metadata_props.extend(orig.metadata_props)
        self.nodes.append(node)

    def value_of(self, eclass: str) -> str:
        """The ONNX value name of an Op e-class, emitting what it needs first."""
        if eclass in self.value:
            return self.value[eclass]
        stack = [eclass]
        while stack:
            c = stack[-1]
            if c in self.value:
                stack.pop()
                continue
            missing = [k for k in self._op_children(c) if k not in self.value]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            self.value[c] = self._emit_class(c)
        return self.value[eclass]

    def _op_children(self, eclass: str) -> list[str]:
        """The Op e-classes whose values a node reads as inputs or captures (constants that
        the node takes as attributes are not among them)."""
        n = self.node(eclass)
        if n.op in LITERAL_CTORS or n.op in ("Input", "Absent"):
            return []
        if n.op == "Out":
            return [n.children[0]]
        if n.op == "Opaque":
            return self.oplist(n.children[2]) + self.oplist(n.children[4])
        spec = BY_CTOR.get(n.op)
        if spec is None:
            return []  # reported by _emit_class
        legacy = self._legacy(spec)
        out = []
        for inp, c in zip(spec.inputs, n.children, strict=False):
            if inp.rstrip("?*") in legacy:
                continue
            out.extend(self.oplist(c) if inp.endswith("*") else [c])
        if spec.captures:
            out.extend(self.oplist(n.children[len(spec.inputs) + len(spec.attrs)]))
        return out

    def _legacy(self, spec: OpSpec) -> dict:
        """The spec's inputs that the model's opset takes as attributes."""
        if not spec.legacy:
            return {}
        since = self._since(spec)
        return {name: li for name, li in spec.legacy.items() if since < li.until}

    def _since(self, spec: OpSpec) -> int:
        if spec.contrib:  # onnxruntime's ops: version 1 of their domain
            self.opset.setdefault(spec.domain, 1)
            return 1
        version = self.opset.get(spec.domain)
        if version is None:
            if not spec.domain:
                raise OptimizeError("the model imports no default-domain opset")
            version = self.opset[spec.domain] = 1
        try:
            return onnx.defs.get_schema(spec.onnx_type, version, spec.domain).since_version
        except Exception:  # noqa: BLE001 - no such op at this opset
            raise OptimizeError(
                f"{spec.onnx_type} does not exist at opset {version} of domain '{spec.domain}'; "
                "a rule produced an op that the model's opset lacks"
            ) from None

    def _emit_class(self, eclass: str) -> str:
        n = self.node(eclass)
        op = n.op
        if op == "Input":
            return self.lit(n.children[0])
        if op == "Absent":
            return ""
        if op in LITERAL_CTORS:
            return self.emit_constant(eclass)
        if op == "Out":
            tup, k = n.children
            if tup not in self.tuple_outputs:  # its chosen node is no node with outputs to number
                raise OptimizeError(
                    f"the extracted program reads output {self.lit(k)} of a value ({self.node(tup).op}) with no "
                    "numbered outputs: a rule united an op of several outputs (Opaque, Split, ...) with a single "
                    "value; rewrite its output instead, (Out op k)")
            return self.tuple_outputs[tup][self.lit(k)]
        if op == "Opaque":
            return self._emit_opaque(eclass)
        spec = BY_CTOR.get(op)
        if spec is None:
            raise OptimizeError(
                f"the extracted program uses constructor {op}, which has no ONNX mapping; "
                "a rule must only build ops of the op language (rules/lang.egg)"
            )
        return self._emit_typed(eclass, spec)

    def _tuple_names(self, eclass: str, n_out: int, op_type: str, domain: str, spec: OpSpec | None = None) -> list[str]:
        """Output names of a node with several outputs: one per used (Out c k); an unused
        output is left out ("") where it is optional, else gets a fresh name."""
        names = [""] * n_out
        used = self.out_users.get(eclass, {})
        for k in range(n_out):
            if k in used:
                names[k] = self.name_for(used[k])
        if spec is not None and spec.outputs:
            optional = [o.endswith("?") for o in spec.outputs]
            variadic = False
        else:
            try:
                formal = list(onnx.defs.get_schema(op_type, self.opset.get(domain, 1), domain).outputs)
            except Exception:  # noqa: BLE001 - custom op: every output gets a name
                formal = []
            opt = onnx.defs.OpSchema.FormalParameterOption
            optional = [f.option == opt.Optional for f in formal]
            variadic = bool(formal) and formal[-1].option == opt.Variadic
        for k in range(n_out):
            if not names[k] and (k >= len(optional) or not optional[k] or variadic):
                names[k] = self.fresh()
        while names and names[-1] == "":
            names.pop()
        return names

    def _emit_opaque(self, eclass: str) -> str:
        n = self.node(eclass)
        domain_c, op_c, inputs_c, attrs_c, caps_c, nout_c = n.children
        domain, op_type = self.lit(domain_c), self.lit(op_c)
        inputs = [self.value[c] for c in self.oplist(inputs_c)]
        captures = [self.value[c] for c in self.oplist(caps_c)]
        attrs = []
        a = self.node(attrs_c)
        tag = None
        while a.op == "ACons":
            name_c, val_c, rest = a.children
            if self.lit(name_c) == INSTANCE_ATTR:  # the encoder's tag of a random node
                tag = self.lit(self.node(val_c).children[0])
            else:
                attrs.append(self._attr_from_val(self.lit(name_c), val_c))
            a = self.node(rest)
        attrs = self._rename_captures(attrs, captures)
        outs = self._tuple_names(eclass, self.lit(nout_c), op_type, domain)
        if tag is not None:
            self.instances[tag] = outs[0] if outs else ""
        node = helper.make_node(op_type, inputs, outs, domain=domain or None)
        node.attribute.extend(attrs)
        self.domains_used.add(domain)
        self._emit(node, op_type)
        self.tuple_outputs[eclass] = outs
        return ""

    def _attr_from_val(self, name: str, eclass: str) -> AttributeProto:
        n = self.node(eclass)
        k = n.children[0] if n.children else None
        if n.op == "AInt":
            return helper.make_attribute(name, self.lit(k), attr_type=AttributeProto.INT)
        if n.op == "AFloat":
            return helper.make_attribute(name, self.lit(k), attr_type=AttributeProto.FLOAT)
        if n.op == "AStr":
            return helper.make_attribute(name, self.lit(k), attr_type=AttributeProto.STRING)
        if n.op == "AInts":
            return helper.make_attribute(name, self.vec(k), attr_type=AttributeProto.INTS)
        if n.op == "AFloats":
            return helper.make_attribute(name, self.vec(k), attr_type=AttributeProto.FLOATS)
        if n.op == "AStrs":
            return helper.make_attribute(name, self.vec(k), attr_type=AttributeProto.STRINGS)
        if n.op == "ATensor":
            key = self.lit(k)
            t = self.tensors.proto(key)  # an exact key's tensor keeps its name and doc string
            return helper.make_attribute(name, t if self.tensors.is_exact(key) else _renamed(t, ""),
                                         attr_type=AttributeProto.TENSOR)
        if n.op == "AGraph":
            return helper.make_attribute(name, self.protos.graphs[self.lit(k)].graph, attr_type=AttributeProto.GRAPH)
        if n.op == "ARaw":
            a = AttributeProto()
            a.CopyFrom(self.protos.attrs[self.lit(k)])
            return a
        raise OptimizeError(f"unexpected attribute value {n.op}")

    def _rename_captures(self, attrs: list[AttributeProto], captures: list[str]) -> list[AttributeProto]:
        """Point subgraph references to outer values at the names those values have now.
        Captures are listed in attribute-name order, then first use (encode.node_captures)."""
        from eqsat.core.encode import graph_outer_refs

        order: list[str] = []
        for a in sorted(attrs, key=lambda a: a.name):
            subs = ([a.g] if a.type == AttributeProto.GRAPH
                    else list(a.graphs) if a.type == AttributeProto.GRAPHS else [])
            for sub in subs:
                for r in graph_outer_refs(sub):
                    if r not in order:
                        order.append(r)
        if len(order) != len(captures):
            raise OptimizeError("a node's captures do not match its subgraphs' outer references")
        mapping = dict(zip(order, captures, strict=True))
        out = []
        for a in attrs:
            if a.type == AttributeProto.GRAPH:
                a2 = AttributeProto()
                a2.CopyFrom(a)
                a2.g.CopyFrom(rename_outer(a.g, mapping))
                out.append(a2)
            elif a.type == AttributeProto.GRAPHS:
                a2 = AttributeProto()
                a2.CopyFrom(a)
                for i, sub in enumerate(a.graphs):
                    a2.graphs[i].CopyFrom(rename_outer(sub, mapping))
                out.append(a2)
            else:
                out.append(a)
        return out

    def _emit_typed(self, eclass: str, spec: OpSpec) -> str:
        n = self.node(eclass)
        kids = list(n.children)
        self._since(spec)  # fails early when the model's opset lacks the op
        version = self.opset[spec.domain]
        if spec.contrib:
            schema_attrs = {a.name for a in spec.attrs}
        else:
            schema_attrs = set(onnx.defs.get_schema(spec.onnx_type, version, spec.domain).attributes)
        legacy = self._legacy(spec)
        inputs: list[str] = []
        attrs: list[AttributeProto] = []
        for inp in spec.inputs:
            name = inp.rstrip("?*")
            c = kids.pop(0)
            if name in legacy:
                li = legacy[name]
                if self.node(c).op == "Absent":
                    continue
                if self.node(c).op not in LITERAL_CTORS:
                    raise OptimizeError(f"{spec.onnx_type} at opset {version} needs a constant {name}")
                _, t = self.constant_tensor(c)
                arr = numpy_helper.to_array(t)
                if li.kind == "ints":
                    attrs.append(helper.make_attribute(li.attr, [int(x) for x in arr.reshape(-1)],
                                                       attr_type=AttributeProto.INTS))
                else:
                    attrs.append(helper.make_attribute(li.attr, float(arr.reshape(())), attr_type=AttributeProto.FLOAT))
                continue
            if inp.endswith("*"):
                inputs.extend(self.value[k] for k in self.oplist(c))
            else:
                inputs.append(self.value[c])
        while inputs and inputs[-1] == "":
            inputs.pop()
        captures: list[str] = []
        for a in spec.attrs:
            c = kids.pop(0)
            attr = self._typed_attr(a, c)
            if attr is None:
                continue
            if attr.name not in schema_attrs:
                raise OptimizeError(f"{spec.onnx_type} at opset {version} has no attribute {attr.name}")
            attrs.append(attr)
        if spec.captures:
            captures = [self.value[k] for k in self.oplist(kids.pop(0))]
            attrs = self._rename_captures(attrs, captures)
        self.domains_used.add(spec.domain)
        if spec.n_outputs:
            n_out = self.lit(kids.pop(0))
            outs = self._tuple_names(eclass, n_out, spec.onnx_type, spec.domain, spec)
            node = helper.make_node(spec.onnx_type, inputs, outs, domain=spec.domain or None)
            node.attribute.extend(attrs)
            self._emit(node, spec.onnx_type)
            self.tuple_outputs[eclass] = outs
            return ""
        out = self.name_for(eclass)
        node = helper.make_node(spec.onnx_type, inputs, [out], domain=spec.domain or None)
        node.attribute.extend(attrs)
        self._emit(node, spec.onnx_type)
        return out

    def _typed_attr(self, a: Attr, c: str) -> AttributeProto | None:
        """The attribute for e-class c, or None where it is absent or its default."""
        k = a.kind
        if k in ("float", "float?", "floats"):
            _check_float32(a.name, self.optfloat(c) if k == "float?" else self.vec(c) if k == "floats" else self.lit(c))
        if k in ("int", "float", "str"):
            v = self.lit(c)
            if a.default is not None and (v == a.default or (k == "float" and np.float32(v) == np.float32(a.default))):
                return None
            t = {"int": AttributeProto.INT, "float": AttributeProto.FLOAT, "str": AttributeProto.STRING}[k]
            return helper.make_attribute(a.name, v, attr_type=t)
        if k == "ints":
            v = self.vec(c)
            return helper.make_attribute(a.name, v, attr_type=AttributeProto.INTS) if v else None
        if k == "floats":
            v = self.vec(c)
            return helper.make_attribute(a.name, v, attr_type=AttributeProto.FLOATS) if v else None
        if k == "dtype":
            return helper.make_attribute(a.name, self.dtype(c), attr_type=AttributeProto.INT)
        if k == "int?":
            v = self.optint(c)
            return None if v is None else helper.make_attribute(a.name, v, attr_type=AttributeProto.INT)
        if k == "float?":
            v = self.optfloat(c)
            return None if v is None else helper.make_attribute(a.name, v, attr_type=AttributeProto.FLOAT)
        if k == "tensor":
            if self.node(c).op == "Absent":
                return None
            _, t = self.constant_tensor(c)
            return helper.make_attribute(a.name, _renamed(t, ""), attr_type=AttributeProto.TENSOR)
        if k == "graph":
            return helper.make_attribute(a.name, self.protos.graphs[self.lit(c)].graph, attr_type=AttributeProto.GRAPH)
        raise AssertionError(k)

    # ---- the model
    def decode(self, roots: list[str]) -> ModelProto:
        g = self.model.graph
        outputs = [o.name for o in g.output]
        if len(roots) != len(outputs):
            raise OptimizeError("the e-graph's roots do not match the graph outputs")
        # Which (Out c k) e-classes the extraction uses, so tuple outputs get their names.
        self.out_users: dict[str, dict[int, str]] = {}
        from eqsat.extract.check import reachable

        for c in reachable(self.eg, self.choice, roots):
            n = self.node(c)
            if n.op == "Out":
                tup, k = n.children
                self.out_users.setdefault(tup, {})[self.lit(k)] = c
        # Outputs produced by a node of this graph take the output's name directly.
        for root, name in zip(roots, outputs, strict=True):
            op = self.node(root).op
            if root not in self.claimed and op not in ("Input", "Absent"):
                self.claimed[root] = name
        for root, name in zip(roots, outputs, strict=True):
            v = self.value_of(root)
            if v != name:
                self._emit(helper.make_node("Identity", [v], [name]), "Identity")
        return self._assemble()

    def _assemble(self) -> ModelProto:
        """The output model, built field by field: every tensor is copied once, straight
        into place (a graph assembled elsewhere and copied in would copy all weights twice,
        and protobuf cannot copy more than 2 GiB at once)."""
        src = self.model
        g = src.graph
        have = {("" if o.domain == "ai.onnx" else o.domain) for o in src.opset_import}
        m = model_shell(src, {d: self.opset.get(d, 1) for d in self.domains_used - have}, full=True)
        graph = m.graph
        graph.name = g.name
        graph.doc_string = g.doc_string
        graph.node.extend(self.nodes)
        graph.input.extend(g.input)
        graph.output.extend(g.output)
        inputs = set(self.input_names)
        for t in g.initializer:  # initializers that are graph inputs stay as they were
            if t.name in inputs:
                graph.initializer.add().CopyFrom(t)
        graph.sparse_initializer.extend(s for s in g.sparse_initializer if s.values.name in inputs)
        order = {t.name: i for i, t in enumerate(g.initializer)}
        for k in sorted(self.inits, key=lambda k: order.get(k, len(order))):
            graph.initializer.add().CopyFrom(self.inits[k])
        # Types of intermediate values that kept their original name and meaning, but for
        # declarations inference contradicts (eqsat.core.shapes: they are wrong, the original's too).
        produced = {o for n in self.nodes for o in n.output}
        kept = {name for c, name in self.value.items() if name and name in self.value_names.get(c, ())}
        graph.value_info.extend(vi for vi in g.value_info
                                if vi.name in produced and vi.name in kept and vi.name not in self.contradicted)
        return m


FLOAT32_MAX = float(np.finfo(np.float32).max)


def _float32(v: float) -> np.float32:
    with np.errstate(over="ignore"):
        return np.float32(v)


def _check_float32(name: str, value) -> None:
    """A float attribute is a float32: a value a rule computed in f64 beyond its range would
    be written as an infinity (1e30 * 1e30 as a scale). Raises rather than write that."""
    for v in value if isinstance(value, list) else [value]:
        if v is not None and np.isfinite(v) and abs(v) > FLOAT32_MAX and np.isinf(_float32(v)):
            raise OptimizeError(f"attribute {name} = {v!r} has no float32 value (it would be written as an infinity)")


def _renamed(t: TensorProto, name: str) -> TensorProto:
    if t.name == name:
        return t
    t2 = TensorProto()
    t2.CopyFrom(t)
    t2.name = name
    return t2
