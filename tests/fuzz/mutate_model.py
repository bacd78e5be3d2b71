"""Mutators of model files: a valid drawn model (strategies.cases) spoiled as bytes
(flips, truncation, insertion, deletion, junk) or as a protobuf message (wrong dims,
missing fields, bad element type codes, duplicate and dangling names, attributes of the
wrong type, cycles, broken subgraphs, opsets and IR versions out of range, initializers
whose data does not match their type).

Each strategy gives (data: bytes, what: str); `what` names the mutation for the report.
A mutation may leave the model valid: the property then holds eqsat to a correct output.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import AttributeProto, TensorProto

from .strategies import cases


@st.composite
def corrupt_bytes(draw) -> tuple[bytes, str]:
    data = bytearray(draw(cases()).model.SerializeToString())
    kind = draw(st.sampled_from(["flip", "flip", "truncate", "insert", "delete", "junk", "empty-ish", "prefix"]))
    n = len(data)
    if kind == "flip":
        k = draw(st.integers(1, 4))
        for _ in range(k):
            i = draw(st.integers(0, n - 1))
            data[i] ^= draw(st.integers(1, 255))
        return bytes(data), f"{k} bytes flipped"
    if kind == "truncate":
        i = draw(st.integers(1, n - 1))
        return bytes(data[:i]), f"truncated to {i} of {n} bytes"
    if kind == "insert":
        i = draw(st.integers(0, n))
        junk = draw(st.binary(min_size=1, max_size=16))
        return bytes(data[:i] + junk + data[i:]), f"{len(junk)} bytes inserted at {i}"
    if kind == "delete":
        i = draw(st.integers(0, n - 1))
        j = draw(st.integers(i + 1, min(n, i + 32)))
        return bytes(data[:i] + data[j:]), f"bytes {i}:{j} deleted"
    if kind == "junk":
        return draw(st.binary(min_size=1, max_size=256)), "random bytes"
    if kind == "empty-ish":
        return draw(st.sampled_from([b"\x00", b"\n", b"{}", b"[1, 2]", b"ir_version: 8", b"\x08"])), "tiny file"
    return draw(st.binary(min_size=1, max_size=8)) + bytes(data), "bytes prepended"


def _graphs(g: onnx.GraphProto) -> list[onnx.GraphProto]:
    out = [g]
    for n in g.node:
        for a in n.attribute:
            if a.type == AttributeProto.GRAPH:
                out += _graphs(a.g)
            for sub in a.graphs:
                out += _graphs(sub)
    return out


def _names(g: onnx.GraphProto) -> list[str]:
    names = [i.name for i in g.input] + [t.name for t in g.initializer]
    return names + [o for n in g.node for o in n.output if o]


def _value_infos(g: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    return [*g.input, *g.output, *g.value_info]


def _mutate(draw, m: onnx.ModelProto) -> str:
    graphs = _graphs(m.graph)
    g = draw(st.sampled_from(graphs))
    kind = draw(st.sampled_from(MUTATIONS))
    i = draw(st.integers(0, 10**6))

    def one(seq):
        return seq[i % len(seq)] if len(seq) else None

    if kind == "dim":
        vi = one([v for v in _value_infos(g) if v.type.tensor_type.shape.dim])
        if vi is None:
            return "nothing to change (dim)"
        d = one(vi.type.tensor_type.shape.dim)
        d.dim_value = draw(st.sampled_from([0, -1, -(2**40), 2**40, 7, 1]))
        return f"a dim of {vi.name} set to {d.dim_value}"
    if kind == "elem_type":
        vi = one(_value_infos(g))
        if vi is None:
            return "nothing to change (elem_type)"
        vi.type.tensor_type.elem_type = draw(st.sampled_from([0, 8, 16, 99, -3, 1, 7]))
        return f"element type of {vi.name} set to {vi.type.tensor_type.elem_type}"
    if kind == "init_dtype":
        t = one(g.initializer)
        if t is None:
            return "nothing to change (init_dtype)"
        t.data_type = draw(st.sampled_from([0, 99, TensorProto.STRING, TensorProto.DOUBLE, TensorProto.INT8,
                                            TensorProto.BFLOAT16, TensorProto.FLOAT16]))
        return f"initializer {t.name} data_type set to {t.data_type}"
    if kind == "init_dims":
        t = one(g.initializer)
        if t is None:
            return "nothing to change (init_dims)"
        del t.dims[:]
        t.dims.extend(draw(st.lists(st.integers(-2, 9), max_size=4)))
        return f"initializer {t.name} dims set to {list(t.dims)}"
    if kind == "init_data":
        t = one(g.initializer)
        if t is None:
            return "nothing to change (init_data)"
        how = draw(st.sampled_from(["truncate", "extra", "both", "external-flag"]))
        if how == "truncate":
            t.raw_data = t.raw_data[: len(t.raw_data) // 2]
        elif how == "extra":
            t.raw_data = t.raw_data + b"\x00\x01\x02"
        elif how == "both":
            t.float_data.extend([1.0, 2.0])
        else:
            t.data_location = TensorProto.EXTERNAL
        return f"initializer {t.name} data: {how}"
    if kind == "drop_field":
        n = one(g.node)
        what = draw(st.sampled_from(["op_type", "input", "output", "graph_output", "opset", "graph"]))
        if what == "op_type" and n is not None:
            n.op_type = ""
        elif what == "input" and n is not None and n.input:
            del n.input[i % len(n.input)]
        elif what == "output" and n is not None and n.output:
            del n.output[:]
        elif what == "graph_output":
            del g.output[:]
        elif what == "opset":
            del m.opset_import[:]
        elif what == "graph":
            m.ClearField("graph")
        return f"dropped {what}"
    if kind == "duplicate":
        what = draw(st.sampled_from(["node_output", "initializer", "input", "output"]))
        if what == "node_output" and len(g.node) >= 2:
            g.node[-1].output[0] = g.node[0].output[0]
        elif what == "initializer" and g.initializer:
            g.initializer.append(copy.deepcopy(one(g.initializer)))
        elif what == "input" and g.input:
            g.input.append(copy.deepcopy(one(g.input)))
        elif what == "output" and g.output:
            g.output.append(copy.deepcopy(one(g.output)))
        return f"duplicated {what}"
    if kind == "dangling":
        n = one([n for n in g.node if n.input])
        if n is None:
            g.output[0].name = "nowhere" if g.output else ""
            return "graph output renamed to a value nothing makes"
        n.input[i % len(n.input)] = draw(st.sampled_from(["nowhere", "", n.output[0] if n.output else "x"]))
        return f"an input of {n.op_type} set to {n.input[i % len(n.input)]!r}"
    if kind == "attribute":
        n = one([n for n in g.node if n.attribute]) or one(g.node)
        if n is None:
            return "nothing to change (attribute)"
        if n.attribute and draw(st.booleans()):
            a = one(n.attribute)
            new = draw(st.sampled_from(["int", "float", "string", "ints", "empty", "tensor"]))
            name = a.name
            n.attribute.remove(a)
            if new == "int":
                n.attribute.append(onnx.helper.make_attribute(name, 3))
            elif new == "float":
                n.attribute.append(onnx.helper.make_attribute(name, 0.5))
            elif new == "string":
                n.attribute.append(onnx.helper.make_attribute(name, "oops"))
            elif new == "ints":
                n.attribute.append(onnx.helper.make_attribute(name, [1, -1, 2**40]))
            elif new == "tensor":
                zeros = onnx.numpy_helper.from_array(np.zeros(2, np.float32))
                n.attribute.append(onnx.helper.make_attribute(name, zeros))
            else:
                n.attribute.append(AttributeProto(name=name))
            return f"attribute {name} of {n.op_type} made {new}"
        n.attribute.append(onnx.helper.make_attribute(draw(st.sampled_from(["axis", "perm", "bogus", "to"])),
                                                      draw(st.sampled_from([7, -9, [3, 3], "s", 1.5]))))
        return f"attribute added to {n.op_type}"
    if kind == "cycle" and len(g.node) >= 2:
        a, b = g.node[0], g.node[-1]
        if a.input and b.output:
            a.input[0] = b.output[0]
        return "first node reads the last node's output"
    if kind == "op":
        n = one(g.node)
        if n is None:
            return "nothing to change (op)"
        n.op_type = draw(st.sampled_from(["NotAnOp", "Relu", "Conv", "If", "Loop", "Scan", "MatMul", "Constant"]))
        if draw(st.booleans()):
            n.domain = draw(st.sampled_from(["com.unknown", "ai.onnx.ml", "com.microsoft", "ai.onnx"]))
        return f"a node made {n.domain}.{n.op_type}"
    if kind == "opset":
        if m.opset_import:
            m.opset_import[0].version = draw(st.sampled_from([0, -1, 1, 6, 10**6, 2**40]))
        if draw(st.booleans()):
            m.opset_import.append(onnx.helper.make_opsetid(draw(st.sampled_from(["", "ai.onnx", "x"])), 13))
        return "opset imports changed"
    if kind == "ir_version":
        m.ir_version = draw(st.sampled_from([0, 1, 3, 99, -1, 2**40]))
        return f"ir_version {m.ir_version}"
    if kind == "subgraph":
        n = one([n for n in g.node if n.op_type == "If"])
        if n is None:
            return "nothing to change (subgraph)"
        if draw(st.booleans()):
            del n.attribute[i % len(n.attribute)]
        else:
            br = n.attribute[i % len(n.attribute)].g
            del br.output[:]
        return "an If branch broken"
    if kind == "overridable":  # every initializer listed as an input too, or none of the inputs typed
        names = {t.name for t in g.initializer}
        have = {v.name for v in g.input}
        for t in g.initializer:
            if t.name not in have:
                g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        return f"{len(names - have)} initializers made overridable"
    if kind == "names":
        n = one(g.node)
        if n is None or not n.output:
            return "nothing to change (names)"
        n.output[0] = draw(st.sampled_from(["", " ", "a/b", "..", "x" * 300, "名", "\x00"]))
        return f"an output named {n.output[0]!r}"
    return "unchanged"


MUTATIONS = ("dim", "elem_type", "init_dtype", "init_dims", "init_data", "drop_field", "duplicate", "dangling",
             "attribute", "cycle", "op", "opset", "ir_version", "subgraph", "overridable", "names")


@st.composite
def broken_protos(draw) -> tuple[bytes, str]:
    m = copy.deepcopy(draw(cases()).model)
    what = [_mutate(draw, m) for _ in range(draw(st.integers(1, 2)))]
    try:
        data = m.SerializeToString()
    except Exception as e:  # noqa: BLE001 - protobuf refuses the message (invalid UTF-8)
        data = b""
        what.append(f"serialization failed: {type(e).__name__}")
    return data, "; ".join(what)
