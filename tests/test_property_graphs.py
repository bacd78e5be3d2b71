"""Property tests: random well-typed graphs, optimized with the default rules, compute what
the original computes under onnxruntime, for every target x cost model x extractor.

Graphs are chains of blocks on a [N, D] activation (N symbolic or fixed): element-wise
ops with constants, MatMul + Add (+ activation) and Gemm stacks, LayerNorm written out op
by op, single-head attention, shared subexpressions and unused branches; and separately
Conv / BatchNormalization / activation stacks on [1, C, H, W]. Example counts are bounded
(hypothesis, derandomized) so the file runs in about a minute.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as TP
from onnx import helper as h

from eqsat.core.pipeline import Options, optimize

from .conftest import assert_same_outputs, assert_verified

TARGETS = ("ort", "onnx")
COST_MODELS = ("node-count", "roofline")
EXTRACTORS = ("ilp", "dag-greedy", "tree-greedy")
COMBOS = list(itertools.product(TARGETS, COST_MODELS, EXTRACTORS))
RTOL, ATOL = 1e-3, 1e-4
# $EQSAT_PROPERTY_EXAMPLES (and a non-derandomized search) for a longer hunt than CI's.
_HUNT = int(os.environ.get("EQSAT_PROPERTY_EXAMPLES", "0") or 0)
SETTINGS = settings(max_examples=_HUNT or 30, deadline=None, derandomize=not _HUNT, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

UNARY = ("Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Identity", "Exp", "Softplus")
BINARY = ("Add", "Sub", "Mul", "Div")
ACTIVATIONS = ("Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "HardSigmoid", "Identity")


class Builder:
    """Appends nodes and initializers; `fresh` names values."""

    def __init__(self, rng: np.random.Generator, opset: int) -> None:
        self.rng, self.opset = rng, opset
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def fresh(self, stem: str) -> str:
        self.n += 1
        return f"{stem}{self.n}"

    def const(self, shape, scale: float = 0.5, positive: bool = False) -> str:
        a = self.rng.standard_normal(shape).astype(np.float32) * np.float32(scale)
        if positive:
            a = np.abs(a) + np.float32(0.5)
        name = self.fresh("w")
        self.inits.append(onnx.numpy_helper.from_array(a, name))
        return name

    def ints(self, values) -> str:
        name = self.fresh("i")
        self.inits.append(onnx.numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        out = self.fresh(op_type.lower())
        self.nodes.append(h.make_node(op_type, inputs, [out], **attrs))
        return out

    def act(self, name: str, x: str) -> str:
        if name == "LeakyRelu":
            return self.op("LeakyRelu", [x], alpha=0.1)
        if name == "HardSigmoid":
            return self.op("HardSigmoid", [x], alpha=0.2, beta=0.5)
        if name == "Clip":
            return self.op("Clip", [x, self.scalar(0.0), self.scalar(6.0)])
        return self.op(name, [x])

    def scalar(self, v: float) -> str:
        name = self.fresh("s")
        self.inits.append(onnx.numpy_helper.from_array(np.asarray(v, np.float32), name))
        return name


# ---- blocks on [N, D] -> [N, D]


def eltwise(b: Builder, x: str, d: int, choice) -> str:
    for op in choice["ops"]:
        if op in BINARY:
            shape = [d] if choice["row_const"] else []
            c = b.const(shape, positive=op == "Div") if shape else b.scalar(float(b.rng.uniform(0.5, 2.0)))
            x = b.op(op, [x, c] if choice["const_right"] else [c, x])
        else:
            x = b.op(op, [b.op("Tanh", [x])] if op == "Exp" else [x])  # keep Exp bounded
    return x


def matmul(b: Builder, x: str, d: int, choice) -> str:
    y = b.op("MatMul", [x, b.const([d, d])])
    if choice["bias"]:
        y = b.op("Add", [y, b.const([d])] if choice["const_right"] else [b.const([d]), y])
    return b.act(choice["act"], y)


def gemm(b: Builder, x: str, d: int, choice) -> str:
    attrs = {"transB": 1} if choice["bias"] else {"alpha": 0.5}
    y = b.op("Gemm", [x, b.const([d, d]), b.const([d])], **attrs)
    return b.act(choice["act"], y)


def layernorm(b: Builder, x: str, d: int, choice) -> str:
    axes = b.ints([-1])
    if b.opset >= 18:
        mean = b.op("ReduceMean", [x, axes], keepdims=1)
    else:
        mean = b.op("ReduceMean", [x], axes=[-1], keepdims=1)
    diff = b.op("Sub", [x, mean])
    sq = b.op("Pow", [diff, b.scalar(2.0)]) if choice["pow"] else b.op("Mul", [diff, diff])
    var = b.op("ReduceMean", [sq, axes], keepdims=1) if b.opset >= 18 else b.op("ReduceMean", [sq], axes=[-1],
                                                                                keepdims=1)
    std = b.op("Sqrt", [b.op("Add", [var, b.scalar(1e-5)])])
    y = b.op("Div", [diff, std])
    return b.op("Add", [b.op("Mul", [y, b.const([d], positive=True)]), b.const([d])])


def attention(b: Builder, x: str, d: int, choice) -> str:
    q = b.op("MatMul", [x, b.const([d, d])])
    k = b.op("MatMul", [x, b.const([d, d])])
    v = b.op("MatMul", [x, b.const([d, d])])
    if choice["bias"]:
        q, k, v = (b.op("Add", [t, b.const([d])]) for t in (q, k, v))
    s = b.op("MatMul", [q, b.op("Transpose", [k], perm=[1, 0])])
    s = b.op("Div", [s, b.scalar(float(np.sqrt(d)))]) if choice["const_right"] else \
        b.op("Mul", [s, b.scalar(float(1 / np.sqrt(d)))])
    p = b.op("Softmax", [s], axis=-1)
    return b.op("MatMul", [b.op("MatMul", [p, v]), b.const([d, d])])


def shared(b: Builder, x: str, d: int, choice) -> str:
    """The same computation twice (CSE), combined."""
    w = b.const([d])
    a1 = b.act(choice["act"], b.op("Mul", [x, w]))
    a2 = b.act(choice["act"], b.op("Mul", [x, w]))
    return b.op("Add", [a1, a2])


def unused(b: Builder, x: str, d: int, choice) -> str:
    """A branch whose result nothing uses (dead code), then x unchanged."""
    dead = b.op("MatMul", [b.act(choice["act"], x), b.const([d, d])])
    b.op("Relu", [dead])
    return b.op("Identity", [x])


BLOCKS = {"eltwise": eltwise, "matmul": matmul, "gemm": gemm, "layernorm": layernorm, "attention": attention,
          "shared": shared, "unused": unused}


@st.composite
def choices(draw):
    return {
        "ops": draw(st.lists(st.sampled_from(UNARY + BINARY), min_size=1, max_size=4)),
        "row_const": draw(st.booleans()),
        "const_right": draw(st.booleans()),
        "bias": draw(st.booleans()),
        "act": draw(st.sampled_from(ACTIVATIONS)),
        "pow": draw(st.booleans()),
    }


@st.composite
def dense_models(draw):
    """A model x[N, D] -> y[N, D] (and sometimes a second output) of 1 to 3 blocks."""
    seed = draw(st.integers(0, 2**31 - 1))
    d = draw(st.sampled_from([4, 8]))
    n = draw(st.sampled_from(["batch", 3]))
    opset = draw(st.sampled_from([13, 17, 18, 20]))
    blocks = draw(st.lists(st.sampled_from(sorted(BLOCKS)), min_size=1, max_size=3))
    b = Builder(np.random.default_rng(seed), opset)
    x = "x"
    outputs = []
    for name in blocks:
        x = BLOCKS[name](b, x, d, draw(choices()))
        if draw(st.integers(0, 4)) == 0:
            outputs.append(x)  # an intermediate value is an output too
    outputs.append(x)
    outputs = list(dict.fromkeys(outputs))
    if "x" in outputs:  # an input cannot be an output of its own graph here
        outputs[outputs.index("x")] = b.op("Identity", ["x"])
    return _model(b, [h.make_tensor_value_info("x", TP.FLOAT, [n, d])],
                  [h.make_tensor_value_info(o, TP.FLOAT, [n, d]) for o in outputs], opset), blocks


@st.composite
def conv_models(draw):
    """x[1, C, H, W] -> Conv (+ BatchNormalization) (+ activation) (+ residual Add), repeated."""
    seed = draw(st.integers(0, 2**31 - 1))
    c = draw(st.sampled_from([2, 4]))
    opset = draw(st.sampled_from([13, 17, 18]))
    b = Builder(np.random.default_rng(seed), opset)
    x = "x"
    layers = draw(st.integers(1, 3))
    for _ in range(layers):
        k = draw(st.sampled_from([1, 3]))
        inputs = [x, b.const([c, c, k, k])] + ([b.const([c])] if draw(st.booleans()) else [])
        y = b.op("Conv", inputs, kernel_shape=[k, k], pads=[k // 2] * 4)
        if draw(st.booleans()):
            y = b.op("BatchNormalization", [y, b.const([c], positive=True), b.const([c]), b.const([c]),
                                            b.const([c], positive=True)], epsilon=1e-5)
        if draw(st.booleans()):  # a per-channel Add or Mul
            y = b.op(draw(st.sampled_from(["Add", "Mul"])), [y, b.const([c, 1, 1], positive=True)])
        y = b.act(draw(st.sampled_from(ACTIVATIONS)), y)
        if draw(st.booleans()):
            y = b.op("Add", [y, x])  # residual
        x = y
    vi = h.make_tensor_value_info
    return _model(b, [vi("x", TP.FLOAT, [1, c, 5, 5])], [vi(x, TP.FLOAT, [1, c, 5, 5])], opset), ["conv"] * layers


def _model(b: Builder, inputs, outputs, opset: int) -> onnx.ModelProto:
    g = h.make_graph(b.nodes, "g", inputs, outputs, b.inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def _check(model: onnx.ModelProto, target: str, cost_model: str, extractor: str) -> onnx.ModelProto:
    opts = Options(target=target, cost_model=cost_model, extractor=extractor, extract_time_limit=20.0)
    opt = optimize(model, opts).model
    onnx.checker.check_model(opt)
    if target == "onnx":
        assert all(n.domain in ("", "ai.onnx") for n in opt.graph.node), [n.domain for n in opt.graph.node]
    feeds = {"x": np.random.default_rng(7).standard_normal(
        [d.dim_value or 3 for d in model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)}
    assert_same_outputs(model, opt, feeds, rtol=RTOL, atol=ATOL)
    assert_verified(model, opt)
    return opt


@SETTINGS
@given(dense_models(), st.sampled_from(COMBOS))
def test_random_dense_graphs_keep_their_outputs(case, combo):
    model, _blocks = case
    _check(model, *combo)


@settings(SETTINGS, max_examples=_HUNT or 15)
@given(conv_models(), st.sampled_from(COMBOS))
def test_random_conv_graphs_keep_their_outputs(case, combo):
    model, _blocks = case
    _check(model, *combo)


def _every_block_model() -> onnx.ModelProto:
    b = Builder(np.random.default_rng(0), 18)
    ch = {"ops": ["Add", "Relu", "Mul", "Sigmoid"], "row_const": True, "const_right": True, "bias": True,
          "act": "Relu", "pow": True}
    x = "x"
    for name in sorted(BLOCKS):
        x = BLOCKS[name](b, x, 8, ch)
    vi = h.make_tensor_value_info
    return _model(b, [vi("x", TP.FLOAT, ["batch", 8])], [vi(x, TP.FLOAT, ["batch", 8])], 18)


@pytest.mark.parametrize("target, cost_model, extractor", COMBOS)
def test_every_block_with_every_target_cost_model_and_extractor(target, cost_model, extractor):
    """One graph with every block, through all 12 combinations (hypothesis samples them)."""
    model = _every_block_model()
    opt = _check(model, target, cost_model, extractor)
    assert len(opt.graph.node) < len(model.graph.node)  # something was optimized
