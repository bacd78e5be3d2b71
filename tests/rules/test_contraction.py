"""rules/contraction.egg: a transformer MLP whose hidden width K is a multiple of 1024 gets 16
zero columns in its first weight and bias and 16 zero rows in its second, where the hardware
profile says that aliased rows are slower (contraction_alias_slowdown). The outputs stay the
same under onnxruntime; the padding is not taken where the hidden activation has another
use, where an activation does not map 0 to 0, where K is not such a multiple, where the
product has few rows, or on a profile that did not measure the slowdown."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from ..conftest import assert_same_outputs, assert_verified, check_rewrite, op_list, optimized

MS = "com.microsoft."
RNG = np.random.default_rng(0)
D, N = 8, 256  # model width in, width out: the second product is compute-bound (where aliasing slows it)


def with_weights(text: str, **arrays: np.ndarray) -> onnx.ModelProto:
    """An inline ONNX text model whose graph inputs named in `arrays` become initializers
    (weights of 1024 columns are too long to write as text)."""
    m = onnx.parser.parse_model(text)
    keep = [i for i in m.graph.input if i.name not in arrays]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    m.graph.initializer.extend(numpy_helper.from_array(a, k) for k, a in arrays.items())
    onnx.checker.check_model(m)
    return m


def weights(k: int, gated: bool = False, n: int = N) -> dict[str, np.ndarray]:
    w = {"w1": RNG.standard_normal((D, k)).astype(np.float32) * 0.3,
         "b1": RNG.standard_normal(k).astype(np.float32) * 0.3,
         "w2": RNG.standard_normal((k, n)).astype(np.float32) * 0.05,
         "b2": RNG.standard_normal(n).astype(np.float32)}
    if gated:
        w["w3"] = RNG.standard_normal((D, k)).astype(np.float32) * 0.3
    return w


def mlp(k: int = 1024, act: str = "g = Gelu(h)", rows: str = "2, 64", opset: int = 20, extra_out: bool = False,
        n: int = N) -> onnx.ModelProto:
    """x [rows.., D] -> MatMul w1 -> + b1 -> activation -> MatMul w2 -> + b2 (n columns)."""
    out = f", float[{rows}, {k}] g" if extra_out else ""
    return with_weights(f"""<ir_version: 9, opset_import: ["" : {opset}]>
        agraph (float[{rows}, {D}] x, float[{D}, {k}] w1, float[{k}] b1, float[{k}, {n}] w2, float[{n}] b2)
            => (float[{rows}, {n}] y{out}) {{
            p = MatMul(x, w1)
            h = Add(p, b1)
            {act}
            q = MatMul(g, w2)
            y = Add(q, b2)
        }}""", **weights(k, n=n))


# Gelu written out, on the product p: exporters before opset 20 (target ort fuses them into
# com.microsoft.Gelu and com.microsoft.FastGelu without a bias)
GELU_CONSTS = """
            r2 = Constant <value = float {1.4142135381698608}> ()
            one = Constant <value = float {1.0}> ()
            half = Constant <value = float {0.5}> ()
            three = Constant <value = float {3.0}> ()
            k3 = Constant <value = float {0.044715}> ()
            k = Constant <value = float {0.7978845834732056}> ()"""
ERF_GELU = "a = Div(p, r2)\n e = Erf(a)\n u = Add(one, e)\n pu = Mul(p, u)\n {out} = Mul(pu, half)"
TANH_GELU = ("c = Pow(p, three)\n m3 = Mul(k3, c)\n i = Add(p, m3)\n v = Mul(k, i)\n t = Tanh(v)\n"
             " ut = Add(one, t)\n put = Mul(p, ut)\n {out} = Mul(put, half)")


def widths(model: onnx.ModelProto) -> dict[str, list[int]]:
    """The shapes of the products' weights, by the weight's role: 'in' (the first product's,
    [D, K']) and 'out' (the second's, [K', n])."""
    init = {i.name: list(i.dims) for i in model.graph.initializer}
    out = {}
    for n in model.graph.node:
        if n.op_type == "MatMul" and n.input[1] in init:
            s = init[n.input[1]]
            out["in" if s[0] == D else "out"] = s
    return out


# ---- the padding taken

@pytest.mark.parametrize("act, ops, fired", [
    ("g = Gelu(h)", [MS + "BiasGelu"], "pad-contraction-bias-gelu"),               # BERT, ViT
    ('g = Gelu <approximate = "tanh"> (h)', [MS + "FastGelu"], "pad-contraction-fast-gelu-bias"),  # GPT-2
    ("g = Relu(h)", ["Relu", "Add"], "pad-contraction-relu"),
    ("s = Sigmoid(h)\n g = Mul(h, s)", [MS + "QuickGelu", "Add"], "pad-contraction-quick-gelu"),
])
def test_mlp_hidden_width_is_padded(act, ops, fired):
    m = mlp(1024, act)
    res = check_rewrite(m, ["MatMul", "MatMul", "Add"] + ops,
                        fired=["pad-contraction-source", fired, "pad-contraction"])
    assert widths(res.model) == {"in": [D, 1040], "out": [1040, N]}
    # the padded columns hold zeros, so the sum is the original's; with onnxruntime's own
    # optimizations off too (the model as eqsat wrote it)
    assert_same_outputs(m, res.model, rtol=1e-4, atol=1e-5, ort_optimize=False)


def test_a_bias_added_on_the_left_is_padded():
    w = weights(1024)
    m = with_weights(f"""<ir_version: 9, opset_import: ["" : 18]>
        agraph (float[2, 16, {D}] x, float[{D}, 1024] w1, float[1024] b1, float[1024, {N}] w2)
            => (float[2, 16, {N}] y) {{
            p = MatMul(x, w1)
            h = Add(b1, p)
            g = Relu(h)
            y = MatMul(g, w2)
        }}""", w1=w["w1"], b1=w["b1"], w2=w["w2"])
    rules = ["pad-contraction-bias-left", "pad-contraction-relu", "pad-contraction"]
    res = check_rewrite(m, ["MatMul", "Add", "Relu", "MatMul"], fired=rules)
    assert widths(res.model) == {"in": [D, 1040], "out": [1040, N]}


@pytest.mark.parametrize("gelu, op, rule", [
    (ERF_GELU, "Gelu", "pad-contraction-gelu-ms"),
    (TANH_GELU, "FastGelu", "pad-contraction-fast-gelu"),
], ids=["erf", "tanh"])
def test_a_written_out_gelu_without_bias_is_padded(gelu, op, rule):
    # opset 18 has no Gelu: the formula becomes com.microsoft.Gelu or FastGelu(x)
    w = weights(1024)
    m = with_weights(f"""<ir_version: 9, opset_import: ["" : 18]>
        agraph (float[2, 16, {D}] x, float[{D}, 1024] w1, float[1024, {N}] w2)
            => (float[2, 16, {N}] y) {{
            {GELU_CONSTS}
            p = MatMul(x, w1)
            {gelu.format(out="g")}
            y = MatMul(g, w2)
        }}""", w1=w["w1"], w2=w["w2"])
    res = check_rewrite(m, ["MatMul", MS + op, "MatMul"],
                        fired=["pad-contraction-source", rule, "pad-contraction"])
    assert widths(res.model) == {"in": [D, 1040], "out": [1040, N]}


def test_the_hidden_width_padded_for_target_onnx_too():
    # standard ops only: the bias Add and Gelu each carry the padding
    m = mlp(2048)
    res = check_rewrite(m, ["MatMul", "Add", "Gelu", "MatMul", "Add"], target="onnx",
                        fired=["pad-contraction-bias", "pad-contraction-gelu", "pad-contraction"])
    assert widths(res.model) == {"in": [D, 2064], "out": [2064, N]}


def test_a_gated_mlp_pads_both_branches():
    # Llama's MLP: SiLU(x W1) * (x W3) -> W2; both products padded alike, the Mul keeps zeros
    w = weights(1024, gated=True)
    m = with_weights(f"""<ir_version: 9, opset_import: ["" : 18]>
        agraph (float[2, 16, {D}] x, float[{D}, 1024] w1, float[{D}, 1024] w3, float[1024, {N}] w2)
            => (float[2, 16, {N}] y) {{
            p = MatMul(x, w1)
            s = Sigmoid(p)
            a = Mul(p, s)
            u = MatMul(x, w3)
            g = Mul(a, u)
            y = MatMul(g, w2)
        }}""", w1=w["w1"], w3=w["w3"], w2=w["w2"])
    res = check_rewrite(m, ["MatMul"] * 3 + [MS + "QuickGelu", "Mul"],
                        fired=["pad-contraction-gate", "pad-contraction"])
    init = {i.name: list(i.dims) for i in res.model.graph.initializer}
    assert sorted(init.values()) == [[D, 1040], [D, 1040], [1040, N]]


def test_symbolic_rows_count_as_many():
    # [batch, seq] rows: the cost models take a symbolic size as 16 unless --dim binds it
    m = mlp(1024, rows="batch, seq")
    res = check_rewrite(m, ["MatMul", "MatMul", "Add", MS + "BiasGelu"], dims={"batch": 2, "seq": 16})
    assert widths(res.model)["in"] == [D, 1040]
    few = optimized(m, dims={"batch": 1, "seq": 4})  # 4 rows bound: measured no slower
    assert widths(few.model)["in"] == [D, 1024]


def test_roofline_takes_the_padding_where_the_product_computes():
    # roofline: the aliased product computes contraction_alias_slowdown times slower; with 256
    # output columns the second product is compute-bound and the padding pays
    res = check_rewrite(mlp(1024, rows="2, 64", n=256), ["MatMul", "MatMul", "Add", MS + "BiasGelu"],
                        cost_model="roofline")
    assert widths(res.model) == {"in": [D, 1040], "out": [1040, 256]}
    # with 4 columns it is memory-bound: the slowdown costs nothing there, the padded
    # weights' bytes do, and the roofline keeps the width
    res = check_rewrite(mlp(1024, rows="2, 16", n=4), ["MatMul", "MatMul", "Add", MS + "BiasGelu"],
                        cost_model="roofline")
    assert widths(res.model) == {"in": [D, 1024], "out": [1024, 4]}


# ---- the padding not taken, and why

def test_a_width_that_does_not_alias_is_left_alone():
    # 768 columns of 4 bytes: rows 3 KiB apart, spread over the cache sets
    res = check_rewrite(mlp(768), ["MatMul", "MatMul", "Add", MS + "BiasGelu"], not_fired=["pad-contraction-source"])
    assert widths(res.model) == {"in": [D, 768], "out": [768, N]}


def test_an_activation_that_does_not_map_zero_to_zero_stops_the_padding():
    # Sigmoid(0) = 0.5: zero rows of the second weight would still hide it, but the rule
    # family keeps to activations that keep the padded columns zero
    res = check_rewrite(mlp(1024, "g = Sigmoid(h)"), ["MatMul", "MatMul", "Add", "Add", "Sigmoid"],
                        fired=["pad-contraction-source", "pad-contraction-bias"], not_fired=["pad-contraction"])
    assert widths(res.model) == {"in": [D, 1024], "out": [1024, N]}


def test_activations_of_a_product_that_is_not_padded_stay():
    # the only guard of the rules that carry the padding through an activation: their input
    # is padded. Here the first weight is a graph input, which pad-contraction-source leaves
    # alone, so none of the five activations is padded
    outs = [f"y{i} = MatMul(g{i}, v{i})" for i in range(5)]
    vs = ", ".join(f"float[1024, {N}] v{i}" for i in range(5))
    m = with_weights(f"""<ir_version: 9, opset_import: ["" : 20]>
        agraph (float[2, 16, {D}] x, float[{D}, 1024] w1, {vs})
            => ({", ".join(f"float[2, 16, {N}] y{i}" for i in range(5))}) {{
            {GELU_CONSTS}
            p = MatMul(x, w1)
            g0 = Relu(p)
            g1 = Gelu(p)
            {ERF_GELU.format(out="g2")}
            {TANH_GELU.format(out="g3")}
            s = Sigmoid(p)
            g4 = Mul(p, s)
            {chr(10).join(outs)}
        }}""", **{f"v{i}": weights(1024)["w2"] for i in range(5)})
    # g1 and g2 are one value (the erf Gelu), g3 the tanh Gelu (opset 20 has both)
    # (node-count ties the erf Gelu as onnx's Gelu and as com.microsoft's: either is right)
    check_rewrite(m, (["MatMul"] * 6 + ["Relu", "Gelu", "Gelu", MS + "QuickGelu"],
                      ["MatMul"] * 6 + ["Relu", "Gelu", MS + "Gelu", MS + "QuickGelu"]),
                  not_fired=["pad-contraction-source", "pad-contraction-relu", "pad-contraction-gelu",
                             "pad-contraction-gelu-ms", "pad-contraction-fast-gelu",
                             "pad-contraction-quick-gelu"], cost_model="node-count")


def test_a_runtime_bias_stops_the_padding():
    # the constant-bias guard of the fused Gelus (a bias padded with zeros): b is a graph input
    w = weights(1024)
    m = with_weights(f"""<ir_version: 9, opset_import: ["" : 20]>
        agraph (float[2, 16, {D}] x, float[1024] b, float[{D}, 1024] w1, float[1024, {N}] w2,
                float[1024, {N}] w3) => (float[2, 16, {N}] y, float[2, 16, {N}] z) {{
            p = MatMul(x, w1)
            h = Add(p, b)
            g = Gelu(h)
            y = MatMul(g, w2)
            f = Gelu <approximate = "tanh"> (h)
            z = MatMul(f, w3)
        }}""", w1=w["w1"], w2=w["w2"], w3=weights(1024)["w2"])
    res = check_rewrite(m, ["MatMul"] * 3 + [MS + "BiasGelu", MS + "FastGelu"],
                        fired=["pad-contraction-source"],
                        not_fired=["pad-contraction-bias-gelu", "pad-contraction-fast-gelu-bias",
                                   "pad-contraction"])
    assert widths(res.model)["in"] == [D, 1024]


def test_a_gate_with_a_factor_that_is_not_padded_stays():
    # the gate's guard: both factors padded alike; z is a graph input of 1024 columns
    w = weights(1024)
    m = with_weights(f"""<ir_version: 9, opset_import: ["" : 18]>
        agraph (float[2, 16, {D}] x, float[2, 16, 1024] z, float[{D}, 1024] w1, float[1024, {N}] w2)
            => (float[2, 16, {N}] y) {{
            p = MatMul(x, w1)
            s = Sigmoid(p)
            a = Mul(p, s)
            g = Mul(a, z)
            y = MatMul(g, w2)
        }}""", w1=w["w1"], w2=w["w2"])
    res = check_rewrite(m, ["MatMul", MS + "QuickGelu", "Mul", "MatMul"],
                        fired=["pad-contraction-source", "pad-contraction-quick-gelu"],
                        not_fired=["pad-contraction-gate", "pad-contraction"])
    assert widths(res.model) == {"in": [D, 1024], "out": [1024, N]}


def test_a_hidden_activation_used_elsewhere_keeps_its_width():
    # the padded chain would be computed beside the original one (more ops): not taken, and
    # the second output keeps its 1024 columns
    m = mlp(1024, extra_out=True)
    res = optimized(m)
    assert sorted(op_list(res.model)) == ["Add", "MatMul", "MatMul", MS + "BiasGelu"]
    assert res.report["saturation"]["rule_matches"].get("pad-contraction", 0) > 0
    assert widths(res.model) == {"in": [D, 1024], "out": [1024, N]}
    assert_same_outputs(m, res.model, rtol=1e-4, atol=1e-5)
    assert_verified(m, res)


@pytest.mark.parametrize("extractor", ["ilp", "dag-greedy"])
def test_extractors_do_not_compute_the_mlp_twice(extractor):
    # the hidden activation is an output too: the padded chain looks cheaper for y alone, and
    # DAG greedy took it beside the original one (twice the work, 1.3x slower) until its reuse
    # pass switched y back to the product of the value the program computes anyway
    m = mlp(1024, extra_out=True)
    res = optimized(m, extractor=extractor)
    assert sorted(op_list(res.model)) == ["Add", "MatMul", "MatMul", MS + "BiasGelu"]
    assert widths(res.model) == {"in": [D, 1024], "out": [1024, N]}
    assert_same_outputs(m, res.model, rtol=1e-4, atol=1e-5)
    assert_verified(m, res)


def test_few_rows_keep_the_width():
    # 4 rows: the padding does not pay (measured 0.99 to 1.09 of the aliased time)
    res = check_rewrite(mlp(1024, rows="1, 4"), ["MatMul", "MatMul", "Add", MS + "BiasGelu"],
                        fired=["pad-contraction"])
    assert widths(res.model) == {"in": [D, 1024], "out": [1024, N]}


def test_a_profile_without_the_slowdown_does_not_pad(tmp_path):
    from eqsat.extract.costs.roofline import HARDWARE_DIR

    prof = json.loads((HARDWARE_DIR / "cpu.json").read_text())
    prof.pop("contraction_alias_slowdown")
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(prof))
    res = check_rewrite(mlp(1024), ["MatMul", "MatMul", "Add", MS + "BiasGelu"], hardware=str(plain),
                        not_fired=["pad-contraction-source"])
    assert widths(res.model) == {"in": [D, 1024], "out": [1024, N]}
    # the AVX2 profile did not measure it
    res = check_rewrite(mlp(1024), ["MatMul", "MatMul", "Add", MS + "BiasGelu"], hardware="cpu-avx2",
                        not_fired=["pad-contraction-source"])


@pytest.mark.parametrize("add, rule", [("h = Add(p, c)", "pad-contraction-bias"),
                                       ("h = Add(c, p)", "pad-contraction-bias-left")],
                         ids=["right", "left"])
def test_a_broadcast_bias_is_not_padded(add, rule):
    # a [1] bias (here -0.0, which stays a stored constant) broadcasts over every column: padded
    # with zeros to 1040 it would add -0.0 to the first column only, a different bias (the
    # bias-length guard)
    w = weights(1024)
    m = with_weights(f"""<ir_version: 9, opset_import: ["" : 20]>
        agraph (float[2, 16, {D}] x, float[{D}, 1024] w1, float[1] c, float[1024, {N}] w2) => (float[2, 16, {N}] y) {{
            p = MatMul(x, w1)
            {add}
            g = Relu(h)
            y = MatMul(g, w2)
        }}""", w1=w["w1"], c=np.array([-0.0], np.float32), w2=w["w2"])
    check_rewrite(m, ["MatMul", "Add", "Relu", "MatMul"], fired=["pad-contraction-source"],
                  not_fired=[rule, "pad-contraction"])


def test_a_double_mlp_is_left_alone():
    # the rows alias at 512 doubles, but the slowdown was measured for float32 only
    text = f"""<ir_version: 9, opset_import: ["" : 20]>
        agraph (double[2, 16, {D}] x, double[{D}, 1024] w1, double[1024, {N}] w2) => (double[2, 16, {N}] y) {{
            p = MatMul(x, w1)
            g = Relu(p)
            y = MatMul(g, w2)
        }}"""
    w = weights(1024)
    m = with_weights(text, w1=w["w1"].astype(np.float64), w2=w["w2"].astype(np.float64))
    check_rewrite(m, ["MatMul", "MatMul", "Relu"], not_fired=["pad-contraction-source"])

