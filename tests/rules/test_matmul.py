"""rules/matmul.egg: MatMul + Add into Gemm, Transposes into Gemm / FusedMatMul flags, a
scalar scale into FusedMatMul's alpha, Gemm + activation into FusedGemm, and parallel
MatMuls on one input merged into one MatMul and a Split. Each rule fires on a minimal model
with the outputs unchanged under onnxruntime, and does not fire (or its result is not
taken) where it must not."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from ..conftest import assert_same_outputs, assert_verified, check_rewrite, op_list, optimized, parse_model

H = '<ir_version: 8, opset_import: ["" : 18]>'
RNG = np.random.default_rng(0)
TYPES = {np.float32: "float", np.float64: "double", np.int64: "int64"}


def header(opset: int = 18) -> str:
    return f'<ir_version: 8, opset_import: ["" : {opset}]>'


def init(name: str, *shape: int, dtype=np.float32) -> str:
    """An initializer in ONNX text: `float[4, 3] w = {...}` with random values."""
    arr = RNG.integers(-3, 4, shape) if dtype == np.int64 else RNG.standard_normal(shape)
    vals = ", ".join(repr(int(v) if dtype == np.int64 else float(v)) for v in np.ravel(arr))
    dims = f"[{', '.join(map(str, shape))}]" if shape else ""
    return f"{TYPES[dtype]}{dims} {name} = {{{vals}}}"


def inits(*items: str) -> str:
    return "<" + ", ".join(items) + ">"


DEFAULTS = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}


def attr(model: onnx.ModelProto, op: str, name: str):
    """The attribute of the one `op` node, or its default where the node leaves it out."""
    (node,) = [n for n in model.graph.node if n.op_type == op]
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return DEFAULTS.get(name)


def check_shared(model: onnx.ModelProto, expect_ops: list[str], **opts) -> None:
    """A fusion whose intermediate is also used elsewhere saves no op: under node count the
    fused and the unfused forms tie (either may be extracted, the op count stays), and a
    cost model that sees the work (roofline) keeps the unfused form."""
    res = optimized(model, **opts)
    assert len(res.model.graph.node) == len(expect_ops), sorted(op_list(res.model))
    assert_same_outputs(model, res.model, rtol=1e-4, atol=1e-5)
    assert_verified(model, res)
    check_rewrite(model, expect_ops, cost_model="roofline", **opts)


# ---- MatMul + Add -> Gemm

@pytest.mark.parametrize("bias", [[5], [1, 5], [3, 5], [3, 1], [1], []])
def test_matmul_add_becomes_gemm(bias):
    m = parse_model(H + f"""
        agraph (float[3, 4] x) => (float[3, 5] y) {inits(init("w", 4, 5), init("b", *bias))} {{
            p = MatMul(x, w)
            y = Add(p, b)
        }}""")
    # the product is already the Add's first operand: nothing to reorder
    check_rewrite(m, ["Gemm"], fired=["gemm-matmul-add"], not_fired=["matmul-add-commute"], target="onnx")


def test_bias_first_add_becomes_gemm_and_double_is_allowed():
    m = parse_model(H + f"""
        agraph (double[3, 4] x, double[4, 5] w) => (double[3, 5] y) {inits(init("b", 5, dtype=np.float64))} {{
            p = MatMul(x, w)
            y = Add(b, p)
        }}""")
    check_rewrite(m, ["Gemm"], fired=["matmul-add-commute", "gemm-matmul-add"])


def test_batched_matmul_add_stays():
    # Gemm is 2-D only
    m = parse_model(H + f"""
        agraph (float[2, 3, 4] x) => (float[2, 3, 5] y) {inits(init("w", 4, 5), init("b", 5))} {{
            p = MatMul(x, w)
            y = Add(p, b)
        }}""")
    check_rewrite(m, ["MatMul", "Add"], not_fired=["gemm-matmul-add"])


@pytest.mark.parametrize("bias", [[2, 3, 5], [6, 5]])
def test_add_that_broadcasts_the_product_to_a_bigger_shape_stays(bias):
    # [3, 5] + [2, 3, 5] is [2, 3, 5]; [1, 5] + [6, 5] is [6, 5]: Gemm's C cannot grow the result
    rows = 1 if bias == [6, 5] else 3
    out = "2, 3, 5" if len(bias) == 3 else "6, 5"
    m = parse_model(H + f"""
        agraph (float[{rows}, 4] x) => (float[{out}] y) {inits(init("w", 4, 5), init("b", *bias))} {{
            p = MatMul(x, w)
            y = Add(p, b)
        }}""")
    check_rewrite(m, ["MatMul", "Add"], not_fired=["gemm-matmul-add"], target="onnx")


def test_add_that_broadcasts_a_gemm_without_c_stays():
    # Gemm(x, w) + b with b [2, 3, 5]: the sum is [2, 3, 5] (guard: the Add leaves the
    # product's shape, and C of rank <= 2)
    m = parse_model(H + f"""
        agraph (float[3, 4] x, float[4, 5] w) => (float[2, 3, 5] y) {inits(init("b", 2, 3, 5))} {{
            g = Gemm(x, w)
            y = Add(g, b)
        }}""")
    check_rewrite(m, ["Gemm", "Add"], not_fired=["gemm-add-bias"], target="onnx")


def test_scaled_batched_product_keeps_its_bias_add():
    # Add(Mul(MatMul(x, w), 0.5), b) with x 3-D: the scale goes into FusedMatMul's alpha, but
    # Gemm is 2-D only (guard: a and b 2-D), so the bias stays an Add
    m = parse_model(H + f"""
        agraph (float[2, 3, 4] x) => (float[2, 3, 5] y) {inits(init("w", 4, 5), init("b", 5))} {{
            s = Constant <value = float {{0.5}}> ()
            p = MatMul(x, w)
            r = Mul(p, s)
            y = Add(r, b)
        }}""")
    check_rewrite(m, ["com.microsoft.FusedMatMul", "Add"], fired=["fused-matmul-mul-scalar"],
                  not_fired=["gemm-fused-matmul-add"])


def test_matmul_also_used_elsewhere_keeps_its_add():
    # the product is an output too: Gemm + MatMul would cost as much as MatMul + Add
    m = parse_model(H + f"""
        agraph (float[3, 4] x) => (float[3, 5] y, float[3, 5] p) {inits(init("w", 4, 5), init("b", 5))} {{
            p = MatMul(x, w)
            y = Add(p, b)
        }}""")
    check_shared(m, ["MatMul", "Add"], target="onnx")


def test_integer_matmul_add_stays():
    # no integer Gemm kernel in onnxruntime
    m = parse_model(H + f"""
        agraph (int64[3, 4] x) =>
              (int64[3, 5] y) {inits(init("w", 4, 5, dtype=np.int64), init("b", 5, dtype=np.int64))} {{
            p = MatMul(x, w)
            y = Add(p, b)
        }}""")
    check_rewrite(m, ["MatMul", "Add"], not_fired=["gemm-matmul-add"])


# ---- Reshape + 2-D Gemm + Reshape (GPT-2's Conv1D) -> MatMul + Add on the 3-D input

def conv1d(target: str, gemm: str = "Gemm", w: str = "4, 5", bias: str = ", b", lead: str = "B, S",
           out: str = "B, S, 5", b: tuple = (5,)) -> str:
    """x [*lead, 4] flattened to [-1, 4], a Gemm with C of shape `b`, and the product reshaped by `target`."""
    return H + f"""
        agraph (float[{lead}, 4] x) => (float[{out}] y) {inits(init("w", *map(int, w.split(", "))), init("b", *b))} {{
            f = Constant <value = int64[2] {{-1, 4}}> ()
            x2 = Reshape(x, f)
            g = {gemm} (x2, w{bias})
            {target}
            y = Reshape(g, t)
        }}"""


RUNTIME_TARGET = """s = Shape(x)
            i0 = Constant <value = int64 {0}> ()
            i1 = Constant <value = int64 {1}> ()
            d0 = Gather(s, i0)
            d1 = Gather(s, i1)
            ax = Constant <value = int64[1] {0}> ()
            u0 = Unsqueeze(d0, ax)
            u1 = Unsqueeze(d1, ax)
            n = Constant <value = int64[1] {5}> ()
            t = Concat <axis = 0> (u0, u1, n)"""
DIMS = {"B": 2, "S": 3}


@pytest.mark.parametrize("b", [(5,), (1, 5)])
def test_conv1d_with_a_runtime_target_becomes_matmul_add(b):
    # the Reshapes, the Gemm and the six ops that build the target at run time go
    check_rewrite(parse_model(conv1d(RUNTIME_TARGET, b=b)), ["MatMul", "Add"], dims=DIMS,
                  fired=["gemm-flat-find", "gemm-flat-matmul-add"])


def test_conv1d_with_a_literal_target_and_trans_b_or_no_bias():
    literal = "t = Constant <value = int64[3] {2, 3, 5}> ()"
    static = {"lead": "2, 3", "out": "2, 3, 5"}
    trans_b = parse_model(conv1d(literal, "Gemm <transB = 1>", w="5, 4", **static))
    # node count: the fewest ops (the roofline keeps Reshape -> Gemm -> Reshape, whose views it
    # prices below an Add). MatMul(x, Transpose(w)): the transposed weight is folded (as many
    # bytes as the model's)
    check_rewrite(trans_b, ["MatMul", "Add"], fired=["gemm-flat-matmul-t-add"], cost_model="node-count")
    check_rewrite(trans_b, ["MatMul", "Add"], target="onnx", cost_model="node-count")
    check_rewrite(parse_model(conv1d(literal, bias="", **static)), ["MatMul"], fired=["gemm-flat-matmul"],
                  cost_model="node-count")
    # MatMul(x, Transpose(w)) without a bias: the constant weight's transpose is folded
    check_rewrite(parse_model(conv1d(literal, "Gemm <transB = 1>", w="5, 4", bias="", **static)), ["MatMul"],
                  fired=["gemm-flat-matmul-t"], cost_model="node-count")


@pytest.mark.parametrize("case", ["leading-dims-swapped", "alpha"])
def test_conv1d_that_does_not_restore_the_leading_dims_or_scales_stays(case):
    # [S, B, 5] is not x's leading dims; alpha = 0.5 is not a plain MatMul + Add
    swapped = case != "alpha"
    target = f"t = Constant <value = int64[3] {{{'3, 2' if swapped else '2, 3'}, 5}}> ()"
    gemm = "Gemm <alpha = 0.5>" if case == "alpha" else "Gemm"
    m = parse_model(conv1d(target, gemm, lead="2, 3", out="3, 2, 5" if swapped else "2, 3, 5"))
    check_rewrite(m, ["Reshape", "Gemm", "Reshape"], not_fired=["gemm-flat-find"])


@pytest.mark.parametrize("trans_b", [0, 1])
def test_conv1d_with_a_bias_per_row_stays(trans_b):
    # C of shape [6, 5] = [B * S, N] holds one row per flattened position (guard: C of one row,
    # which broadcasts over [B, S, N] as over [M, N]): the flat Gemm is found, not rewritten
    gemm, w = ("Gemm <transB = 1>", "5, 4") if trans_b else ("Gemm", "4, 5")
    m = parse_model(conv1d("t = Constant <value = int64[3] {2, 3, 5}> ()", gemm, w=w, b=(6, 5),
                           lead="2, 3", out="2, 3, 5"))
    check_rewrite(m, ["Reshape", "Gemm", "Reshape"], fired=["gemm-flat-find"],
                  not_fired=["gemm-flat-matmul-t-add" if trans_b else "gemm-flat-matmul-add"])


@pytest.mark.parametrize("trans_b", [0, 1])
def test_conv1d_without_bias_that_swaps_the_leading_dims_stays(trans_b):
    # the target [3, 2, 5] is not x's leading dims [2, 3] (guard of gemm-flat-find)
    gemm, w = ("Gemm <transB = 1>", "5, 4") if trans_b else ("Gemm", "4, 5")
    m = parse_model(conv1d("t = Constant <value = int64[3] {3, 2, 5}> ()", gemm, w=w, bias="",
                           lead="2, 3", out="3, 2, 5"))
    check_rewrite(m, ["Reshape", "Gemm", "Reshape"],
                  not_fired=["gemm-flat-find", "gemm-flat-matmul-t" if trans_b else "gemm-flat-matmul"])


def test_conv1d_of_an_empty_value_keeps_the_target_s_last_dim():
    # x [0, 3, 4]: B * S = 0, so the flat product [0, 5] reshaped to [0, 3, 7] has x's leading
    # dims and the target's last dim 7, not the Gemm's 5 (it became MatMul(x, w): [0, 3, 5])
    m = parse_model(conv1d("t = Constant <value = int64[3] {0, 3, 7}> ()", lead="0, 3", out="0, 3, 7"))
    res = check_rewrite(m, ["Reshape", "Gemm", "Reshape"], not_fired=["gemm-flat-find"])
    assert [d.dim_value for d in res.model.graph.output[0].type.tensor_type.shape.dim] == [0, 3, 7]


# ---- Transpose folded into Gemm

def test_matmul_of_a_transposed_matrix_becomes_gemm_trans_b():
    m = parse_model(H + """
        agraph (float[3, 4] x, float[5, 4] w) => (float[3, 5] y) {
            t = Transpose <perm = [1, 0]> (w)
            y = MatMul(x, t)
        }""")
    res = check_rewrite(m, ["Gemm"], fired=["gemm-matmul-transpose-b"], target="onnx")
    assert attr(res.model, "Gemm", "transB") == 1


def test_transposed_matmul_with_bias_becomes_one_gemm_trans_a():
    m = parse_model(H + f"""
        agraph (float[4, 3] x, float[4, 5] w) => (float[3, 5] y) {inits(init("b", 5))} {{
            t = Transpose <perm = [1, 0]> (x)
            p = MatMul(t, w)
            y = Add(p, b)
        }}""")
    res = check_rewrite(m, ["Gemm"], fired=["gemm-matmul-transpose-a", "gemm-add-bias"], target="onnx")
    assert attr(res.model, "Gemm", "transA") == 1


def test_gemm_of_transposes_flips_its_flags():
    m = parse_model(H + f"""
        agraph (float[4, 3] x, float[4, 5] w) => (float[3, 5] y) {inits(init("b", 5))} {{
            ta = Transpose <perm = [1, 0]> (x)
            tb = Transpose <perm = [1, 0]> (w)
            y = Gemm <transB = 1, alpha = 0.5> (ta, tb, b)
        }}""")
    res = check_rewrite(m, ["Gemm"], fired=["gemm-transpose-a", "gemm-transpose-b"], target="onnx")
    assert (attr(res.model, "Gemm", "transA"), attr(res.model, "Gemm", "transB")) == (1, 0)
    assert attr(res.model, "Gemm", "alpha") == 0.5


def test_gemm_without_c_needs_opset_11():
    # MatMul(x, Transpose(w)) and MatMul(Transpose(x2), w2) at opset 10, where Gemm's C is required
    m = parse_model(header(10) + """
        agraph (float[3, 4] x, float[5, 4] w, float[4, 3] x2, float[4, 5] w2) => (float[3, 5] y, float[3, 5] z) {
            t = Transpose <perm = [1, 0]> (w)
            y = MatMul(x, t)
            t2 = Transpose <perm = [1, 0]> (x2)
            z = MatMul(t2, w2)
        }""")
    check_rewrite(m, ["Transpose", "MatMul", "Transpose", "MatMul"],
                  not_fired=["gemm-matmul-transpose-b", "gemm-matmul-transpose-a"], target="onnx")


def test_gemm_of_identity_transposes_keeps_its_flags():
    # Transpose with perm [0, 1] changes nothing (guard: perm [1, 0]): transA and transB stay 0
    m = parse_model(H + f"""
        agraph (float[3, 4] x, float[4, 5] w) => (float[3, 5] y) {inits(init("b", 5))} {{
            ta = Transpose <perm = [0, 1]> (x)
            tb = Transpose <perm = [0, 1]> (w)
            y = Gemm <alpha = 0.5> (ta, tb, b)
        }}""")
    res = check_rewrite(m, ["Gemm"], not_fired=["gemm-transpose-a", "gemm-transpose-b"], target="onnx")
    assert (attr(res.model, "Gemm", "transA"), attr(res.model, "Gemm", "transB")) == (0, 0)


def test_shared_transpose_stays():
    # the transposed matrix is an output too: folding it into Gemm saves nothing
    m = parse_model(H + """
        agraph (float[3, 4] x, float[5, 4] w) => (float[3, 5] y, float[4, 5] t) {
            t = Transpose <perm = [1, 0]> (w)
            y = MatMul(x, t)
        }""")
    check_shared(m, ["Transpose", "MatMul"], target="onnx")


# ---- Transpose of the last two axes folded into FusedMatMul

def test_batched_matmul_of_a_transposed_batch_becomes_fused_matmul():
    m = parse_model(H + """
        agraph (float[2, 3, 4, 5] a, float[2, 3, 6, 5] b) => (float[2, 3, 4, 6] y) {
            t = Transpose <perm = [0, 1, 3, 2]> (b)
            y = MatMul(a, t)
        }""")
    res = check_rewrite(m, ["com.microsoft.FusedMatMul"], fired=["fused-matmul-transpose-b"])
    assert (attr(res.model, "FusedMatMul", "transA"), attr(res.model, "FusedMatMul", "transB")) == (0, 1)


def test_both_inputs_transposed_fold_into_one_fused_matmul():
    m = parse_model(H + """
        agraph (float[2, 5, 4] a, float[2, 6, 5] b) => (float[2, 4, 6] y) {
            ta = Transpose <perm = [0, 2, 1]> (a)
            tb = Transpose <perm = [0, 2, 1]> (b)
            y = MatMul(ta, tb)
        }""")
    res = check_rewrite(m, ["com.microsoft.FusedMatMul"],
                        fired=["fused-matmul-transpose-a", "fused-matmul-transpose-b",
                               "fused-matmul-fold-transpose-a", "fused-matmul-fold-transpose-b"])
    assert (attr(res.model, "FusedMatMul", "transA"), attr(res.model, "FusedMatMul", "transB")) == (1, 1)


@pytest.mark.parametrize("side", ["a", "b"])
def test_a_transpose_stays_out_of_a_fused_matmul_with_a_vector_operand(side):
    # onnxruntime's FusedMatMul does not apply transA / transB as MatMul would when the other
    # operand is a vector: FusedMatMul(Transpose(a), v) folded into transA gave other values
    # (`eqsat rules check --default --seed 2` found it)
    ms = 'opset_import: ["" : 18, "com.microsoft" : 1]>'
    body = ("t = Transpose <perm = [1, 0]> (a)\n y = com.microsoft.FusedMatMul(t, v)" if side == "a" else
            "t = Transpose <perm = [1, 0]> (a)\n y = com.microsoft.FusedMatMul(v, t)")
    m = parse_model(f"<ir_version: 8, {ms}\n agraph (float[3, 3] a, float[3] v) => (float[3] y) {{ {body} }}")
    res = check_rewrite(m, ["Transpose", "com.microsoft.FusedMatMul"],
                        not_fired=[f"fused-matmul-fold-transpose-{side}"])
    assert (attr(res.model, "FusedMatMul", "transA"), attr(res.model, "FusedMatMul", "transB")) == (0, 0)


def test_transposed_matrix_times_a_batch_becomes_fused_matmul():
    # b is 2-D and broadcast over a's batch
    m = parse_model(H + """
        agraph (float[2, 3, 4] a, float[6, 4] b) => (float[2, 3, 6] y) {
            t = Transpose <perm = [1, 0]> (b)
            y = MatMul(a, t)
        }""")
    check_rewrite(m, ["com.microsoft.FusedMatMul"], fired=["fused-matmul-transpose-b"])


def test_transpose_of_other_axes_stays():
    # [0, 2, 1, 3] swaps two batch axes, not the last two
    m = parse_model(H + """
        agraph (float[2, 3, 4, 5] a, float[2, 6, 4, 5] b) => (float[2, 4, 3, 6] y) {
            ta = Transpose <perm = [0, 2, 1, 3]> (a)
            tb = Transpose <perm = [0, 2, 3, 1]> (b)
            y = MatMul(ta, tb)
        }""")
    check_rewrite(m, ["Transpose", "Transpose", "MatMul"],
                  not_fired=["fused-matmul-transpose-a", "fused-matmul-transpose-b"])


def test_fused_matmul_needs_the_ort_target():
    m = parse_model(H + """
        agraph (float[2, 3, 4, 5] a, float[2, 3, 6, 5] b) => (float[2, 3, 4, 6] y) {
            t = Transpose <perm = [0, 1, 3, 2]> (b)
            y = MatMul(a, t)
        }""")
    check_rewrite(m, ["Transpose", "MatMul"], not_fired=["fused-matmul-transpose-b"], target="onnx")


# ---- scalar scale -> FusedMatMul alpha

def test_attention_scores_become_one_fused_matmul():
    # Div(MatMul(q, Transpose(k)), sqrt(d)): transB and alpha = 1/8
    m = parse_model(H + """
        agraph (float[2, 3, 4, 8] q, float[2, 3, 4, 8] k) => (float[2, 3, 4, 4] y) {
            t = Transpose <perm = [0, 1, 3, 2]> (k)
            s = MatMul(q, t)
            d = Constant <value = float {8.0}> ()
            y = Div(s, d)
        }""")
    res = check_rewrite(m, ["com.microsoft.FusedMatMul"],
                        fired=["fused-matmul-transpose-b", "fused-matmul-div-scalar-fused"])
    assert attr(res.model, "FusedMatMul", "alpha") == 0.125
    assert attr(res.model, "FusedMatMul", "transB") == 1


@pytest.mark.parametrize("form,rule", [
    ("y = Mul(p, s)", "fused-matmul-mul-scalar"),
    ("y = Mul(s, p)", "fused-matmul-mul-scalar-left"),
    ("y = Div(p, s)", "fused-matmul-div-scalar"),
])
def test_scaled_product_becomes_fused_matmul_alpha(form, rule):
    m = parse_model(H + f"""
        agraph (float[2, 3, 4] a, float[2, 4, 5] b) => (float[2, 3, 5] y) {{
            s = Constant <value = float[1] {{0.25}}> ()
            p = MatMul(a, b)
            {form}
        }}""")
    res = check_rewrite(m, ["com.microsoft.FusedMatMul"], fired=[rule])
    assert attr(res.model, "FusedMatMul", "alpha") == (4.0 if "Div" in form else 0.25)


def test_scaled_inputs_multiply_into_alpha():
    # q * 0.5 and k * 0.25 scaled before the product (as some exporters split 1/sqrt(d))
    m = parse_model(H + """
        agraph (float[2, 4, 8] q, float[2, 8, 4] k) => (float[2, 4, 4] y) {
            s1 = Constant <value = float {0.5}> ()
            s2 = Constant <value = float {0.25}> ()
            qs = Mul(q, s1)
            ks = Mul(k, s2)
            y = MatMul(qs, ks)
        }""")
    res = check_rewrite(m, ["com.microsoft.FusedMatMul"],
                        fired=["fused-matmul-scaled-a", "fused-matmul-scaled-b-fused"])
    assert attr(res.model, "FusedMatMul", "alpha") == 0.125


@pytest.mark.parametrize("body, rule", [
    ("p = MatMul(a, b)\n ps = Mul(p, c1)\n y = Mul(ps, c2)", "fused-matmul-mul-scalar-fused"),
    ("p = MatMul(a, b)\n ps = Mul(c1, p)\n y = Mul(c2, ps)", "fused-matmul-mul-scalar-left-fused"),
    ("p = MatMul(a, b)\n ps = Mul(p, c1)\n y = Div(ps, c1)", "fused-matmul-div-scalar-fused"),
    ("as = Mul(a, c1)\n bs = Mul(b, c2)\n y = MatMul(as, bs)", "fused-matmul-scaled-b-fused"),
])
def test_scales_on_either_side_of_one_are_not_combined(body, rule):
    # (a.b * 1e30) * 1e-30 is inf where a.b exceeds 3.4e8 (a of 1e9 here): as one alpha of 1
    # it was a.b, finite; the scales combine only where both are at most 1 or both at least 1,
    # so that the intermediate cannot overflow (or underflow) where the combined scale does not
    m = parse_model(H + f"""
        agraph (float[2, 4, 8] a, float[2, 8, 4] b) => (float[2, 4, 4] y) {{
            c1 = Constant <value = float {{1e30}}> ()
            c2 = Constant <value = float {{1e-30}}> ()
            {body}
        }}""")
    rng = np.random.default_rng(1)
    feeds = {"a": (rng.standard_normal((2, 4, 8)) * 1e9).astype(np.float32),
             "b": rng.standard_normal((2, 8, 4)).astype(np.float32)}
    check_rewrite(m, (["com.microsoft.FusedMatMul", "Mul"], ["com.microsoft.FusedMatMul", "Div"],
                      ["Mul", "Mul", "MatMul"], ["Mul", "MatMul", "Div"]),
                  feeds=feeds, not_fired=[rule], ort_optimize=False)


@pytest.mark.parametrize("c1, c2", [("1e30", "1e-30"), ("1e-30", "1e30")])
def test_a_scale_outside_2_to_the_16_stays_in_its_operand(c1, c2):
    # (a * 1e30) . (b * 1e-30) with b of 2e15 is about 2e15; with b's scale moved out as alpha
    # ((a * 1e30) . b * 1e-30) the product overflowed first: inf. A moved scale is within
    # [2^-16, 2^16] (0.125 and d^-0.25 are)
    m = parse_model(H + f"""
        agraph (float[2, 4, 8] a, float[2, 8, 4] b) => (float[2, 4, 4] y) {{
            k1 = Constant <value = float {{{c1}}}> ()
            k2 = Constant <value = float {{{c2}}}> ()
            as = Mul(a, k1)
            bs = Mul(b, k2)
            y = MatMul(as, bs)
        }}""")
    rng = np.random.default_rng(2)
    big = "b" if c1 == "1e30" else "a"
    feeds = {n: (rng.standard_normal(s) * (2e15 if n == big else 1)).astype(np.float32)
             for n, s in (("a", (2, 4, 8)), ("b", (2, 8, 4)))}
    check_rewrite(m, ["Mul", "Mul", "MatMul"], feeds=feeds, ort_optimize=False,
                  not_fired=["fused-matmul-scaled-a", "fused-matmul-scaled-b"])


def test_scaled_right_operand_becomes_fused_matmul_alpha():
    m = parse_model(H + """
        agraph (float[2, 4, 8] q, float[2, 8, 6] k) => (float[2, 4, 6] y) {
            s = Constant <value = float {0.25}> ()
            ks = Mul(k, s)
            y = MatMul(q, ks)
        }""")
    res = check_rewrite(m, ["com.microsoft.FusedMatMul"], fired=["fused-matmul-scaled-b"])
    assert attr(res.model, "FusedMatMul", "alpha") == 0.25


def test_scale_and_transposes_combine_in_llama_form():
    # Mul(MatMul(Transpose(q), Transpose(k)), 0.125) with both transposes of the last two axes
    m = parse_model(H + """
        agraph (float[1, 2, 8, 4] q, float[1, 2, 8, 4] k) => (float[1, 2, 4, 4] y) {
            tq = Transpose <perm = [0, 1, 3, 2]> (q)
            s = Constant <value = float {0.125}> ()
            p = MatMul(tq, k)
            y = Mul(p, s)
        }""")
    res = check_rewrite(m, ["com.microsoft.FusedMatMul"], fired=["fused-matmul-mul-scalar"])
    assert attr(res.model, "FusedMatMul", "alpha") == 0.125
    assert attr(res.model, "FusedMatMul", "transA") == 1


@pytest.mark.parametrize("body,rule,alpha", [
    # scale on the left of a product whose k is transposed
    ("p = MatMul(q, kt)\ny = Mul(p, s)", "fused-matmul-mul-scalar-fused", 0.5),
    ("p = MatMul(q, kt)\ny = Mul(s, p)", "fused-matmul-mul-scalar-left-fused", 0.5),
    # scaled q times a transposed k: the Transpose folds first, then the scale
    ("qs = Mul(q, s)\ny = MatMul(qs, kt)", "fused-matmul-scaled-a-fused", 0.5),
    # two scales, one after the other
    ("p = MatMul(q, kt)\nr = Mul(p, s)\ny = Div(r, s)", "fused-matmul-div-scalar-fused", 1.0),
])
def test_scales_fold_into_a_fused_matmul_with_trans_b(body, rule, alpha):
    m = parse_model(H + f"""
        agraph (float[2, 4, 8] q, float[2, 6, 8] k) => (float[2, 4, 6] y) {{
            s = Constant <value = float {{0.5}}> ()
            kt = Transpose <perm = [0, 2, 1]> (k)
            {body}
        }}""")
    res = check_rewrite(m, ["com.microsoft.FusedMatMul"], fired=["fused-matmul-transpose-b", rule])
    assert (attr(res.model, "FusedMatMul", "alpha"), attr(res.model, "FusedMatMul", "transB")) == (alpha, 1)


def test_scaled_linear_layer_becomes_gemm_with_alpha():
    # Add(Mul(MatMul(x, w), 0.5), b), 2-D: the FusedMatMul's alpha goes into a Gemm
    m = parse_model(H + f"""
        agraph (float[3, 4] x) => (float[3, 5] y) {inits(init("w", 4, 5), init("b", 5))} {{
            s = Constant <value = float {{0.5}}> ()
            p = MatMul(x, w)
            r = Mul(p, s)
            y = Add(r, b)
        }}""")
    res = check_rewrite(m, ["Gemm"], fired=["fused-matmul-mul-scalar", "gemm-fused-matmul-add"])
    assert attr(res.model, "Gemm", "alpha") == 0.5


@pytest.mark.parametrize("op, plain, fused", [
    ("Mul(p, s)", "fused-matmul-mul-scalar", "fused-matmul-mul-scalar-fused"),
    ("Mul(s, p)", "fused-matmul-mul-scalar-left", "fused-matmul-mul-scalar-left-fused"),
    ("Div(p, s)", "fused-matmul-div-scalar", "fused-matmul-div-scalar-fused"),
])
def test_scale_that_adds_a_dimension_stays(op, plain, fused):
    # [3, 5] * [1, 1, 1] is [1, 3, 5] (guard: the scale's rank at most the product's), on a
    # MatMul and on a FusedMatMul (k transposed): the scale stays out of alpha
    m = parse_model(H + f"""
        agraph (float[3, 4] a, float[4, 5] b, float[3, 8] q, float[5, 8] k) => (float[1, 3, 5] y, float[1, 3, 5] z) {{
            s = Constant <value = float[1, 1, 1] {{0.5}}> ()
            p = MatMul(a, b)
            y = {op}
            kt = Transpose <perm = [1, 0]> (k)
            pt = MatMul(q, kt)
            z = {op.replace("p", "pt", 1)}
        }}""")
    scale = op.split("(")[0]
    check_rewrite(m, ["MatMul", scale, "com.microsoft.FusedMatMul", scale], fired=["fused-matmul-transpose-b"],
                  not_fired=[plain, fused])


@pytest.mark.parametrize("body, rule", [
    ("qs = Mul(q, s)\n y = MatMul(qs, k)", "fused-matmul-scaled-a"),
    ("ks = Mul(k, s)\n y = MatMul(q, ks)", "fused-matmul-scaled-b"),
    ("qs = Mul(q, s)\n y = MatMul(qs, kt)", "fused-matmul-scaled-a-fused"),
    ("ks = Mul(k2, s)\n kst = Transpose <perm = [0, 2, 1]> (ks)\n y = MatMul(q, kst)", "fused-matmul-scaled-b-fused"),
])
def test_scaled_operand_whose_scale_adds_a_dimension_stays(body, rule):
    # a 2-D operand times a [1, 1, 1] scale is 3-D (guard: the scale's rank at most the
    # operand's): the product of the unscaled operand would be 2-D
    m = parse_model(H + f"""
        agraph (float[4, 8] q, float[8, 6] k, float[6, 8] k2) => (float[1, 4, 6] y) {{
            s = Constant <value = float[1, 1, 1] {{0.5}}> ()
            kt = Transpose <perm = [1, 0]> (k2)
            {body}
        }}""")
    fused = rule.endswith("-fused")
    check_rewrite(m, ["Mul", "com.microsoft.FusedMatMul" if fused else "MatMul"],
                  fired=["fused-matmul-transpose-b"] if fused else [], not_fired=[rule])


def test_per_column_scale_stays():
    # a [5] vector is not a scalar
    m = parse_model(H + f"""
        agraph (float[3, 4] a, float[4, 5] b) => (float[3, 5] y) {inits(init("s", 5))} {{
            p = MatMul(a, b)
            y = Mul(p, s)
        }}""")
    check_rewrite(m, ["MatMul", "Mul"], not_fired=["fused-matmul-mul-scalar"])


def test_scaled_product_also_used_unscaled_stays():
    m = parse_model(H + """
        agraph (float[2, 3, 4] a, float[2, 4, 5] b) => (float[2, 3, 5] y, float[2, 3, 5] p) {
            s = Constant <value = float {0.25}> ()
            p = MatMul(a, b)
            y = Mul(p, s)
        }""")
    check_shared(m, ["MatMul", "Mul"])


def test_scaled_integer_product_stays():
    # no FusedMatMul for integers (and the scale is a ScalarI, not a float alpha)
    m = parse_model(H + """
        agraph (int64[2, 3, 4] a, int64[2, 4, 5] b) => (int64[2, 3, 5] y) {
            s = Constant <value = int64 {3}> ()
            p = MatMul(a, b)
            y = Mul(p, s)
        }""")
    check_rewrite(m, ["MatMul", "Mul"], not_fired=["fused-matmul-mul-scalar"])


def test_scaled_product_stays_on_the_onnx_target():
    m = parse_model(H + """
        agraph (float[2, 3, 4] a, float[2, 4, 5] b) => (float[2, 3, 5] y) {
            s = Constant <value = float {0.5}> ()
            p = MatMul(a, b)
            y = Mul(p, s)
        }""")
    check_rewrite(m, ["MatMul", "Mul"], not_fired=["fused-matmul-mul-scalar"], target="onnx")


def test_float16_product_stays():
    m = parse_model(H + """
        agraph (float16[2, 3, 4] a, float16[2, 4, 5] b) => (float16[2, 3, 5] y) {
            s0 = Constant <value = float {0.5}> ()
            s = Cast <to = 10> (s0)
            p = MatMul(a, b)
            y = Mul(p, s)
        }""")
    check_rewrite(m, ["MatMul", "Mul"], not_fired=["fused-matmul-mul-scalar"], rtol=1e-2, atol=1e-2)


# ---- Gemm + activation -> FusedGemm

@pytest.mark.parametrize("act,rule,extra", [
    ("Relu", "fused-gemm-relu", {}),
    ("Sigmoid", "fused-gemm-sigmoid", {}),
    ("Tanh", "fused-gemm-tanh", {}),
    ("LeakyRelu <alpha = 0.2>", "fused-gemm-leaky-relu", {"activation_alpha": 0.2}),
    ("HardSigmoid <alpha = 0.3, beta = 0.4>", "fused-gemm-hard-sigmoid",
     {"activation_alpha": 0.3, "activation_beta": 0.4}),
    ("Elu <alpha = 0.7>", "fused-gemm-elu", {"activation_alpha": 0.7}),
])
def test_linear_layer_and_activation_become_fused_gemm(act, rule, extra):
    m = parse_model(H + f"""
        agraph (float[3, 4] x) => (float[3, 5] y) {inits(init("w", 4, 5), init("b", 5))} {{
            p = MatMul(x, w)
            q = Add(p, b)
            y = {act}(q)
        }}""")
    res = check_rewrite(m, ["com.microsoft.FusedGemm"], fired=["gemm-matmul-add", rule])
    assert attr(res.model, "FusedGemm", "activation") == act.split()[0].encode()
    for k, v in extra.items():
        assert attr(res.model, "FusedGemm", k) == pytest.approx(v)


def test_gemm_with_flags_and_relu_keeps_the_flags():
    m = parse_model(H + f"""
        agraph (float[4, 3] x) => (float[3, 5] y) {inits(init("w", 5, 4), init("b", 5))} {{
            g = Gemm <transA = 1, transB = 1, alpha = 0.5, beta = 2.0> (x, w, b)
            y = Relu(g)
        }}""")
    res = check_rewrite(m, ["com.microsoft.FusedGemm"], fired=["fused-gemm-relu"])
    assert (attr(res.model, "FusedGemm", "transA"), attr(res.model, "FusedGemm", "transB")) == (1, 1)
    assert (attr(res.model, "FusedGemm", "alpha"), attr(res.model, "FusedGemm", "beta")) == (0.5, 2.0)


def test_gemm_and_activation_stay_on_the_onnx_target_and_for_double():
    m = parse_model(H + f"""
        agraph (float[3, 4] x, double[3, 4] d) => (float[3, 5] y, double[3, 5] e)
              {inits(init("w", 4, 5), init("b", 5),
                     init("wd", 4, 5, dtype=np.float64), init("bd", 5, dtype=np.float64))} {{
            h = Gemm(d, wd, bd)
            e = Relu(h)
            k = Gemm(x, w, b)
            y = Tanh(k)
        }}""")
    # double: onnxruntime has no FusedGemm kernel for it
    check_rewrite(m, ["Gemm", "Relu", "com.microsoft.FusedGemm"], fired=["fused-gemm-tanh"],
                  not_fired=["fused-gemm-relu"])
    check_rewrite(m, ["Gemm", "Relu", "Gemm", "Tanh"], not_fired=["fused-gemm-tanh"], target="onnx")


def test_double_gemm_keeps_every_activation():
    # onnxruntime's FusedGemm takes float only (guard: float32): one double Gemm read by each
    # of the six activations
    acts = ["Relu", "Sigmoid", "Tanh", "LeakyRelu <alpha = 0.2>", "HardSigmoid <alpha = 0.3, beta = 0.4>",
            "Elu <alpha = 0.7>"]
    body = "\n".join(f"y{i} = {a}(g)" for i, a in enumerate(acts))
    outs = ", ".join(f"double[3, 5] y{i}" for i in range(len(acts)))
    m = parse_model(H + f"""
        agraph (double[3, 4] x) => ({outs})
              {inits(init("w", 4, 5, dtype=np.float64), init("b", 5, dtype=np.float64))} {{
            g = Gemm(x, w, b)
            {body}
        }}""")
    check_rewrite(m, ["Gemm"] + [a.split()[0] for a in acts],
                  not_fired=["fused-gemm-relu", "fused-gemm-sigmoid", "fused-gemm-tanh", "fused-gemm-leaky-relu",
                             "fused-gemm-hard-sigmoid", "fused-gemm-elu"])


def test_gemm_also_used_without_activation_stays():
    m = parse_model(H + f"""
        agraph (float[3, 4] x) => (float[3, 5] y, float[3, 5] g) {inits(init("w", 4, 5), init("b", 5))} {{
            g = Gemm(x, w, b)
            y = Relu(g)
        }}""")
    check_shared(m, ["Gemm", "Relu"])


# ---- parallel MatMuls -> one MatMul + Split
# The group rules fire only where the hardware profile says that merging pays
# (merge_parallel_matmuls): not on the default cpu profile, where the merged MatMul is slower.
# The merge tests use the h200 profile, which has it; MERGE is their hardware option.
MERGE = {"hardware": "h200"}

def parallel(n: int, bias: bool, x_shape=(2, 5, 4), widths=(3, 3, 2, 4)) -> onnx.ModelProto:
    xs = ", ".join(map(str, x_shape))
    lead = ", ".join(map(str, x_shape[:-1]))
    ws = [init(f"w{i}", x_shape[-1], widths[i]) for i in range(n)]
    bs = [init(f"b{i}", widths[i]) for i in range(n)] if bias else []
    outs = ", ".join(f"float[{lead}, {widths[i]}] y{i}" for i in range(n))
    body = ""
    for i in range(n):
        if bias:
            add = f"Add(b{i}, m{i})" if i == 1 else f"Add(m{i}, b{i})"  # one bias first
            body += f"m{i} = MatMul(x, w{i})\ny{i} = {add}\n"
        else:
            body += f"y{i} = MatMul(x, w{i})\n"
    return parse_model(H + f"agraph (float[{xs}] x) => ({outs}) {inits(*ws, *bs)} {{\n{body}}}")


@pytest.mark.parametrize("opset", [11, 18])
def test_three_projections_become_one_matmul_and_split(opset):
    # opset 11: the Split's sizes are an attribute, from 13 an input
    m = parallel(3, bias=False)
    m.opset_import[0].version = opset
    res = check_rewrite(m, ["MatMul", "Split"], fired=["matmul-merge-3"], **MERGE)
    split = [n for n in res.model.graph.node if n.op_type == "Split"][0]
    assert len(split.output) == 3
    expected = (1, ["axis", "split"]) if opset == 11 else (2, ["axis"])
    assert (len(split.input), sorted(a.name for a in split.attribute)) == expected


def test_three_projections_with_bias_become_matmul_add_split():
    check_rewrite(parallel(3, bias=True), ["MatMul", "Add", "Split"], fired=["matmul-add-merge-3"], **MERGE)


def test_two_projections_tie_and_stay():
    # MatMul + Split costs as much as two MatMuls: the model's form is kept
    check_rewrite(parallel(2, bias=False), ["MatMul", "MatMul"], fired=["matmul-merge-2"], **MERGE)


def test_two_projections_with_bias_merge():
    check_rewrite(parallel(2, bias=True), ["MatMul", "Add", "Split"], fired=["matmul-add-merge-2"], **MERGE)


def test_two_dimensional_projections_with_bias_become_gemm_and_split():
    check_rewrite(parallel(3, bias=True, x_shape=(5, 4)), ["Gemm", "Split"],
                  fired=["matmul-add-merge-3", "gemm-matmul-add"], **MERGE)


@pytest.mark.parametrize("bias", [False, True])
def test_each_group_is_merged_once(bias):
    # 4 MatMuls on x: C(4,2) pairs, C(4,3) triples, one quadruple, and no merge of a merge
    res = check_rewrite(parallel(4, bias=bias), ["MatMul", "Split"] + (["Add"] if bias else []),
                        fired=["matmul-group-2", "matmul-group-3", "matmul-group-4", "matmul-merge-4"]
                        + (["matmul-bias-group-2", "matmul-bias-group-3", "matmul-bias-group-4",
                            "matmul-add-merge-4"] if bias else []), **MERGE)
    sat = res.report["saturation"]
    matches = sat["rule_matches"]
    assert (matches["matmul-merge-2"], matches["matmul-merge-3"], matches["matmul-merge-4"]) == (6, 4, 1)
    if bias:
        assert (matches["matmul-add-merge-2"], matches["matmul-add-merge-3"],
                matches["matmul-add-merge-4"]) == (6, 4, 1)
    assert sat["stop_reason"] == "saturated"
    assert sat["enodes"] < 400, sat["enodes"]


def test_matmuls_on_different_inputs_or_runtime_weights_stay():
    m = parse_model(H + f"""
        agraph (float[2, 4] x, float[2, 4] z, float[4, 3] r, float[4, 3] u) =>
              (float[2, 3] a, float[2, 3] b, float[2, 3] c, float[2, 3] d)
              {inits(init("w0", 4, 3), init("w1", 4, 3))} {{
            a = MatMul(x, w0)
            b = MatMul(z, w1)
            c = MatMul(x, r)
            d = MatMul(x, u)
        }}""")
    check_rewrite(m, ["MatMul"] * 4, not_fired=["matmul-merge-2", "matmul-merge-3"], **MERGE)


def test_biases_that_are_not_per_column_are_not_merged():
    # [2, 5, 3] biases (broadcast over the rows too) are not slices of one merged bias:
    # the MatMuls merge (3 -> MatMul + Split), the Adds stay
    m = parse_model(H + f"""
        agraph (float[2, 5, 4] x) => (float[2, 5, 3] a, float[2, 5, 3] b, float[2, 5, 3] c)
              {inits(*(init(f"w{i}", 4, 3) for i in range(3)), *(init(f"b{i}", 2, 5, 3) for i in range(3)))} {{
            m0 = MatMul(x, w0)
            a = Add(m0, b0)
            m1 = MatMul(x, w1)
            b = Add(m1, b1)
            m2 = MatMul(x, w2)
            c = Add(m2, b2)
        }}""")
    check_rewrite(m, ["MatMul", "Split", "Add", "Add", "Add"], fired=["matmul-group-3", "matmul-merge-3"],
                  not_fired=["matmul-bias-group-2", "matmul-bias-group-3", "matmul-add-merge-2",
                             "matmul-add-merge-3"], **MERGE)


def big_projections(bias: bool) -> onnx.ModelProto:
    """3 projections of x with 1 MiB weights: their concatenation is over the fold limit."""
    from onnx import TensorProto, helper, numpy_helper

    inits_ = [numpy_helper.from_array(RNG.standard_normal((512, 512)).astype(np.float32), f"w{i}") for i in range(3)]
    nodes = [helper.make_node("MatMul", ["x", f"w{i}"], [f"m{i}" if bias else f"y{i}"]) for i in range(3)]
    if bias:
        inits_ += [numpy_helper.from_array(RNG.standard_normal(512).astype(np.float32), f"b{i}") for i in range(3)]
        nodes += [helper.make_node("Add", [f"m{i}", f"b{i}"], [f"y{i}"]) for i in range(3)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 512])],
                          [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [2, 512]) for i in range(3)],
                          inits_)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def test_merged_weights_that_do_not_fold_are_never_a_runtime_concat():
    # the merge waits for the concatenated weight to be a constant; a Concat the oracle does
    # not fold is never extracted (with the biases, MatMul + Concat + Add + Split would have
    # cost fewer ops than the model's 6)
    m = big_projections(bias=True)
    res = optimized(m, **MERGE)
    assert "Concat" not in op_list(res.model)
    assert_same_outputs(m, res.model, rtol=1e-3, atol=1e-4)
    assert_verified(m, res)


def test_projections_with_weights_over_the_fold_limit_merge_into_a_constant_weight():
    # 3 x 1 MiB weights: the merged weight must be folded to one initializer
    check_rewrite(big_projections(bias=False), ["MatMul", "Split"], fired=["matmul-merge-3"], rtol=1e-3, atol=1e-4,
                  **MERGE)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("n", ["2", "3", "4"])  # strings: the rule coverage scan reads them in the names
def test_projections_stay_separate_on_the_cpu_profile(n, bias):
    # the default (cpu) profile: one MatMul [.., K] x [K, 3n] + Split is slower there than three
    # MatMuls [.., K] x [K, n] (onnxruntime, MLAS), so no group is formed, whatever the op count
    # (guard: the hardware profile says that merging pays)
    k = int(n)
    res = check_rewrite(parallel(k, bias=bias), ["MatMul"] * k + (["Add"] * k if bias else []),
                        not_fired=[f"matmul-group-{n}", f"matmul-merge-{n}"]
                        + ([f"matmul-bias-group-{n}", f"matmul-add-merge-{n}"] if bias else []))
    assert res.report["saturation"]["rule_matches"].get("matmul-group-2", 0) == 0


def test_hardware_profile_decides_the_merge(tmp_path):
    # a profile file with merge_parallel_matmuls set merges; the same file without it does not
    import json

    from eqsat.extract.costs.roofline import HARDWARE_DIR

    prof = json.loads((HARDWARE_DIR / "cpu.json").read_text())
    prof["merge_parallel_matmuls"] = True
    on = tmp_path / "merging.json"
    on.write_text(json.dumps(prof))
    check_rewrite(parallel(3, bias=False), ["MatMul", "Split"], fired=["matmul-merge-3"], hardware=str(on))
    prof.pop("merge_parallel_matmuls")
    off = tmp_path / "plain.json"
    off.write_text(json.dumps(prof))
    check_rewrite(parallel(3, bias=False), ["MatMul"] * 3, not_fired=["matmul-group-3"], hardware=str(off))


@pytest.mark.parametrize("scale", ["0.1", "1e-300"])
def test_a_double_scale_stays_out_of_fused_matmul_alpha(scale):
    # alpha is a float attribute: 0.1 lost its double precision (3e-8 relative) and 1e-300
    # became 0, every output 0 where the original's were about 1e-300
    m = parse_model(H + f"""
        agraph (double[3, 4] a, double[4, 5] b) => (double[3, 5] y) {{
            s = Constant <value = double {{{scale}}}> ()
            p = MatMul(a, b)
            y = Mul(p, s)
        }}""")
    # (a float32 scale still folds: the test of Mul(MatMul(Transpose(q), ...), 0.125) above)
    check_rewrite(m, ["MatMul", "Mul"], not_fired=["fused-matmul-mul-scalar"], rtol=1e-15, atol=0.0)



# ---- alpha must be a float32: a product or quotient of scales computed in f64 that
# overflows (or underflows) float32 would be written as inf (or 0)


@pytest.mark.parametrize("body, rule", [
    # 1e30 * 1e30 = 1e60: inf as a float32 alpha
    ("p = MatMul(a, b)\n r = Mul(p, big)\n y = Mul(r, big)", "fused-matmul-mul-scalar-fused"),
    ("p = MatMul(a, b)\n r = Mul(big, p)\n y = Mul(big, r)", "fused-matmul-mul-scalar-left-fused"),
    ("p = MatMul(a, b)\n r = Mul(p, big)\n y = Div(r, tiny)", "fused-matmul-div-scalar-fused"),
    ("as = Mul(a, big)\n p = MatMul(as, b)\n y = Mul(p, big)", "fused-matmul-mul-scalar-fused"),
    ("as = Mul(a, big)\n bs = Mul(b, big)\n y = MatMul(as, bs)", "fused-matmul-scaled-b-fused"),
    ("bs = Mul(b, big)\n as = Mul(a, big)\n bt = Transpose <perm = [1, 0]> (b)\n p = MatMul(as, bt)\n"
     " y = Mul(p, big)", "fused-matmul-mul-scalar-fused"),
    # 1 / 1e-39 (a float32 subnormal) = 1e39: inf as a float32 alpha
    ("p = MatMul(a, b)\n y = Div(p, sub)", "fused-matmul-div-scalar"),
    # 1e-30 * 1e-30 = 1e-60: 0 as a float32 alpha
    ("p = MatMul(a, b)\n r = Mul(p, tiny)\n y = Mul(r, tiny)", "fused-matmul-mul-scalar-fused"),
])
def test_scales_whose_product_is_no_float32_stay_out_of_alpha(body, rule):
    m = parse_model(H + f"""
        agraph (float[3, 3] a, float[3, 3] b) => (float[3, 3] y) {{
            big = Constant <value = float {{1e30}}> ()
            tiny = Constant <value = float {{1e-30}}> ()
            sub = Constant <value = float {{1e-39}}> ()
            {body}
        }}""")
    res = optimized(m)
    for n in res.model.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.FLOAT:
                assert np.isfinite(a.f) and (a.f == 0 or abs(a.f) >= np.finfo(np.float32).tiny), (n.op_type, a)
    # a row of zeros gives 0 * inf = NaN with an infinite alpha; tiny products, 0 with alpha 0
    a = np.zeros((3, 3), np.float32)
    a[1] = 1e-20
    a[2] = 1e20
    b = np.full((3, 3), 1e-20, np.float32)
    assert_same_outputs(m, res.model, {"a": a, "b": b}, rtol=1e-5, atol=0, ort_optimize=False)
    assert_verified(m, res)
