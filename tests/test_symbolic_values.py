"""The symbolic shape oracle (eqsat/oracle/symbolic.py) against ONNX semantics.

End to end: shape arithmetic that the oracle folds or turns into a Reshape target gives the
original's outputs (rank, axes, broadcasting, wrap-around in int64 and int32). Property: on
random chains of shape arithmetic, every value the oracle claims to know equals what onnx's
reference evaluator computes, at two sets of sizes for the symbolic dimensions.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.reference
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from eqsat.core.pipeline import Options, saturate
from eqsat.core.shapes import SYM_BASE
from eqsat.oracle.symbolic import Sym, SymValues, reshape_target
from eqsat.oracle.view import View

from .conftest import assert_same_outputs, assert_verified, optimized, parse_model

H = '<ir_version: 8, opset_import: ["" : 18]>'


def window_pad(x_type: str, out: str) -> onnx.ModelProto:
    """Swin's window padding: H and W padded up to a multiple of 7 by amounts computed from
    x's shape ((7 - H % 7) % 7, Abs'd so that shape inference leaves the Pad's output
    symbolic), then a tensor of the padded value's shape."""
    return parse_model(H + f"""
        agraph ({x_type} x) => ({out} y, {out} z) {{
            s = Shape(x)
            st = Constant <value = int64[1] {{1}}> ()
            en = Constant <value = int64[1] {{3}}> ()
            hw = Slice(s, st, en)
            win = Constant <value = int64[1] {{7}}> ()
            r = Mod(hw, win)
            d = Sub(win, r)
            k = Mod(d, win)
            ka = Abs(k)
            z4 = Constant <value = int64[4] {{0, 0, 0, 0}}> ()
            z1 = Constant <value = int64[1] {{0}}> ()
            pads = Concat <axis = 0> (z4, z1, ka, z1)
            y = Pad(x, pads)
            sy = Shape(y)
            z = ConstantOfShape(sy)
        }}""")


def test_the_shape_of_a_pad_whose_amounts_fold_is_known():
    # before: Shape(Pad) stayed symbolic (shape inference gave the Pad fresh symbols), so
    # Shape and ConstantOfShape stayed in the graph; now the oracle reads the Pad's input
    # shape and the folded amounts, and both fold
    m = window_pad("float[1, 10, 12, 3]", "float[1, ?, ?, 3]")
    res = optimized(m)
    ops = [n.op_type for n in res.model.graph.node]
    assert "Shape" not in ops and "ConstantOfShape" not in ops, ops
    assert_same_outputs(m, res.model)
    assert_verified(m, res)


def test_the_shape_of_a_pad_of_a_symbolic_size_stays_symbolic():
    m = window_pad("float[1, height, width, 3]", "float[1, ?, ?, 3]")
    res = optimized(m)
    assert "Shape" in [n.op_type for n in res.model.graph.node]
    assert_same_outputs(m, res.model, dims={"height": 10, "width": 12})
    assert_verified(m, res, {"height": 10, "width": 12})


def test_concat_on_the_last_axis_of_a_matrix_is_not_an_append():
    # x [4, 6]: t = Slice(Reshape(Concat(Unsqueeze(Gather(Shape(x), [1, 0]), [1]), same, axis=-1),
    # [-1]), 1, 3) is [6, 4] ([[6, 6], [4, 4]] flattened, then its middle); read as a flat
    # append it would be [4, 6]
    m = parse_model(H + """
        agraph (float[4, 6] x) => (float[4, 6] y) {
            s = Shape(x)
            idx = Constant <value = int64[2] {1, 0}> ()
            g = Gather <axis = 0> (s, idx)
            one = Constant <value = int64[1] {1}> ()
            u = Unsqueeze(g, one)
            c = Concat <axis = -1> (u, u)
            flat = Constant <value = int64[1] {-1}> ()
            f = Reshape(c, flat)
            b = Constant <value = int64[1] {1}> ()
            e = Constant <value = int64[1] {3}> ()
            t = Slice(f, b, e)
            r = Reshape(x, t)
            sm = Softmax <axis = -1> (r)
            y = Reshape(sm, s)
        }""")
    res = optimized(m)
    assert_same_outputs(m, res.model, rtol=1e-6, atol=1e-7)
    assert_verified(m, res)


@pytest.mark.parametrize("dims", [{"B": 0, "S": 3}, {"B": 2, "S": 0}, {"B": 2, "S": 3}])
def test_a_computed_reshape_target_keeps_its_sizes_beside_a_symbolic_copy(dims):
    # x [B, S, 4] reshaped to [B, S * 4] (computed from its shape): the literal [0, -1] that the
    # oracle wrote is refused by onnxruntime for B = 0 (no size is 0 elements over 0), where the
    # original runs
    m = parse_model(H + """
        agraph (float[B, S, 4] x) => (float[B, ?] y) {
            s = Shape(x)
            i0 = Constant <value = int64[1] {0}> ()
            i1 = Constant <value = int64[1] {1}> ()
            i2 = Constant <value = int64[1] {2}> ()
            b = Slice(s, i0, i1)
            n = Slice(s, i1, i2)
            four = Constant <value = int64[1] {4}> ()
            n4 = Mul(n, four)
            t = Concat <axis = 0> (b, n4)
            y = Reshape(x, t)
        }""")
    res = optimized(m)
    assert_same_outputs(m, res.model, dims=dims, ort_optimize=False)
    assert_verified(m, res, dims)


def test_a_literal_target_has_a_minus_one_only_beside_sizes_that_are_not_0():
    b, s = Sym(SYM_BASE), Sym(SYM_BASE - 1)
    x = [b.id, s.id, 4]
    assert reshape_target([b, None], x) is None  # [0, -1]: refused for B = 0
    assert reshape_target([None, 4], x) == [-1, 4]  # B * S * 4 elements over 4
    assert reshape_target([b, s, 2, 2], x) == [0, 0, 2, 2]  # no -1: copies are exact at 0
    assert reshape_target([None, s, 4], x) is None  # [-1, 0, 4]: refused for S = 0
    assert reshape_target([b, -1], x) == [0, -1]  # the model's own -1 stays: it refuses as the original does


def test_gather_on_a_matrix_takes_rows():
    # Gather(M, [1], axis=0) of M = [[2, 3], [3, 2]] (built from Shape) is the row [3, 2],
    # not the flat element 3
    m = parse_model(H + """
        agraph (float[2, 3] x) => (float[3, 2] y) {
            s = Shape(x)
            r = Constant <value = int64[2] {1, 0}> ()
            sr = Gather <axis = 0> (s, r)
            zero = Constant <value = int64[1] {0}> ()
            a = Unsqueeze(s, zero)
            b = Unsqueeze(sr, zero)
            mm = Concat <axis = 0> (a, b)
            i = Constant <value = int64[1] {1}> ()
            row = Gather <axis = 0> (mm, i)
            flat = Constant <value = int64[1] {-1}> ()
            t = Reshape(row, flat)
            y = Reshape(x, t)
        }""")
    res = optimized(m)
    assert_same_outputs(m, res.model, rtol=1e-6, atol=1e-7)
    assert_verified(m, res)


def test_int64_arithmetic_wraps_and_does_not_stop_the_run():
    # Shape(x) * 2^62 wraps in int64 (onnxruntime gives [0, -2^63] for [4, 6]... and
    # [-2^63, ...] is no size); folded, it must be the same numbers, and a Python int that
    # does not fit int64 must not stop the run
    m = parse_model(H + """
        agraph (float[4, 6] x) => (int64[2] y) {
            s = Shape(x)
            k = Constant <value = int64[1] {4611686018427387904}> ()
            y = Mul(s, k)
        }""")
    res = optimized(m)
    assert_same_outputs(m, res.model)
    assert_verified(m, res)


def test_cast_to_int32_wraps():
    # Cast(Shape(x) * 2^31, INT32): onnxruntime gives [0, -2147483648] for x [2, 3]
    m = parse_model(H + """
        agraph (float[2, 3] x) => (int32[2] y) {
            s = Shape(x)
            k = Constant <value = int64[1] {2147483648}> ()
            p = Mul(s, k)
            y = Cast <to = 6> (p)
        }""")
    res = optimized(m)
    assert_same_outputs(m, res.model)
    assert_verified(m, res)


def test_shape_of_a_scalar_plus_one_broadcasts_to_empty():
    m = parse_model(H + """
        agraph (float x) => (int64[0] y) {
            s = Shape(x)
            one = Constant <value = int64[1] {1}> ()
            y = Add(s, one)
        }""")
    res = optimized(m)
    assert_same_outputs(m, res.model)
    assert_verified(m, res)


def test_slice_axes_must_name_an_axis_of_the_data():
    # Slice on axis -1 of the matrix [[3, 2], [2, 3]] takes its first column [[3], [2]];
    # read as a flat list it took the first entry
    m = parse_model(H + """
        agraph (float[2, 3] x) => (float[3, 2] y) {
            s = Shape(x)
            zero = Constant <value = int64[1] {0}> ()
            a = Unsqueeze(s, zero)
            r = Constant <value = int64[2] {1, 0}> ()
            sr = Gather <axis = 0> (s, r)
            b = Unsqueeze(sr, zero)
            mm = Concat <axis = 0> (b, a)
            st = Constant <value = int64[1] {0}> ()
            en = Constant <value = int64[1] {1}> ()
            ax = Constant <value = int64[1] {-1}> ()
            col = Slice(mm, st, en, ax)
            flat = Constant <value = int64[1] {-1}> ()
            t = Reshape(col, flat)
            y = Reshape(x, t)
        }""")
    res = optimized(m)
    assert_same_outputs(m, res.model, rtol=1e-6, atol=1e-7)
    assert_verified(m, res)


# ---- property: the oracle against onnx's reference evaluator

SIZES = ({"n": 3, "k": 5}, {"n": 7, "k": 2})


@st.composite
def shape_programs(draw):
    """A random chain of shape arithmetic over Shape(x) for x [n, 4, k] (n, k symbolic):
    nodes of the ops the oracle models with random axes, indices, dtypes and constants,
    each output a graph output. Invalid programs are discarded by the caller."""
    nodes, inits, vals = [], [], []  # vals: (name, rank, dtype)
    counter = iter(range(10_000))

    def const(arr) -> str:
        name = f"c{next(counter)}"
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    nodes.append(h.make_node("Shape", ["x"], ["s0"], **draw(st.sampled_from([{}, {"start": 1}, {"end": -1}]))))
    vals.append(("s0", 1, TP.INT64))
    big = st.sampled_from([0, 1, -1, 2, 3, 7, 2**31, 2**31 - 1, 2**62, -(2**62), 2**63 - 1, -(2**63)])
    for i in range(draw(st.integers(1, 6))):
        name = f"v{i}"
        src, rank, dt = draw(st.sampled_from(vals))
        op = draw(st.sampled_from(["Gather", "Unsqueeze", "Concat", "Slice", "Reshape", "Arith", "Cast",
                                   "Squeeze", "Flatten"]))
        if op == "Gather":
            axis = draw(st.integers(-rank, rank - 1)) if rank else 0
            idx = draw(st.lists(st.integers(-3, 3), min_size=0, max_size=3))
            idx_arr = np.array(idx if draw(st.booleans()) or not idx else idx[0], np.int64)
            nodes.append(h.make_node("Gather", [src, const(idx_arr)], [name], axis=axis))
            out_rank = rank - 1 + idx_arr.ndim
        elif op == "Unsqueeze":
            axes = draw(st.lists(st.integers(-rank - 1, rank), min_size=1, max_size=2, unique=True))
            nodes.append(h.make_node("Unsqueeze", [src, const(np.array(axes, np.int64))], [name]))
            out_rank = rank + len(axes)
        elif op == "Squeeze":
            nodes.append(h.make_node("Squeeze", [src], [name]))
            out_rank = None
        elif op == "Flatten":
            nodes.append(h.make_node("Flatten", [src], [name], axis=draw(st.integers(-rank, rank)) if rank else 0))
            out_rank = 2
        elif op == "Concat":
            other, orank, odt = draw(st.sampled_from(vals))
            axis = draw(st.integers(-rank, rank - 1)) if rank else 0
            nodes.append(h.make_node("Concat", [src, other], [name], axis=axis))
            out_rank = rank
        elif op == "Slice":
            starts = [draw(st.integers(-4, 4))]
            ends = [draw(st.sampled_from([-100, -1, 0, 1, 2, 3, 100]))]
            ins = [src, const(np.array(starts, np.int64)), const(np.array(ends, np.int64))]
            if draw(st.booleans()):
                ins.append(const(np.array([draw(st.integers(-max(rank, 1), max(rank, 1) - 1))], np.int64)))
                if draw(st.booleans()):
                    ins.append(const(np.array([draw(st.sampled_from([1, 2, -1, -2]))], np.int64)))
            nodes.append(h.make_node("Slice", ins, [name]))
            out_rank = rank
        elif op == "Reshape":
            target = draw(st.sampled_from([[-1], [1, -1], [-1, 1], [0, -1], [2, -1]]))
            nodes.append(h.make_node("Reshape", [src, const(np.array(target, np.int64))], [name]))
            out_rank = len(target)
        elif op == "Arith":
            kind = draw(st.sampled_from(["Add", "Sub", "Mul", "Div"]))
            np_dt = np.int64 if dt == TP.INT64 else np.int32
            info = np.iinfo(np_dt)
            k = [int(np.clip(draw(big), info.min, info.max)) for _ in range(draw(st.integers(0, 2)))]
            other = const(np.array(k or [draw(big) % 5 + 1], np_dt).reshape(draw(st.sampled_from(
                [(-1,), (1, -1)])) if len(k) != 0 else (-1,)))
            ins = [src, other] if draw(st.booleans()) else [other, src]
            nodes.append(h.make_node(kind, ins, [name]))
            out_rank = None
        else:
            to = draw(st.sampled_from([TP.INT64, TP.INT32]))
            nodes.append(h.make_node("Cast", [src], [name], to=to))
            out_rank, dt = rank, to
        if out_rank is None:
            out_rank = rank
        vals.append((name, out_rank, dt))
    return nodes, inits, [v for v, _, _ in vals]


def _reference(model: onnx.ModelProto, sizes: dict[str, int]) -> dict[str, np.ndarray] | None:
    x = np.zeros((sizes["n"], 4, sizes["k"]), np.float32)
    try:
        outs = onnx.reference.ReferenceEvaluator(model).run(None, {"x": x})
    except Exception:  # noqa: BLE001 - an invalid program at these sizes
        return None
    return {o.name: np.asarray(v) for o, v in zip(model.graph.output, outs, strict=True)}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the reference evaluator's division by zero
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(shape_programs())
def test_known_values_match_the_reference_evaluator(program):
    nodes, inits, names = program
    outputs = [h.make_tensor_value_info(n, TP.UNDEFINED, None) for n in names]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, ["n", 4, "k"])], outputs, inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 18)], ir_version=8)
    refs = [_reference(model, s) for s in SIZES]
    assume(all(r is not None for r in refs))
    st_ = saturate(model, Options(default_rules=False))
    sym = SymValues(View.of(st_.data, "t_"))
    eclass = {name: c for c, ns in st_.value_names.items() for name in ns}
    dims = {int(k): v for k, v in st_.data["eqsat"]["dims"].items()}
    for name in names:
        known = sym.tensor(eclass[name]) if name in eclass else None
        if known is None:
            continue
        for sizes, ref in zip(SIZES, refs, strict=True):
            want = ref[name]
            assert known.shape == want.shape, f"{name}: shape {known.shape}, reference {want.shape}"
            assert known.np_dtype == want.dtype, f"{name}: dtype {known.np_dtype}, reference {want.dtype}"
            got = known.values.reshape(-1)
            for i, (e, w) in enumerate(zip(got, want.reshape(-1), strict=True)):
                if e is None:
                    continue
                if isinstance(e, Sym):
                    e = sizes[dims[e.id]]
                assert e == int(w), f"{name}[{i}]: {e}, reference {int(w)} at sizes {sizes}"
