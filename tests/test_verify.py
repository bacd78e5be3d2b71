"""Verification of an optimized model against its original (eqsat/verification/__init__.py): the sizes it
picks for symbolic dimensions, and its tolerance by output type."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from eqsat.verification import compare, qdq_allowance_withheld, qdq_kept_out, tolerance, verification_dims, verify
from eqsat.verification.constant_sizes import CONSTANT_TRIES, constant_sizes, separate_sizes

from .conftest import assert_wrong_never_written, parse_model, run_cli


def test_batch_and_sequence_get_different_sizes_so_confusing_them_shows():
    # Gather(Shape(x), 0) vs Gather(Shape(x), 1): equal whenever batch == sequence
    text = """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, sequence] x) => (int64 y) {{ s = Shape(x)
                                                  i = Constant <value = int64 {{{axis}}}> ()
                                                  y = Gather(s, i) }}"""
    right, wrong = parse_model(text.format(axis=0)), parse_model(text.format(axis=1))
    v = verify(right, wrong)
    assert v.status == "failed" and "3 vs expected 2" in v.detail  # at batch == sequence both would be 2
    assert "symbolic sizes batch=2, sequence=3" in v.detail
    assert verify(right, right).status == "passed"
    # sizes the user binds are kept, and only the others are chosen
    assert verification_dims(right, {"sequence": 8})[0] == {"batch": 2, "sequence": 8}


def test_a_dimension_too_small_for_the_original_gets_larger_sizes():
    # a 7-wide convolution over `samples`: 3 samples do not run, 48 do; the batch stays small
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, 1, samples] x) => (float[batch, 1, n] y)
          <float[1, 1, 7] w = {1, 2, 3, 4, 3, 2, 1}> { y = Conv(x, w) }""")
    tries = verification_dims(m)
    assert tries[0] == {"batch": 2, "samples": 3} and tries[1] == {"batch": 2, "samples": 2}
    assert tries[2] == {"batch": 2, "samples": 48}
    v = verify(m, m)
    assert v.status == "passed" and "symbolic sizes batch=2, samples=48" in v.detail


def test_the_default_tolerance_follows_the_output_type():
    assert tolerance(np.float32) == (1e-3, 1e-4) and tolerance(np.float16) == (1e-2, 1e-3)
    e = np.linspace(-1, 1, 64)
    a = e * (1 + 3e-3)  # a few float16 rounding steps
    assert compare({"y": e.astype(np.float16)}, {"y": a.astype(np.float16)}, None, None) == []
    assert compare({"y": e.astype(np.float32)}, {"y": a.astype(np.float32)}, None, None) != []
    # a tolerance the user gives holds for every type
    assert compare({"y": e.astype(np.float16)}, {"y": a.astype(np.float16)}, 1e-3, 1e-4) != []


def test_a_double_computed_in_float32_fails_verification():
    # with float32's tolerance a double scale folded into a float attribute passed
    assert tolerance(np.float64) == (1e-9, 1e-12)
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (double[batch, 4] x) => (double[batch, 4] y) { s = Constant <value = double {0.1}> ()  y = Mul(x, s) }""")
    in_f32 = parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (double[batch, 4] x) => (double[batch, 4] y) {
            s = Constant <value = float {0.1}> ()
            f = Cast <to = 1> (x)
            p = Mul(f, s)
            y = Cast <to = 11> (p)
        }""")
    assert verify(m, m).status == "passed"
    assert verify(m, in_f32).status == "failed"


def test_integer_outputs_are_compared_exactly():
    # rtol 1e-3 let 1000000 pass for 1000999: an integer is right or wrong
    e = {"y": np.array([1_000_000, -7], np.int64)}
    assert compare(e, {"y": np.array([1_000_999, -7], np.int64)}, None, None) != []
    assert compare(e, {"y": np.array([1_000_000, -7], np.int64)}, None, None) == []
    assert compare(e, {"y": np.array([1_000_001, -7], np.int64)}, 1e-3, 1e-4) != []
    assert compare({"y": np.array([200], np.uint8)}, {"y": np.array([199], np.uint8)}, None, None) != []


def test_the_original_runs_as_written_not_as_onnxruntime_rewrites_it():
    # onnxruntime's own MatMulScaleFusion makes the original's x * 1e20 * 1e20 one alpha of
    # 1e40, an infinity in float32; a rewrite that does the same must not pass because the
    # reference run was rewritten alike: the original's products of magnitude below 3.4e-2
    # are finite
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[3, 3] a, float[3, 3] b) => (float[3, 3] y) {
            c = Constant <value = float {1e20}> ()
            p = MatMul(a, b)
            r = Mul(p, c)
            y = Mul(r, c)
        }""")
    fused = onnx.ModelProto()
    fused.CopyFrom(m)
    del fused.graph.node[:]
    fused.graph.node.append(onnx.helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft",
                                                  alpha=float("inf")))
    fused.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    assert verify(m, m).status == "passed"
    v = verify(m, fused, runs=3)
    assert v.status == "failed", v.detail


def test_a_float16_models_verification_uses_and_reports_the_float16_tolerance():
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float16[batch, 4] x) => (float16[batch, 4] y) { y = Relu(x) }""")
    v = verify(m, m)
    assert v.status == "passed" and "within rtol 0.01, atol 0.001" in v.detail


def test_sizes_no_try_fits_is_not_possible_and_says_to_pass_dim():
    # the export fixed 13 elements behind a symbolic name (3 more make the 16 of a [4, 4]): no
    # size tried is 13, not even those read from the constants (4, 16, 3, 2, ...)
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[n] x) => (float[4, 4] y) { s = Constant <value = int64[2] {4, 4}> ()
                                             p = Constant <value = float[3] {1, 2, 3}> ()
                                             c = Concat <axis = 0> (x, p)
                                             y = Reshape(c, s) }""")
    v = verify(m, m)
    assert v.status == "not possible"
    n = _tried(m)
    assert v.detail.endswith(f"(symbolic sizes tried: n=2; n=32; n=256; n=3; and {n - 4} more; pass --dim "
                             "NAME=SIZE for the sizes the model needs)")
    assert verify(m, m, dims={"n": 13}).status == "passed"


def _tried(m: onnx.ModelProto) -> int:
    """How many sizes verification tries on a model that runs on none."""
    tried = verification_dims(m)
    names = list(tried[0])
    tried += constant_sizes(m, names, tried[0], tried)
    return len(tried) + len(separate_sizes(m, names, tried[0], tried))


# models whose constants fix their symbolic sizes, none of which verification_dims tries
FIXED_BY_CONSTANTS = {
    # a Reshape to [4, 4]: 16 elements (the product of a shape)
    "reshape": ("g (float[n] x) => (float[4, 4] y) { s = Constant <value = int64[2] {4, 4}> ()  y = Reshape(x, s) }",
                "n=16"),
    # a position table [1, 197, 2] added to a sequence
    "table": ("g (float[batch, seq, 2] x) => (float[batch, seq, 2] y) { p = Constant <value = float[1, 197, 2] "
              "{" + ", ".join(["0.5"] * 394) + "}> ()  y = Add(x, p) }", "seq=197"),
    # a MatMul weight [24, 3]: k = 24
    "matmul": ("g (float[batch, k] x) => (float[batch, 3] y) { w = Constant <value = float[24, 3] {"
               + ", ".join(["0.25"] * 72) + "}> ()  y = MatMul(x, w) }", "k=24"),
    # 8-wide windows of audio samples and a table of 9 of them: 72 samples (48 give 6 windows, 384 give 48)
    "window": ("g (float[batch, 1, samples] x) => (float[batch, 1, 9] y) { w = Constant <value = float[1, 1, 8] "
               "{1, 2, 3, 4, 4, 3, 2, 1}> ()  t = Constant <value = float[1, 1, 9] {1, 2, 3, 4, 5, 6, 7, 8, 9}> () "
               " c = Conv <strides = [8]> (x, w)  y = Add(c, t) }", "samples=72"),
    # a VGG: three 2-wide pools before a Flatten into a [12, 3] weight: 3 channels x 2 x 2 positions, 16 x 16 pixels
    "chain": ("g (float[batch, 1, h, w] x) => (float[batch, 3] y) { "
              "a = Constant <value = float[3, 1, 3, 3] {" + ", ".join(["0.5", "-0.25", "0.125"] * 9) + "}> () "
              "b = Constant <value = float[3, 3, 3, 3] {" + ", ".join(["0.25", "0.5", "-0.5"] * 27) + "}> () "
              "m = Constant <value = float[12, 3] {" + ", ".join(["1.0", "-1.0", "0.5"] * 12) + "}> () "
              "c = Conv <pads = [1, 1, 1, 1]> (x, a)  p = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (c) "
              "d = Conv <pads = [1, 1, 1, 1]> (p, b)  q = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (d) "
              "r = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (q)  f = Flatten(r)  y = MatMul(f, m) }",
              "h=16, w=16"),
    # two sizes apart: 4-wide patches, a [4, 3] weight on the patch columns and a [2, 3] one on
    # the rows fix w = 16 and h = 8; every size read from the constants was tried for both at once
    "apart": ("g (float[batch, 1, h, w] x) => (float[batch, 1, 3, 3] y) { "
              "k = Constant <value = float[1, 1, 4, 4] {" + ", ".join(["0.5", "-0.25"] * 8) + "}> () "
              "a = Constant <value = float[4, 3] {" + ", ".join(["1.0", "-1.0", "0.5"] * 4) + "}> () "
              "b = Constant <value = float[2, 3] {" + ", ".join(["0.25", "0.5", "-0.5"] * 2) + "}> () "
              "c = Conv <strides = [4, 4]> (x, k)  r = MatMul(c, a)  t = Transpose <perm = [0, 1, 3, 2]> (r) "
              "y = MatMul(t, b) }", "h=8, w=16"),
}


@pytest.mark.parametrize("name", list(FIXED_BY_CONSTANTS))
def test_sizes_the_constants_fix_are_tried_where_no_other_runs(name):
    body, found = FIXED_BY_CONSTANTS[name]
    m = parse_model('<ir_version: 8, opset_import: ["" : 17]>\n' + body)
    v = verify(m, m)
    assert v.status == "passed" and found in v.detail, v.detail


def test_sizes_from_constants_are_bounded_and_only_tried_after_the_others():
    # a model that runs at the first sizes never reads its constants (tests/test_cli.py:
    # VIT_PATCHES for a wrong rewrite refused); the candidates stay within the largest
    # inputs verification_dims makes, and CONSTANT_TRIES in number
    from .test_cli import VIT_PATCHES

    m = parse_model(VIT_PATCHES)
    tried = verification_dims(m)
    more = constant_sizes(m, ["batch", "h", "w"], tried[0], tried)
    assert more[0] == {"batch": 2, "h": 8, "w": 8}  # 2 x 2 patches of 4, from the positions' 4
    assert 0 < len(more) <= CONSTANT_TRIES and not any(t in tried for t in more)
    assert max(t["h"] * t["w"] for t in more) <= 384 * 640


KV_STEP = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[batch, past, 4] k_past, float[batch, sequence, 4] k_new, int64[batch, total] mask)
      => (float[batch, total] y) {{
        axes = Constant <value = int64[1] {{2}}> ()
        pads = Constant <value = int64[4] {{0, 0, 0, {extra}}}> ()
        k = Concat <axis = 1> (k_past, k_new)
        s = ReduceSum <keepdims = 0> (k, axes)
        p = Pad(s, pads)
        m = Cast <to = 1> (mask)
        y = Mul(p, m) }}"""


def test_a_kv_cache_steps_related_sizes_are_found():
    # the mask covers past and new tokens: the original runs only where total = past + sequence
    m = parse_model(KV_STEP.format(extra=0))
    tries = verification_dims(m)
    related = {"batch": 2, "past": 3, "sequence": 5, "total": 8}
    assert related in tries
    assert tries.index(related) < tries.index({"batch": 2, "past": 48, "sequence": 80, "total": 112})
    v = verify(m, m)
    assert v.status == "passed" and "symbolic sizes batch=2, past=3, sequence=5, total=8" in v.detail
    # one new token, as the user binds it: total is found from past and the bound sequence
    v = verify(m, m, dims={"sequence": 1})
    assert v.status == "passed" and "symbolic sizes batch=2, past=3, sequence=1, total=4" in v.detail
    # the deployment's sizes bound: the free one is a difference
    v = verify(m, m, dims={"past": 128, "total": 129})
    assert v.status == "passed" and "past=128, sequence=1, total=129" in v.detail
    v = verify(m, m, dims={"sequence": 1, "total": 129})
    assert v.status == "passed" and "past=128, sequence=1, total=129" in v.detail


def test_not_possible_lists_the_first_sizes_tried_and_counts_the_rest():
    # total = past + sequence + 1: no size tried fits
    m = parse_model(KV_STEP.format(extra=1))
    v = verify(m, m)
    assert v.status == "not possible", v.detail
    n = _tried(m)
    assert n > 4 and f"; and {n - 4} more; pass --dim NAME=SIZE" in v.detail
    assert verify(m, m, dims={"past": 3, "sequence": 5, "total": 9}).status == "passed"


def test_inputs_larger_than_memory_make_verification_not_possible_not_a_crash():
    # --dim batch=100000000 asked numpy for 745 GiB of random float64s: a MemoryError traceback
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[batch, 1000000] x) => (float[batch, 1000000] y) { y = Relu(x) }""")
    v = verify(m, m, dims={"batch": 10**9})  # 10**15 floats: more than any machine's memory
    assert v.status == "not possible"
    assert v.detail == ("making random inputs at these sizes (batch=1000000000) takes 11,175,870.9 GiB, "
                        "more than half of this machine's memory: give smaller --dim values to verify")
    assert verify(m, m, dims={"batch": 1}).status == "passed"
    fixed = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[1000000000, 1000000] x) => (float[1000000000, 1000000] y) { y = Relu(x) }""")
    v = verify(fixed, fixed)
    assert v.status == "not possible" and v.detail.startswith("making random inputs of these shapes takes ")
    assert "--dim" not in v.detail  # no --dim helps a fixed shape


RANDOM = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[batch, 4] x) => (float[batch, 4] y, float[batch, 4] z) {{
        r = Constant <value = float {{0.5}}> ()
        t = Constant <value = bool {{1}}> ()
        d = Dropout(x, r, t)
        k = Constant <value = float {{{k}}}> ()
        y = Mul(d, k)
        u = RandomUniformLike(x)
        z = Add(x, u)
    }}"""


def test_what_a_model_computes_around_its_random_ops_is_verified():
    # each random node gets the same draw in both models: a wrong constant beside a
    # training-mode Dropout fails, where "not possible" let it through
    m = parse_model(RANDOM.format(k=2.0))
    v = verify(m, m)
    assert v.status == "passed", v.detail
    assert "Dropout x1" in v.not_verified and "RandomUniformLike x1" in v.not_verified
    assert "not verified: the nodes onnxruntime cannot run or that are random" in v.detail
    v = verify(m, parse_model(RANDOM.format(k=3.0)))
    assert v.status == "failed" and "output 'y'" in v.detail
    # the optimized model's random nodes are matched to the original's by random_pairs
    renamed = parse_model(RANDOM.format(k=2.0).replace("u = ", "w = ").replace("(x, u)", "(x, w)"))
    assert verify(m, renamed).status == "failed"  # an unmatched draw differs
    assert verify(m, renamed, random_pairs={"w": "u"}).status == "passed"
    inference = parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, 4] x) => (float[batch, 4] y) {
            r = Constant <value = float {0.5}> ()
            y = Dropout(x, r)
        }""")
    v = verify(inference, inference)
    assert v.status == "passed" and not v.not_verified  # no training_mode: an identity, run whole
    seeded = parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, 4] x) => (float[batch, 4] y) {
            r = Constant <value = float {0.5}> ()
            t = Constant <value = bool {1}> ()
            y = Dropout <seed = 0> (x, r, t)
        }""")
    v = verify(seeded, seeded)
    # a seed repeats onnxruntime's first mask of a session, not the masks of the runs after it
    assert v.status == "passed" and "Dropout x1" in v.not_verified


CUSTOM = """
    <ir_version: 8, opset_import: ["" : 18, "my.ops" : 1]>
    g (float[batch, 4] x) => (float[batch, 4] y) {{
        m = my.ops.Mystery <alpha = 0.5> (x)
        k = Constant <value = float {{{k}}}> ()
        a = Add(m, k)
        y = Relu(a)
    }}"""


def test_what_a_model_computes_around_an_op_onnxruntime_cannot_run_is_verified():
    m = parse_model(CUSTOM.format(k=1.0))
    v = verify(m, m)
    assert v.status == "passed" and "my.ops.Mystery x1" in v.not_verified, v.detail
    v = verify(m, parse_model(CUSTOM.format(k=2.0)))
    assert v.status == "failed" and "output 'y'" in v.detail
    # the stand-in depends on the op's attributes and inputs, as the op itself would
    other_attr = parse_model(CUSTOM.format(k=1.0).replace("alpha = 0.5", "alpha = 0.25"))
    assert verify(m, other_attr).status == "failed"


def test_a_stand_in_moves_as_little_as_its_inputs():
    # the stand-in of an op onnxruntime cannot run was a hash of its input bytes: a rewrite
    # that moved its input by the last bits (a MatMul and an Add fused into a Gemm) gave
    # wholly different values, and verification failed a correct model
    text = """
        <ir_version: 8, opset_import: ["" : 18, "my.ops" : 1]>
        g (float[batch, 4] x) => (float[batch, 4] y) {{
            w = Constant <value = float[4, 4] {{{w}}}> ()
            h = MatMul(x, w)
            m = my.ops.Mystery(h)
            y = Relu(m)
        }}"""
    w = np.linspace(-1, 1, 16)
    m = parse_model(text.format(w=", ".join(map(str, w.astype(np.float32)))))
    nudged = parse_model(text.format(w=", ".join(map(str, (w * (1 + 1e-6)).astype(np.float32)))))
    v = verify(m, nudged)
    assert v.status == "passed", v.detail
    wrong = parse_model(text.format(w=", ".join(map(str, (w * 1.1).astype(np.float32)))))
    assert verify(m, wrong).status == "failed"


def test_the_inputs_of_an_op_onnxruntime_cannot_run_are_compared():
    # a stand-in's floats move with tanh of a projection of its inputs, which is +-1 for inputs
    # of magnitude 100, and its integers do not depend on them at all: x * 100 taken for x * 50
    # before such an op passed. Its inputs are compared as outputs are
    text = H18.replace('"" : 18', '"" : 18, "my.ops" : 1') + """
        g (float[2, 8] x) => ({t}[2, 8] y) {{
            c = Constant <value = float {{{k}}}> ()
            a = Mul(x, c)
            y = my.ops.Thing(a)
        }}"""
    for t in ("float", "int64"):
        m = parse_model(text.format(t=t, k=100.0))
        v = verify(m, m)
        assert v.status == "passed", v.detail
        v = verify(m, parse_model(text.format(t=t, k=50.0)))
        assert v.status == "failed" and "input 0 of cut node 1 (my.ops.Thing)" in v.detail, v.detail


def test_the_inputs_of_twin_ops_onnxruntime_cannot_run_are_compared_once_merged():
    # two equal calls (one e-class after optimizing) and calls in another order pass; z fed
    # another call's inputs does not: its integers depended on nothing, and a cut node of the
    # optimized model now gets the outputs of its closest match in the original
    text = H18.replace('"" : 18', '"" : 18, "my.ops" : 1') + """
        g (float[2, 8] x) => (int64[2, 8] y, int64[2, 8] z, int64[2, 8] u) {{
            n = Neg(x)
            y = my.ops.Thing(x)
            z = my.ops.Thing({z})
            u = my.ops.Thing(n)
        }}"""
    m = parse_model(text.format(z="x"))
    merged = parse_model(H18.replace('"" : 18', '"" : 18, "my.ops" : 1') + """
        g (float[2, 8] x) => (int64[2, 8] y, int64[2, 8] z, int64[2, 8] u) {
            n = Neg(x)
            u = my.ops.Thing(n)
            y = my.ops.Thing(x)
            z = Identity(y)
        }""")
    v = verify(m, merged)
    assert v.status == "passed", v.detail
    v = verify(m, parse_model(text.format(z="n")))
    assert v.status == "failed" and "output 'z'" in v.detail, v.detail


def test_integer_inputs_are_drawn_by_use_so_an_unsound_integer_rewrite_fails():
    # x * x -> x holds for 0 and 1 only: integers drawn from {0, 1} passed it
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (int64[batch, 3] n, int64[batch] ids, int64[batch, 3] mask) => (int64[batch, 3] y, float[batch, 2] e,
                                                                          int64[batch, 3] q) {
            y = Mul(n, n)
            table = Constant <value = float[5, 2] {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}> ()
            e = Gather(table, ids)
            q = Div(mask, n)
        }""".replace("q = Div(mask, n)", "q = Mul(mask, n)"))
    wrong = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (int64[batch, 3] n, int64[batch] ids, int64[batch, 3] mask) => (int64[batch, 3] y, float[batch, 2] e,
                                                                          int64[batch, 3] q) {
            y = Identity(n)
            table = Constant <value = float[5, 2] {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}> ()
            e = Gather(table, ids)
            q = Mul(mask, n)
        }""")
    v = verify(m, m)
    assert v.status == "passed", v.detail
    assert "n in [-9, 9]" in v.inputs and "ids an index in [-5, 5)" in v.inputs and "mask a mask, 0 or 1" in v.inputs
    assert verify(m, wrong).status == "failed"


def test_quantized_codes_are_drawn_over_their_whole_range():
    # a DequantizeLinear with a float16 scale of 1 taken for a Cast: right for codes up to 2048
    # (float16's 11 bits), which codes in [-9, 9] never passed; y reaches the DQ through a Reshape
    text = """
        <ir_version: 10, opset_import: ["" : 21]>
        g (int16[2, 8] y) => (int32[16] out) <float16 s = {{15360}}, int64[1] flat = {{16}}> {{
            r = Reshape(y, flat)
            {body}
        }}"""
    m = parse_model(text.format(body="d = DequantizeLinear(r, s)\n out = Cast <to = 6> (d)"))
    wrong = parse_model(text.format(body="out = Cast <to = 6> (r)"))
    v = verify(m, m)
    assert v.status == "passed", v.detail
    assert "y quantized codes in [-32768, 32767]" in v.inputs
    assert verify(m, wrong).status == "failed"


def test_qdq_allowance_does_not_accept_a_dq_q_pair_removed_where_it_is_no_identity():
    # Q(DQ(y, s), s) with s = 6.8e36: (y - z) * s overflows for |y - z| > 50 and Q saturates it;
    # onnxruntime's own QDQFinalCleanupTransformer removes the pair all the same, so an allowance
    # measured against it accepted the Identity
    text = """
        <ir_version: 10, opset_import: ["" : 21]>
        g (int8[16] y) => (int8[16] out) <float s = {{6.8e36}}, int8 z = {{0}}> {{
            {body}
        }}"""
    m = parse_model(text.format(body="d = DequantizeLinear(y, s, z)\n out = QuantizeLinear(d, s, z)"))
    wrong = parse_model(text.format(body="out = Identity(y)"))
    assert verify(m, m).status == "passed"
    v = verify(m, wrong)
    assert v.status == "failed", v.detail


def test_integers_fall_back_to_0_or_1_where_the_original_needs_them():
    # n feeds a Reshape target through arithmetic: a size, drawn 0 or 1 as ever; k reaches
    # a Div as divisor: never 0
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[6] x, int64[1] n, int64[4] k) => (float[a, b] y, int64[4] q) {
            s = Constant <value = int64[1] {-1}> ()
            one = Constant <value = int64[1] {1}> ()
            m = Add(n, one)
            t = Concat <axis = 0> (m, s)
            y = Reshape(x, t)
            ten = Constant <value = int64[4] {10, 20, 30, 40}> ()
            q = Div(ten, k)
        }""")
    v = verify(m, m)
    assert v.status == "passed", v.detail
    assert "n a size, 0 or 1" in v.inputs and "k in [-9, 9] but 0" in v.inputs


def test_overridable_inputs_are_fed_their_default_and_other_values():
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[3] x, float[3] w) => (float[3] y) <float[3] w = {1.0, 2.0, 3.0}> { y = Mul(x, w) }""")
    baked = parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[3] x, float[3] w) => (float[3] y) <float[3] w = {1.0, 2.0, 3.0}, float[3] c = {1.0, 2.0, 3.0}> {
            y = Mul(x, c)
        }""")
    v = verify(m, m)
    assert v.status == "passed" and v.runs == 2 and "w its default and scaled by [0.5, 1.5]" in v.inputs
    v = verify(m, baked)  # the default baked in: right for the default only
    assert v.status == "failed" and v.runs == 2


# ---- edge cases: empty sizes and special values (verify._edge_runs)

H18 = '<ir_version: 8, opset_import: ["" : 18]>'


def test_a_model_wrong_only_for_a_symbolic_size_of_0_fails():
    # x [B, S, 4] reshaped to [B, S * 4] computed from its shape, and as the literal [0, -1]:
    # equal for every size but B = 0, where onnxruntime refuses the -1 (0 elements over 0)
    m = parse_model(H18 + """
        g (float[B, S, 4] x) => (float[B, ?] y) {
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
    literal = parse_model(H18 + """
        g (float[B, S, 4] x) => (float[B, ?] y) { t = Constant <value = int64[2] {0, -1}> ()  y = Reshape(x, t) }""")
    v = verify(m, m)
    assert v.status == "passed" and "symbolic size B=0, S=0" in v.detail and v.edge_cases, v.detail
    v = verify(m, literal)
    assert v.status == "failed" and "cannot run the optimized model on B=0 (symbolic sizes B=0, S=3)" in v.detail
    # a size the user binds is tried at 0 too: `dims` sizes the inputs, the written model keeps
    # the symbol (an opset-23 Attention that refuses an empty batch was written where --dim bound it)
    v = verify(m, literal, dims={"B": 2})
    assert v.status == "failed" and "cannot run the optimized model on B=0" in v.detail, v.detail


def test_a_size_of_0_the_original_does_not_run_is_left_out():
    # a 3-wide convolution over `samples` does not take 0 of them: not the optimizer's fault
    m = parse_model(H18 + """
        g (float[batch, 1, samples] x) => (float[batch, 1, n] y)
          <float[1, 1, 3] w = {1, 2, 1}> { y = Conv(x, w) }""")
    v = verify(m, m)
    assert v.status == "passed", v.detail
    assert "on zeros among the floats, large floats (+-2e15), floats times 100, floats times 10000, floats times " \
        "0.0001, whole and half numbers among the floats, symbolic sizes beyond the constants' values, symbolic " \
        "sizes one larger, symbolic size batch=0" in v.detail
    # nor 1 sample: the sizes of 1 are then tried one at a time
    assert "symbolic size batch=0, batch=1; not on symbolic size samples=0, samples=1 (the original does not run " \
        "on them)" in v.detail


def test_a_rewrite_wrong_only_on_zeros_fails():
    # x / x -> 1 is right for every x but 0 (NaN), which standard normal inputs never hold
    m = parse_model(H18 + "g (float[2, 8] x) => (float[2, 8] y) { y = Div(x, x) }")
    ones = parse_model(H18 + """
        g (float[2, 8] x) => (float[2, 8] y) {
            s = Shape(x)
            y = ConstantOfShape <value = float[1] {1.0}> (s)
        }""")
    v = verify(m, ones)
    assert v.status == "failed" and "on zeros among the floats" in v.detail and "vs expected nan" in v.detail


def test_a_rewrite_whose_intermediate_overflow_differs_fails_on_large_values():
    # (x * 1e30) * 1e-30 is x for standard normal x, and inf for x = 2e15
    m = parse_model(H18 + """
        g (float[2, 8] x) => (float[2, 8] y) {
            c1 = Constant <value = float {1e30}> ()
            c2 = Constant <value = float {1e-30}> ()
            a = Mul(x, c1)
            y = Mul(a, c2)
        }""")
    same = parse_model(H18 + "g (float[2, 8] x) => (float[2, 8] y) { y = Identity(x) }")
    v = verify(m, same)
    assert v.status == "failed" and "on large floats (+-2e15)" in v.detail and "vs expected inf" in v.detail, v.detail


def test_large_values_compare_where_they_overflow_not_their_rounding():
    # x * 3 - x * 2.9999 against x * 0.0001: for x = 2e15 the first rounds by about 4e8 (of
    # 6e15), more than rtol of its result 2e11; both are finite, which is what that run checks
    e = {"y": np.array([2.2e11, 1.0, np.inf, np.nan], np.float32)}
    close = {"y": np.array([2.3e11, 1.0, np.inf, np.nan], np.float32)}
    assert compare(e, close, None, None) != []
    assert compare(e, close, None, None, finite_free=True) == []
    for bad in ([np.inf, 1.0, np.inf, np.nan], [2.3e11, 1.0, -np.inf, np.nan], [2.3e11, 1.0, np.inf, 0.0]):
        assert compare(e, {"y": np.array(bad, np.float32)}, None, None, finite_free=True) != []


def test_a_crash_of_the_original_on_edge_inputs_leaves_them_out(tmp_path):
    # Cast(x * 1e10) / -1: for x = 2e15 the cast is INT64_MIN, and INT64_MIN / -1 kills
    # onnxruntime (SIGFPE); that is the original's own, so verification runs again without
    # the edge cases and says so
    m = parse_model(H18 + """
        g (float[4] x) => (int64[4] y) {
            c = Constant <value = float {1e10}> ()
            a = Mul(x, c)
            n = Cast <to = 7> (a)
            k = Constant <value = int64 {-1}> ()
            y = Div(n, k)
        }""")
    v = verify(m, m, isolated=True)
    assert v.status == "passed", v.detail
    assert "not on special values and empty sizes: onnxruntime crashed (signal 8, SIGFPE)" in v.detail


# ---- through the command line: verification in a child process


def _cli(tmp_path, text: str, *args: str) -> tuple[int, str, Path]:
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(parse_model(text), str(src))
    proc = subprocess.run([sys.executable, "-m", "eqsat", "optimize", str(src), "-o", str(out), "-q", *args],
                          capture_output=True, text=True)
    return proc.returncode, proc.stderr, out


def test_a_crash_of_onnxruntime_is_a_failed_verification_and_nothing_is_left(tmp_path):
    # INT64_MIN / -1 kills onnxruntime with SIGFPE: eqsat died by signal 8 and left its
    # temporary folder beside the output
    rc, err, out = _cli(tmp_path, """
        <ir_version: 8, opset_import: ["" : 18]>
        g (int64[2] x) => (int64[2] y) {
            a = Constant <value = int64[2] {-9223372036854775808, 4}> ()
            b = Constant <value = int64[2] {-1, 2}> ()
            q = Div(a, b)
            y = Add(x, q)
        }""")
    assert rc == 1 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == ("eqsat: error: verification failed, nothing written: onnxruntime "
                                            "crashed (signal 8, SIGFPE) running the original model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_an_unsound_integer_rule_fails_verification_beside_a_custom_op(tmp_path):
    # (rewrite (Mul x x) x) in a user's rule file passed 20 runs on integers from {0, 1},
    # and an op onnxruntime cannot run made the whole verification "not possible"
    rules = tmp_path / "bad.egg"
    rules.write_text('(rewrite (Mul x x) x :ruleset fusion :name "bad-square")\n')
    text = """
        <ir_version: 8, opset_import: ["" : 18, "my.ops" : 1]>
        g (float[2, 3] x, int64[2, 3] n) => (float[2, 3] y, int64[2, 3] z) {
            a = my.ops.Foo(x)
            y = Relu(a)
            z = Mul(n, n)
        }"""
    rc, err, out = _cli(tmp_path, text, "--rules", str(rules), "--verify-runs", "20")
    assert rc == 1 and not out.exists(), err
    assert "eqsat: error: verification failed, nothing written: output 'z'" in err and "n in [-9, 9]" in err
    rc, err, out = _cli(tmp_path, text)
    assert rc == 0 and out.exists(), err
    assert "eqsat: warning: not verified: the nodes onnxruntime cannot run or that are random (my.ops.Foo x1)" in err


def test_an_error_in_an_output_of_tiny_values_fails_verification():
    """Outputs of about 1e-6 (a network with random weights: torchvision's end near 1e-9): a
    model off by 10 % of them is wrong, though within an absolute 1e-4; the default absolute
    tolerance scales with the output, so it fails, and the same model off by 1e-5 of them
    passes."""
    from onnx import helper as h

    def scaled(k: float):
        g = h.make_graph([h.make_node("Mul", ["x", "k"], ["y"])], "g",
                         [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 8])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 8])],
                         [onnx.numpy_helper.from_array(np.array(k, np.float32), "k")])
        return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])

    original = scaled(1e-6)
    assert verify(original, scaled(1.1e-6)).status == "failed"
    assert verify(original, scaled(1e-6 * (1 + 1e-5))).status == "passed"


# ---- QDQ models (issue 30): a requantizing rewrite passes where it is no farther from the
# original than onnxruntime's own optimization of it

def _qdq_conv_and_onnxruntimes_own(tmp_path):
    """A uint8 DQ -> Conv -> Q -> DQ model (seeded: one whose requantized outputs move) and
    onnxruntime's own ORT_ENABLE_EXTENDED form of it (a QLinearConv)."""
    import onnxruntime as ort  # noqa: PLC0415

    from .rules import test_qdq  # noqa: PLC0415

    test_qdq.RNG = np.random.default_rng(0)
    m = test_qdq.conv_model(x_type="uint8", w_max=64, cin=8, cout=8)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "own.onnx")
    so.log_severity_level = 3
    ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    own = onnx.load(str(tmp_path / "own.onnx"))
    assert "QLinearConv" in [n.op_type for n in own.graph.node]
    return m, own


def test_qdq_model_passes_where_no_farther_than_onnxruntimes_own_optimization(tmp_path):
    m, own = _qdq_conv_and_onnxruntimes_own(tmp_path)
    v = verify(m, own)
    assert v.status == "passed", v.detail
    assert "QDQ model: outputs beyond the tolerance no farther from the original" in v.detail


def test_qdq_model_fails_where_farther_than_onnxruntimes_own_optimization(tmp_path):
    from onnx import helper  # noqa: PLC0415

    m, _ = _qdq_conv_and_onnxruntimes_own(tmp_path)
    moved = onnx.ModelProto.FromString(m.SerializeToString())
    # the last DequantizeLinear reads its input three steps off: every output moves by 0.3
    moved.graph.node.insert(0, helper.make_node("Constant", [], ["yz3"],
                                                value=helper.make_tensor("v", onnx.TensorProto.UINT8, [], [122])))
    last = moved.graph.node[-1]
    assert last.op_type == "DequantizeLinear"
    last.input[2] = "yz3"
    v = verify(m, moved)
    assert v.status == "failed"
    assert "farther than onnxruntime's own optimization of the original moves it at" in v.detail


def _allowance(own: dict, quantized=("y",)):
    """A QdqAllowance whose onnxruntime-optimized run gives `own`, for outputs `quantized`."""
    from eqsat.verification import QdqAllowance  # noqa: PLC0415

    allowance = QdqAllowance.__new__(QdqAllowance)
    allowance.active, allowance.used, allowance.withheld, allowance.quantized = True, [], "", set(quantized)
    allowance.kept_out, allowance.disabled = {}, []  # the reference run is `own`
    allowance._own = lambda f: own
    return allowance


def test_qdq_allowance_counts_one_step_as_one_step_wherever_float32_rounds_it():
    # one quantization step of a dequantized output, (q - z) * s in float32, is not the same
    # float everywhere: one step off, rounded a few ulps from onnxruntime's, is no farther
    from eqsat.verification import Mismatch  # noqa: PLC0415

    s = np.float32(2.5677288e-11)
    q = np.array([-2, -1, 3, 7], np.float32)
    expected = {"y": q * s}
    own = {"y": (q + [0, 0, 0, 1]).astype(np.float32) * s}
    up = np.nextafter(np.nextafter(own["y"][3], np.float32(1)), np.float32(1))  # two float32 ulps up
    got = {"y": np.array([*expected["y"][:3], up], np.float32)}
    ours = np.abs(got["y"].astype(np.float64) - expected["y"]).max()
    theirs = np.abs(own["y"].astype(np.float64) - expected["y"]).max()
    assert ours > theirs  # the case: the same one step, measured a few float32 ulps apart
    assert _allowance(own).filter([Mismatch("y", "differs")], expected, got, {}) == []
    two_steps = {"y": (q + [0, 0, 0, 2]).astype(np.float32) * s}
    assert len(_allowance(own).filter([Mismatch("y", "differs")], expected, two_steps, {})) == 1


def test_qdq_allowance_is_measured_element_by_element():
    # onnxruntime's own optimization moves one element by a step: that let every other element
    # move by as much (the largest difference was the measure), and one element of 1e8 gave
    # every other one 4 ulps of 1e8 (47) as slack, though onnxruntime moved none of them
    from eqsat.verification import Mismatch  # noqa: PLC0415

    expected = {"y": np.array([0.5, 1.0, 1.5, 2.0], np.float32)}
    own = {"y": np.array([0.6, 1.0, 1.5, 2.0], np.float32)}
    other = {"y": np.array([0.5, 1.05, 1.55, 1.95], np.float32)}
    still = _allowance(own).filter([Mismatch("y", "differs")], expected, other, {})
    assert len(still) == 1 and still[0].requantized and "at 3 of them, first at (1,)" in still[0].detail
    one_like_theirs = {"y": expected["y"] + [0.05, 0, 0, 0]}
    assert _allowance(own).filter([Mismatch("y", "differs")], expected, one_like_theirs, {}) == []
    big = {"y": np.array([1e8, 1.0, 1.5, 2.0], np.float32)}
    assert len(_allowance(big).filter([Mismatch("y", "differs")], big, {"y": big["y"] + [0, 20, 20, 20]}, {})) == 1


def _spread(seed: int, n: int = 1000, moved: float = 0.8, steps=(-2, -1, 1, 2)) -> np.ndarray:
    """Rounding spread through a quantized network: `moved` of `n` elements a few steps of 0.0065
    off, in either direction."""
    rng = np.random.default_rng(seed)
    return np.where(rng.random(n) < moved, rng.choice(steps, n), 0) * np.float32(0.0065)


def test_qdq_allowance_takes_rounding_spread_like_onnxruntimes_own():
    # A DenseNet-121 QDQ model: one step rounded otherwise early on moves 80 % of the logits by
    # a few steps, in onnxruntime's own optimization and in eqsat's program alike, at other
    # elements; element by element eqsat's was refused, and it fell back to no fusion at all
    from eqsat.verification import Mismatch  # noqa: PLC0415

    expected = {"y": np.random.default_rng(9).standard_normal(1000).astype(np.float32)}
    own = {"y": expected["y"] + _spread(1)}
    alike = {"y": expected["y"] + _spread(2)}
    assert _allowance(own).filter([Mismatch("y", "differs")], expected, alike, {}) == []


@pytest.mark.parametrize("case", ["bias", "wider", "more-elements", "farther", "few-moved-by-onnxruntime"])
def test_qdq_allowance_refuses_what_rounding_spread_does_not_explain(case):
    # a zero point one step off shifts every element the same way; a program that moves each
    # element farther or more elements, or anything where onnxruntime's own optimization moves
    # only a few elements, is no rounding spread
    from eqsat.verification import Mismatch  # noqa: PLC0415

    expected = {"y": np.random.default_rng(9).standard_normal(1000).astype(np.float32)}
    own = {"y": expected["y"] + _spread(1, moved=0.01 if case == "few-moved-by-onnxruntime" else 0.8)}
    ours = {"bias": _spread(2, steps=(1,)), "wider": _spread(2, steps=(-3, -2, 2, 3)),
            "more-elements": _spread(2, moved=1.0, steps=(-2, -1, 1, 2)),
            "farther": np.where(np.arange(1000) == 7, 0.0065 * 4, _spread(2)),
            "few-moved-by-onnxruntime": _spread(2, moved=0.01)}[case]
    still = _allowance(own).filter([Mismatch("y", "differs")], expected, {"y": expected["y"] + ours}, {})
    assert len(still) == 1 and still[0].requantized, case


@pytest.mark.parametrize("case", ["unmoved-column-flipped", "fine-column-moved-by-coarse-steps", "flat-head-flipped"])
def test_qdq_allowance_takes_no_spread_from_other_elements(case):
    # a (64, 17) output: columns 0..15 at steps of 0.0065, which onnxruntime's own optimization
    # moves by rounding spread; column 16 small values (an output of another head beside them).
    # The spread was measured over the whole output: column 16 negated, or moved by the other
    # columns' steps where onnxruntime moves it by its own 0.0001, passed as spread; and so did
    # 100 small values after 1000 logits in a flat output, negated
    from eqsat.verification import Mismatch  # noqa: PLC0415

    rng = np.random.default_rng(9)
    rows, cols = (1, 1100) if case == "flat-head-flipped" else (64, 17)
    main = np.arange(cols) < (1000 if case == "flat-head-flipped" else 16)
    e = np.where(main, rng.standard_normal((rows, cols)), rng.uniform(-0.009, 0.009, (rows, cols)))
    own, ours = np.zeros_like(e), np.zeros_like(e)
    own[:, main] = _spread(1, rows * main.sum()).reshape(rows, -1)
    ours[:, main] = _spread(2, rows * main.sum()).reshape(rows, -1)
    if case == "fine-column-moved-by-coarse-steps":
        own[:, ~main], ours[:, ~main] = _spread(3, rows).reshape(rows, 1) / 65, _spread(4, rows).reshape(rows, 1)
    else:
        ours[:, ~main] = -2 * e[:, ~main]
    expected = {"y": e.astype(np.float32)}
    theirs = {"y": (e + own).astype(np.float32)}
    spread_alone = {"y": (e + np.where(main, ours, 0)).astype(np.float32)}
    assert _allowance(theirs).filter([Mismatch("y", "differs")], expected, spread_alone, {}) == []
    still = _allowance(theirs).filter([Mismatch("y", "differs")], expected, {"y": (e + ours).astype(np.float32)}, {})
    assert len(still) == 1 and still[0].requantized, case


def _conv_chain_beside_a_head(head: str) -> onnx.ModelProto:
    """y (1, 8, 16, 17): eight DQ -> Conv -> Q layers (uint8 at 0.05, int8 weights, int32 biases at
    x_scale * w_scale; onnxruntime fuses each into QLinearConv, and its rounding, saturated
    layer after layer, moves 563 of their 2048 outputs by up to 47 steps, seed 0), with a last
    column beside them: 0.5 * head(Sin(Conv1x1(ReduceMean(x))))."""
    from onnx import helper as oh  # noqa: PLC0415
    from onnx import numpy_helper as nh  # noqa: PLC0415

    rng = np.random.default_rng(0)
    inits = [nh.from_array(np.asarray(a), k) for k, a in
             [("s", np.float32(0.05)), ("z", np.uint8(128)), ("wz", np.int8(0)), ("bz", np.int32(0)),
              ("ws", np.float32(0.01)), ("bs", np.float32(0.05 * np.float32(0.01))), ("k", np.float32(0.5)),
              ("ax", np.array([3], np.int64)), ("pw", rng.standard_normal((8, 3, 1, 1)).astype(np.float32))]]
    nodes = [oh.make_node("QuantizeLinear", ["x", "s", "z"], ["q0"])]
    for i in range(8):
        inits += [nh.from_array(rng.integers(-60, 61, size=(8, 8 if i else 3, 3, 3)).astype(np.int8), f"w{i}"),
                  nh.from_array(rng.integers(-200, 200, size=8).astype(np.int32), f"b{i}")]
        nodes += [oh.make_node("DequantizeLinear", [f"q{i}", "s", "z"], [f"a{i}"]),
                  oh.make_node("DequantizeLinear", [f"w{i}", "ws", "wz"], [f"wd{i}"]),
                  oh.make_node("DequantizeLinear", [f"b{i}", "bs", "bz"], [f"bd{i}"]),
                  oh.make_node("Conv", [f"a{i}", f"wd{i}", f"bd{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  oh.make_node("QuantizeLinear", [f"c{i}", "s", "z"], [f"q{i + 1}"])]
    nodes += [oh.make_node("DequantizeLinear", ["q8", "s", "z"], ["chain"]),
              oh.make_node("DequantizeLinear", ["q0", "s", "z"], ["xd"]),
              oh.make_node("ReduceMean", ["xd", "ax"], ["xr"], keepdims=1),
              oh.make_node("Conv", ["xr", "pw"], ["xc"]), oh.make_node("Sin", ["xc"], ["sn"]),
              oh.make_node(head, ["sn"], ["hd"]), oh.make_node("Mul", ["hd", "k"], ["col"]),
              oh.make_node("Concat", ["chain", "col"], ["y"], axis=3)]
    g = oh.make_graph(nodes, "chain", [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 16, 16])],
                      [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8, 16, 17])], inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 19)], ir_version=9)
    onnx.checker.check_model(m)
    return m


def test_a_wrong_column_beside_rounding_spread_is_refused(tmp_path, capsys):
    # a user's unsound Neg(x) -> x negates the last column (values up to 0.5); onnxruntime's own
    # optimization moves a quarter of the other columns' elements by up to 2.35 and none of it.
    # Measured over the whole output the negation looked like rounding spread, and `eqsat
    # optimize --rules` wrote it with exit 0
    m, wrong = _conv_chain_beside_a_head("Neg"), _conv_chain_beside_a_head("Identity")
    rule = '(ruleset neg-drop)\n; Neg(x) -> x, unsound\n(rewrite (Neg x) x :ruleset neg-drop :name "neg-drop")\n'
    for extra in (["--no-default-rules"], []):
        v = assert_wrong_never_written(capsys, tmp_path, m, wrong, *extra, rules=rule)
        assert v.requantized, v.detail
    # the chain's own requantizing fusions still pass
    rc, _, _ = run_cli(capsys, "optimize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"), "-q")
    assert rc == 0 and "QLinearConv" in {n.op_type for n in onnx.load(tmp_path / "o.onnx").graph.node}


def test_qdq_allowance_takes_an_index_only_where_it_is_the_originals_or_onnxruntimes():
    # an ArgMax over quantized logits: onnxruntime's own optimization changed DenseNet-121's
    # top-1 class on one seed of ten (865 -> 6); as a distance that let any class within 859
    # of the right one pass. An index is right or not: ours must be the original's or
    # onnxruntime's own, element by element (codes of the quantized types keep their distance)
    from eqsat.verification import Mismatch  # noqa: PLC0415

    expected = {"y": np.array([865, 3, 7], np.int64)}
    own = {"y": np.array([6, 3, 7], np.int64)}
    for wrong in ([500, 3, 7], [6, 4, 7]):
        still = _allowance(own).filter([Mismatch("y", "differs")], expected, {"y": np.array(wrong, np.int64)}, {})
        assert len(still) == 1 and still[0].requantized, wrong
    assert _allowance(own).filter([Mismatch("y", "differs")], expected, {"y": own["y"].copy()}, {}) == []
    codes = {"y": np.array([120, 3, 7], np.uint8)}
    own_codes = {"y": np.array([121, 3, 7], np.uint8)}
    assert _allowance(own_codes).filter([Mismatch("y", "differs")], codes,
                                        {"y": np.array([119, 3, 7], np.uint8)}, {}) == []


SIN_BESIDE_QDQ = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[64] x) => (float[65] y, uint8[64] q)
      <float[1] big = {{100000000.0}}, float s = {{0.1}}, uint8 z = {{128}}> {{
        t = {op}(x)
        {body}
        q = QuantizeLinear(x, s, z)
    }}"""


@pytest.mark.parametrize("body", ["y = Concat <axis = 0> (t, big)",
                                  "tq = QuantizeLinear(t, s, z)\n td = DequantizeLinear(tq, s, z)\n"
                                  "        y = Concat <axis = 0> (td, big)"], ids=["float-output", "quantized-output"])
def test_a_qdq_model_with_a_large_element_does_not_hide_a_wrong_output(body, tmp_path, capsys):
    # Sin(x) computed as Cos(x) (an unsound rule of a user's) in an output that also holds
    # 1e8, in a model with a QuantizeLinear: the allowance took 4 ulps of 1e8 (47) as slack for
    # every element, and `eqsat optimize --rules` wrote the Cos with exit 0. A float output
    # beside quantized ones gets no allowance at all; a quantized one gets it element by element
    m = parse_model(SIN_BESIDE_QDQ.format(op="Sin", body=body))
    wrong = parse_model(SIN_BESIDE_QDQ.format(op="Cos", body=body))
    assert_wrong_never_written(capsys, tmp_path, m, wrong, rules='(ruleset sin-cos)\n; Sin(x) -> Cos(x), unsound\n'
                               '(rewrite (Sin x) (Cos x) :ruleset sin-cos :name "sin-cos")\n')


DOUBLE_QDQ = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[1000] x) => (float[1000] y) <float s1 = {0.01}, float s2 = {1.0}, uint8 z = {128}> {
        a = QuantizeLinear(x, s1, z)
        b = DequantizeLinear(a, s1, z)
        %s
    }"""


def test_qdq_allowance_does_not_take_onnxruntimes_removal_of_a_double_pair_at_other_scales(tmp_path, capsys):
    # Q(s1 = 0.01) -> DQ -> Q(s2 = 1) -> DQ: onnxruntime's DoubleQDQPairsRemover makes it one
    # pair at 0.01, outputs up to half of s2 (50 steps of 0.01) from the original; an allowance
    # measured against it accepted a rule file's DQ(Q(b, s2), s2) -> b with exit 0
    m = parse_model(DOUBLE_QDQ % "c = QuantizeLinear(b, s2, z)\n y = DequantizeLinear(c, s2, z)")
    dropped = parse_model(DOUBLE_QDQ % "y = Identity(b)")
    assert_wrong_never_written(
        capsys, tmp_path, m, dropped,
        rules="(ruleset drop)\n; DQ(Q(DQ(y, s1, z), s2, z), s2, z) -> DQ(y, s1, z), unsound\n"
              "(rule ((= e (QuantizeLinear d s2 z ax 0 0 0 sat)) (= d (DequantizeLinear y s1 z ax 0 0))\n"
              "       (= f (DequantizeLinear e s2 z ax 0 0)))\n"
              '      ((union f d)) :ruleset drop :name "double-qdq-drop")\n')


CLIP_BEFORE_Q = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (uint8[256] x) => (uint8[256] y) <float s = {1e-9}, uint8 z = {128}, uint8 yz = {10},
                                         float lo = {0.0}, float hi = {1.0}> {
        d = DequantizeLinear(x, s, z)
        %s
        y = QuantizeLinear(c, s, yz)
    }"""


def test_qdq_allowance_does_not_take_onnxruntimes_removal_of_a_clip_that_matters(tmp_path, capsys):
    # Clip(d, 0) -> Q(1e-9, 10): the Q's range starts at -1e-8, and onnxruntime's ClipQuantFusion
    # removes a Clip whose min lies within float32's epsilon (1.2e-7, absolute) of it, so its own
    # optimization moved codes 0..9 of the original's 10 (every negative d); an allowance measured
    # against it accepted a rule file's Clip(x, lo, hi) -> x with exit 0
    m = parse_model(CLIP_BEFORE_Q % "c = Clip(d, lo, hi)")
    dropped = parse_model(CLIP_BEFORE_Q % "c = Identity(d)")
    assert_wrong_never_written(capsys, tmp_path, m, dropped, rules='(ruleset drop)\n; Clip(x, lo, hi) -> x, unsound\n'
                               '(rewrite (Clip x lo hi) x :ruleset drop :name "clip-drop")\n')


@pytest.mark.parametrize("scales", [("6.8e36", "6.8e36"), ("0.05", "0.0")], ids=["huge", "zero-output-scale"])
def test_qdq_allowance_leaves_out_where_onnxruntimes_own_fusion_is_no_rounding_change(scales):
    # DQ -> Add -> Q with scales of 6.8e36 (the float form overflows, Q saturates) or an output
    # scale of 0: onnxruntime's own QLinearAdd moves codes by up to 255, so an allowance measured
    # against it accepted that QLinearAdd, or anything else as far off
    s, ys = scales
    text = """
        <ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
        g (uint8[4, 64] a, uint8[4, 64] b) => (uint8[4, 64] y) <float s = {{{s}}}, float ys = {{{ys}}},
                                                                uint8 z = {{128}}> {{
            {body}
        }}"""
    m = parse_model(text.format(s=s, ys=ys, body="ad = DequantizeLinear(a, s, z)\n bd = DequantizeLinear(b, s, z)\n"
                                                  " c = Add(ad, bd)\n y = QuantizeLinear(c, ys, z)"))
    fused = parse_model(text.format(s=s, ys=ys, body="y = com.microsoft.QLinearAdd(a, s, z, b, s, z, ys, z)"))
    assert verify(m, m).status == "passed"
    v = verify(m, fused)
    assert v.status == "failed" and v.requantized, v.detail
    assert "left out of that measure: the scale of" in v.detail


@pytest.mark.parametrize("computed", ["Identity(ys0)", "Mul(ys0, one)", "Constant <value_float = 0.0> ()",
                                      "com.microsoft.Gelu(ys0)"])
def test_qdq_allowance_is_withheld_where_a_scale_is_computed_from_constants(computed):
    # an output scale of 0 computed from constants (Identity, Mul by 1): onnxruntime folds it
    # and fuses QLinearAdd, 255 codes off, and the check read only stored constants: a
    # QLinearAdd with that scale (a rule file's, unguarded) passed as no farther. The check folds
    # it and leaves that Q out of the reference run; one it cannot compute (an onnxruntime op's)
    # withholds the allowance
    text = """
        <ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
        g (uint8[4, 64] a, uint8[4, 64] b) => (uint8[4, 64] y) <float s = {{0.05}}, float ys0 = {{0.0}},
                                                                float one = {{1.0}}, uint8 z = {{128}}> {{
            ys = {computed}
            {body}
        }}"""
    m = parse_model(text.format(computed=computed, body="ad = DequantizeLinear(a, s, z)\n"
                                " bd = DequantizeLinear(b, s, z)\n c = Add(ad, bd)\n y = QuantizeLinear(c, ys, z)"))
    fused = parse_model(text.format(computed=computed, body="y = com.microsoft.QLinearAdd(a, s, z, b, s, z, ys, z)"))
    unknown = computed.startswith("com.microsoft")
    assert ("the scale of QuantizeLinear" in qdq_allowance_withheld(m)) == unknown
    assert ("the scale of QuantizeLinear" in _kept_out_why(m)) == (not unknown)
    v = verify(m, fused)
    assert v.status == "failed" and v.requantized, v.detail


@pytest.mark.parametrize("scale", [0.0, 0.1])
def test_qdq_allowance_check_follows_chains_thousands_of_nodes_deep(scale):
    # the scale 3000 Identities from its constant, the quantized value 3000 Relus from the
    # input: computed in graph order, not by recursion (which ran out of stack)
    from onnx import TensorProto, helper  # noqa: PLC0415

    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"h{i - 1}"], [f"h{i}"]) for i in range(3000)]
    nodes += [helper.make_node("Identity", [f"s{i}"], [f"s{i + 1}"]) for i in range(3000)]
    nodes.append(helper.make_node("QuantizeLinear", ["h2999", "s3000"], ["y"]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [4])],
                          [helper.make_tensor("s0", TensorProto.FLOAT, [], [scale])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert ("the scale of QuantizeLinear" in _kept_out_why(m)) == (scale == 0.0)


def test_qdq_allowance_reads_scales_of_constant_nodes_in_each_form():
    # Constant <value_float = 0>: the same zero scale as an initializer or a Constant <value = ...>
    for scale in ("value_float = 0.0", "value_floats = [0.0]", "value = float {0.0}"):
        m = parse_model(f"""
            <ir_version: 8, opset_import: ["" : 17]>
            g (float[4] x) => (uint8[4] y) {{
                s = Constant <{scale}> ()
                y = QuantizeLinear(x, s)
            }}""")
        assert "the scale of QuantizeLinear" in _kept_out_why(m), scale


def _kept_out_why(m: onnx.ModelProto) -> str:
    """Why each node of `m` is left out of the QDQ allowance's reference run, joined."""
    return "; ".join(qdq_kept_out(m).values())


def _gemm_shifted_by_steps(m: onnx.ModelProto, steps: int) -> onnx.ModelProto:
    """`m` with its last DequantizeLinear's zero point `steps` codes up: every output moves."""
    moved = onnx.ModelProto.FromString(m.SerializeToString())
    last = moved.graph.node[-1]
    assert last.op_type == "DequantizeLinear"
    zero = next(n for n in moved.graph.node if n.output[0] == last.input[2]).attribute[0].t
    code = int(onnx.numpy_helper.to_array(zero)) + steps
    zero.CopyFrom(onnx.numpy_helper.from_array(np.array(code, onnx.numpy_helper.to_array(zero).dtype)))
    return moved


def test_qdq_allowance_leaves_out_where_onnxruntime_fuses_a_gemm_with_its_bias_changed():
    # onnxruntime fuses DQ -> Gemm -> Q with an int32 bias at another scale than a_scale * b_scale
    # into QGemm, which adds it at a_scale * b_scale: its own model moved the output by 8.9 (178
    # steps), and a model 20 steps off passed
    from .rules import test_qdq  # noqa: PLC0415

    m = test_qdq.gemm_model(a_type="uint8", bias_scale=0.5)
    wrong = _gemm_shifted_by_steps(m, 20)
    v = verify(m, wrong)
    assert v.status == "failed" and v.requantized, v.detail
    assert "left out of that measure: onnxruntime fuses Gemm" in v.detail
    # at a_scale * b_scale, or zeros at any scale: the allowance stands (onnxruntime's QGemm moves
    # what rounds otherwise)
    assert _kept_out_why(test_qdq.gemm_model(a_type="uint8")) == ""
    assert _kept_out_why(test_qdq.conv_model(x_type="uint8", bias_scale=0.5, zero_bias=True)) == ""
    assert "onnxruntime fuses Conv" in _kept_out_why(test_qdq.conv_model(x_type="uint8", bias_scale=0.5))


def test_qdq_allowance_leaves_out_where_onnxruntime_rounds_a_float_gemm_bias_coarsely():
    # a float bias: onnxruntime rounds it to integers of a_scale * b_scale = 1, 100 output steps
    # of 0.01 (41 steps measured), so its own model is no measure of a rewrite's rounding
    text = """
        <ir_version: 8, opset_import: ["" : 17]>
        g (uint8[3, 8] a) => (uint8[3, 5] y) <float sa = {{1.0}}, uint8 za = {{128}}, int8[5, 8] b = {{{b}}},
            float sb = {{1.0}}, int8 zb = {{0}}, float ys = {{{ys}}}, uint8 zy = {{128}}, float[5] c = {{{c}}}> {{
            ad = DequantizeLinear(a, sa, za)
            bd = DequantizeLinear(b, sb, zb)
            g = Gemm <transB = 1> (ad, bd, c)
            y = QuantizeLinear(g, ys, zy)
        }}"""
    rng = np.random.default_rng(0)
    b = ", ".join(map(str, rng.integers(-2, 3, 40)))
    c = ", ".join(f"{v:.3f}" for v in rng.standard_normal(5) * 0.3)
    assert "onnxruntime fuses Gemm" in _kept_out_why(parse_model(text.format(b=b, c=c, ys="0.01")))
    assert _kept_out_why(parse_model(text.format(b=b, c=c, ys="100.0"))) == ""


def test_qdq_allowance_leaves_out_where_onnxruntime_rounds_a_float_conv_bias_coarsely():
    # the same for a Conv: onnxruntime quantizes its float bias at x_scale * w_scale = 1 and fuses
    # a QLinearConv (38 output steps of 0.01 measured where the codes are 128); at an output step of
    # 100 the rounding is a hundredth of a step, and the allowance stands
    text = """
        <ir_version: 8, opset_import: ["" : 17]>
        g (uint8[1, 4, 2, 2] a) => (uint8[1, 4, 2, 2] y) <float sa = {{1.0}}, uint8 za = {{128}},
            int8[4, 4, 1, 1] w = {{{w}}}, float sw = {{1.0}}, int8 zw = {{0}}, float ys = {{{ys}}},
            uint8 zy = {{128}}, float[4] c = {{0.3, -0.2, 0.25, 0.1}}> {{
            ad = DequantizeLinear(a, sa, za)
            wd = DequantizeLinear(w, sw, zw)
            g = Conv(ad, wd, c)
            y = QuantizeLinear(g, ys, zy)
        }}"""
    w = ", ".join(map(str, np.random.default_rng(0).integers(-2, 3, 16)))
    assert "onnxruntime fuses Conv" in _kept_out_why(parse_model(text.format(w=w, ys="0.01")))
    assert _kept_out_why(parse_model(text.format(w=w, ys="100.0"))) == ""


MATMUL_ADD_BIAS = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (uint8[3, 8] a) => (uint8[3, 5] y) <float sa = {{1.0}}, uint8 za = {{128}}, int8[8, 5] b = {{{b}}},
        float sb = {{1.0}}, int8 zb = {{0}}, float ys = {{{ys}}}, uint8 zy = {{128}}, float[5] c = {{{c}}}> {{
        ad = DequantizeLinear(a, sa, za)
        bd = DequantizeLinear(b, sb, zb)
        {add}
        y = QuantizeLinear(g, ys, zy)
    }}"""


@pytest.mark.parametrize("add", ["m = MatMul(ad, bd)\n g = Add(m, c)", "m = MatMul(ad, bd)\n g = Add(c, m)",
                                 "m = Gemm(ad, bd)\n g = Sum(m, c)", "m = Gemm(ad, bd)\n g = Sum(c, m)"],
                         ids=["matmul-add", "matmul-add-bias-first", "gemm-sum", "gemm-sum-bias-first"])
def test_qdq_allowance_leaves_out_where_onnxruntime_rounds_the_bias_of_a_matmul_and_add(add):
    # the Gemm's siblings written as MatMul + Add or as a Gemm without a bias + Sum: onnxruntime
    # fuses them into a Gemm with the bias (MatMulAddFusion, GemmSumFusion) and then into QGemm,
    # its float bias rounded to integers of a_scale * b_scale = 1 (9 and 10 output steps of 0.05
    # measured); a bias within half of 1 rounds to 0, so its own model was the program without
    # the Add, and verification passed that program
    rng = np.random.default_rng(0)
    b = ", ".join(map(str, rng.integers(-1, 2, 40)))
    c = ", ".join(f"{v:.3f}" for v in (0.45, -0.3, 0.2, -0.45, 0.35))
    m = parse_model(MATMUL_ADD_BIAS.format(b=b, c=c, ys="0.05", add=add))
    assert "with its bias changed" in _kept_out_why(m)
    dropped = parse_model(MATMUL_ADD_BIAS.format(b=b, c=c, ys="0.05", add=add.split("\n")[0] + "\n g = Identity(m)"))
    v = verify(m, dropped)
    assert v.status == "failed", v.detail
    # at an output step of 100 the rounding is a two-hundredth of a step: the allowance stands
    assert _kept_out_why(parse_model(MATMUL_ADD_BIAS.format(b=b, c=c, ys="100.0", add=add))) == ""


def test_weight_only_4bit_model_gets_no_qdq_allowance():
    # no QuantizeLinear, no requantization: onnxruntime's own MatMulNBits fusion of the model
    # (accuracy level 4) moves outputs about 1e-2 relative, and must not become the tolerance.
    # One block's scale 1.5 % off in the "optimized" model is a wrong model.
    from .rules import test_nbits  # noqa: PLC0415

    m = test_nbits.nbits_model(k=64, n=8, block=32)
    wrong = onnx.ModelProto.FromString(m.SerializeToString())
    s = next(t for t in wrong.graph.initializer if t.name == "s")
    a = onnx.numpy_helper.to_array(s).copy()
    a[0, 0] *= 1.015
    s.CopyFrom(onnx.numpy_helper.from_array(a, "s"))
    v = verify(m, wrong)
    assert v.status == "failed", v.detail
    assert "QDQ model" not in v.detail


def test_weight_only_4bit_matmul_beside_a_quantizelinear_gets_no_allowance_from_its_own_fusion():
    # a QuantizeLinear elsewhere in the model makes the allowance active; onnxruntime's own
    # DQ -> MatMul fusion into MatMulNBits (accuracy level 4: activations rounded to int8) moved
    # y by 0.028, and one block's scale 1 % off (0.026) passed. The allowance's run computes
    # MatMulNBits in float32 (accuracy level 1), so y moves by rounding alone there
    from onnx import TensorProto, helper  # noqa: PLC0415

    from .rules import test_nbits  # noqa: PLC0415

    m = test_nbits.nbits_model(k=64, n=8, block=32)
    g = m.graph
    g.input.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]))
    g.initializer.extend([onnx.numpy_helper.from_array(np.array(0.05, np.float32), "qs"),
                          onnx.numpy_helper.from_array(np.array(128, np.uint8), "qz")])
    g.node.extend([helper.make_node("QuantizeLinear", ["x", "qs", "qz"], ["xq"]),
                   helper.make_node("DequantizeLinear", ["xq", "qs", "qz"], ["q"])])
    g.output.append(helper.make_tensor_value_info("q", TensorProto.FLOAT, [4]))
    wrong = onnx.ModelProto.FromString(m.SerializeToString())
    s = next(t for t in wrong.graph.initializer if t.name == "s")
    a = onnx.numpy_helper.to_array(s).copy()
    a[0, 0] *= 1.01
    s.CopyFrom(onnx.numpy_helper.from_array(a, "s"))
    assert verify(m, m).status == "passed"
    v = verify(m, wrong)
    assert v.status == "failed", v.detail
    assert "output 'y'" in v.detail


def test_an_index_into_a_dequantized_table_spans_the_table():
    # a quantized embedding: Gather(DequantizeLinear(int8 table [50, 2]), ids); the table's
    # shape is its int8 initializer's, not declared for the DQ's output: the ids must still
    # range over the 50 rows (they were drawn in [0, 2), which left 48 rows untested)
    rows = ", ".join(str(v % 100 - 50) for v in range(100))
    m = parse_model(f"""
        <ir_version: 8, opset_import: ["" : 18]>
        g (int64[batch, 7] ids) => (float[batch, 7, 2] e) <int8[50, 2] q = {{{rows}}}, float s = {{0.5}}> {{
            table = DequantizeLinear(q, s)
            e = Gather(table, ids)
        }}""")
    v = verify(m, m)
    assert v.status == "passed", v.detail
    assert "ids an index in [-50, 50)" in v.inputs, v.inputs


def test_a_rewrite_wrong_only_at_an_integers_extremes_fails():
    # Relu(Abs(x)) -> Abs(x) holds for every int8 but -128 (Abs wraps it to -128, Relu makes
    # that 0), which integers drawn in [-9, 9] never hold
    m = parse_model(H18 + "g (int8[2, 8] x) => (int8[2, 8] y) { a = Abs(x)\n y = Relu(a) }")
    wrong = parse_model(H18 + "g (int8[2, 8] x) => (int8[2, 8] y) { y = Abs(x) }")
    v = verify(m, wrong)
    assert v.status == "failed" and "integers at their type's extremes" in v.detail, v.detail
    assert "vs expected 0" in v.detail, v.detail
    ok = verify(m, m)
    assert ok.status == "passed" and "integers at their type's extremes" in ok.detail, ok.detail


def test_integer_extremes_keep_a_dividend_off_int_min():
    # INT64_MIN / -1 kills onnxruntime (SIGFPE): a dividend gets INT64_MIN + 1 at most, so that
    # the other edge cases are not lost to a crash of the original
    m = parse_model(H18 + """
        g (int64[8] n) => (int64[8] y) {
            d = Constant <value = int64 {-1}> ()
            y = Div(n, d)
        }""")
    v = verify(m, m, isolated=True)
    assert v.status == "passed" and "integers at their type's extremes" in v.detail, v.detail
    assert "crashed" not in v.detail, v.detail


def test_a_rewrite_wrong_only_beyond_the_values_drawn_fails_on_scaled_floats():
    # Where(x > 10, x * x, -x) selects x * x nowhere for standard normal x, and the large case
    # (+-2e15) compares finiteness alone: x * x taken for x passed
    m = parse_model(H18 + """
        g (float[2, 8] x) => (float[2, 8] y) {
            ten = Constant <value = float {10.0}> ()
            c = Greater(x, ten)
            s = Mul(x, x)
            n = Neg(x)
            y = Where(c, s, n)
        }""")
    wrong = parse_model(H18 + """
        g (float[2, 8] x) => (float[2, 8] y) {
            ten = Constant <value = float {10.0}> ()
            c = Greater(x, ten)
            n = Neg(x)
            y = Where(c, x, n)
        }""")
    v = verify(m, wrong)
    assert v.status == "failed" and "on floats times 100" in v.detail, v.detail
    ok = verify(m, m)
    assert ok.status == "passed" and "floats times 100" in ok.detail, ok.detail


def test_a_right_program_passes_on_scaled_floats_where_only_the_intermediates_grow():
    # (x * 300 + 1.1) - x * 300 is 1.1 in exact arithmetic; the original rounds the sum at the
    # ulp of x * 300, which the floats times 100 make 100 times larger (up to 4e-3), while
    # the output stays 1.1. A ResNet-50 whose BatchNorms keep the logits small was refused
    # so: rounding grows with the terms a model sums, not with its output.
    def model(body):
        return parse_model(H18 + """
        g (float[16, 64] x) => (float[16, 64] y) {
            a = Constant <value = float {300.0}> ()
            c = Constant <value = float {1.1}> ()
            t = Mul(x, a)
        """ + body + "}")

    original = model("s = Add(t, c)\n y = Sub(s, t)")
    v = verify(original, model("z = Sub(t, t)\n y = Add(z, c)"))
    assert v.status == "passed" and "floats times 100" in v.detail, v.detail
    # still refused there: a program off by 0.1 only where x > 10
    wrong = model("ten = Constant <value = float {10.0}> ()\n big = Greater(x, ten)\n z = Sub(t, t)\n"
                  "k = Add(z, c)\n e = Constant <value = float {0.1}> ()\n f = Add(k, e)\n y = Where(big, f, k)")
    w = verify(original, wrong)
    assert w.status == "failed" and "on floats times 100" in w.detail, w.detail


def test_a_rewrite_exact_on_the_random_draw_and_off_beyond_it_gets_no_scaled_allowance():
    # Tanh(x) taken as 0.995 Tanh(x) only where x > 10: exact on the random draw, 0.005 off
    # on the floats times 100. Their absolute tolerance 100 times the random draw's (0.01 at
    # an output of 1) passed it: the allowance is for rounding that grows with the terms
    # summed, so it grows no further than SCALED times what the random draw showed
    original = parse_model(H18 + """
        g (float[16, 64] x) => (float[16, 64] y) {
            y = Tanh(x)
        }""")
    wrong = parse_model(H18 + """
        g (float[16, 64] x) => (float[16, 64] y) {
            t = Tanh(x)
            ten = Constant <value = float {10.0}> ()
            big = Greater(x, ten)
            k = Constant <value = float {0.995}> ()
            s = Mul(t, k)
            y = Where(big, s, t)
        }""")
    w = verify(original, wrong)
    assert w.status == "failed" and "on floats times 100" in w.detail, w.detail
    assert verify(original, original).status == "passed"


def test_qdq_allowance_leaves_out_where_onnxruntime_fuses_an_average_pool_that_counts_otherwise():
    # ceil_mode 1 with count_include_pad 1: onnxruntime's QLinearAveragePool divides a window
    # past the end by another count than its float AveragePool (87 output steps here), and its
    # own optimization fuses it so: the allowance passed the fused form, measured against itself
    def model(body: str, ops: str = "") -> onnx.ModelProto:
        return parse_model(f"""
            <ir_version: 8, opset_import: ["" : 19{ops}]>
            g (uint8[1, 3, 7, 7] x) => (uint8[1, 3, 3, 3] y)
                <float s = {{0.05}}, uint8 z = {{100}}, float ys = {{0.03}}, uint8 yz = {{120}}> {{
                {body}
            }}""")
    attrs = "kernel_shape = [2, 2], strides = [3, 3], ceil_mode = 1, count_include_pad = 1"
    original = model(f"d = DequantizeLinear(x, s, z)\n a = AveragePool <{attrs}> (d)\n y = QuantizeLinear(a, ys, yz)")
    fused = model(f"y = com.microsoft.QLinearAveragePool <{attrs}> (x, s, z, ys, yz)", ', "com.microsoft" : 1')
    assert "AveragePool" in _kept_out_why(original)
    v = verify(original, fused)
    assert v.status == "failed" and "left out of that measure" in v.detail, v.detail
    # without ceil_mode the two count alike: the allowance stays
    assert _kept_out_why(model("d = DequantizeLinear(x, s, z)\n a = AveragePool "
                                        "<kernel_shape = [2, 2], strides = [3, 3], count_include_pad = 1> (d)\n"
                                        " y = QuantizeLinear(a, ys, yz)")) == ""


def test_scaled_floats_skip_where_the_original_overflows():
    # exp(x * 100) overflows in a written-out softmax for x > 0.89, where a fused Softmax
    # (it subtracts the maximum) does not: not wrong there; elsewhere the tolerance holds
    e = {"y": np.array([np.nan, np.inf, 0.5, 1.0], np.float32)}
    fused = {"y": np.array([1.0, 0.0, 0.5, 1.0], np.float32)}
    assert compare(e, fused, None, None) != []
    assert compare(e, fused, None, None, scaled=True) == []
    assert compare(e, {"y": np.array([1.0, 0.0, 0.6, 1.0], np.float32)}, None, None, scaled=True) != []
    assert compare(e, {"y": np.array([1.0, 0.0, 0.5, np.inf], np.float32)}, None, None, scaled=True) != []


def _square_gemm(trans_b: int, axis: int) -> onnx.ModelProto:
    """DQ -> Gemm -> Q with a 5 x 5 int8 B whose DequantizeLinear has 5 scales along `axis`."""
    b = np.random.default_rng(0).integers(-64, 65, (5, 5))
    return parse_model(f"""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[3, 5] x) => (float[3, 5] z)
            <int8[5, 5] b = {{{", ".join(map(str, b.ravel()))}}}, float[5] bs = {{0.01, 0.02, 0.015, 0.03, 0.025}},
             int8[5] bz = {{0, 0, 0, 0, 0}}, float xs = {{0.05}}, uint8 xz = {{128}}, float ys = {{0.1}},
             uint8 yz = {{120}}> {{
            xq = QuantizeLinear(x, xs, xz)
            xd = DequantizeLinear(xq, xs, xz)
            bd = DequantizeLinear <axis = {axis}> (b, bs, bz)
            c = Gemm <transB = {trans_b}> (xd, bd)
            yq = QuantizeLinear(c, ys, yz)
            z = DequantizeLinear(yq, ys, yz)
        }}""")


@pytest.mark.parametrize("op, axis", [("Conv", 1), ("Conv", -3), ("Gemm", 1)])
def test_qdq_allowance_leaves_out_where_onnxruntime_misreads_per_axis_weight_scales(op, axis):
    # scales along a Conv weight's input channels (4 of them, as many as its outputs):
    # onnxruntime's QLinearConv fusion takes them as one per output channel and its own model
    # moved the output by up to 44 steps, so a program with the bias negated passed as
    # "as far as onnxruntime's own"; a Gemm's QGemm fusion alike (7 steps)
    from .rules import test_qdq  # noqa: PLC0415

    if op == "Conv":
        m = test_qdq.conv_model(w_scale=[0.01, 0.02, 0.015, 0.03], w_axis=axis, cin=4, cout=4)
        wrong = onnx.ModelProto.FromString(m.SerializeToString())
        b = next(t for t in wrong.graph.initializer if t.name == "b")
        b.CopyFrom(onnx.numpy_helper.from_array(-onnx.numpy_helper.to_array(b), "b"))
    else:  # B with transB holds its output channels along axis 0
        m = _square_gemm(1, axis)
        wrong = onnx.ModelProto.FromString(m.SerializeToString())  # every output 3 steps up
        wrong.graph.initializer.append(onnx.numpy_helper.from_array(np.array(123, np.uint8), "yz3"))
        wrong.graph.node[-1].input[2] = "yz3"
    v = verify(m, wrong)
    assert v.status == "failed" and "left out of that measure" in v.detail, v.detail
    assert "per-axis scales" in _kept_out_why(m), _kept_out_why(m)
    # along the output channels the allowance stands
    assert _kept_out_why(test_qdq.conv_model(w_scale=[0.01, 0.02, 0.015, 0.03], cin=4, cout=4)) == ""
    assert _kept_out_why(_square_gemm(1, 0)) == _kept_out_why(_square_gemm(0, 1)) == ""


def test_qdq_allowance_leaves_out_per_axis_scales_onnxruntime_reads_as_one():
    # a QuantizeLinear after a Softmax with one scale per channel: onnxruntime's QLinearSoftmax
    # takes one scale in all (its own model moved outputs by 5 steps)
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 4, 4, 4] x) => (float[1, 4, 4, 4] z)
            <float xs = {0.05}, uint8 xz = {128}, float[4] ys = {0.05, 0.1, 0.15, 0.2}, uint8[4] yz = {0, 0, 0, 0}> {
            xq = QuantizeLinear(x, xs, xz)
            xd = DequantizeLinear(xq, xs, xz)
            c = Softmax(xd)
            yq = QuantizeLinear <axis = 1> (c, ys, yz)
            z = DequantizeLinear <axis = 1> (yq, ys, yz)
        }""")
    assert "per-axis scales" in _kept_out_why(m)


def test_the_inputs_of_sizes_that_do_not_run_die_with_the_verification():
    """Where the original runs at none of the sizes tried ("not possible"), the inputs drawn for
    them are freed when verify returns, not when the garbage collector next runs: the first
    failure was kept with its traceback, whose frames held the inputs (550 MiB for this small
    cached-attention model, whose RotaryEmbedding refuses positions of another batch)."""
    import gc
    import types

    from .rules.test_rotary_cached import rotary_step_model

    m = parse_model(rotary_step_model("op", keys_3d=False))
    gc.collect()
    gc.disable()
    try:
        v = verify(m, m)
        alive = [o for o in gc.get_objects()  # the frame that drew them, and held them
                 if isinstance(o, types.FrameType) and o.f_code.co_name == "_first_of"]
    finally:
        gc.enable()
    assert v.status == "not possible", v.detail
    assert not alive, f"{len(alive)} frames holding drawn inputs still alive"


# ---- the allowance's reference run with nodes written as float ops (qdq_kept_out): what it
# must not let through (each passed verification once)

def _per_axis_nan_model(yz: int) -> onnx.ModelProto:
    """x -> Concat(x, a column that is always NaN) -> per-axis int8 Q/DQ (kept out) -> MatMul -> Q."""
    w = np.round(np.random.default_rng(0).standard_normal((16, 4)) * 0.1, 3)
    w[15, :] = 0.5
    return parse_model(f"""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[8, 15] x) => (uint8[8, 4] y)
          <float[16] s1 = {{{", ".join(["0.05"] * 16)}}}, int8[16] z1 = {{{", ".join(["0"] * 16)}}},
           float[16, 4] w = {{{", ".join(map(str, w.ravel()))}}}, float ys = {{0.05}}, uint8 yz = {{{yz}}},
           int64[1] st = {{0}}, int64[1] en = {{1}}, int64[1] ax = {{1}}, float m1 = {{-1.0}}> {{
            t = Slice(x, st, en, ax)
            tt = Mul(t, t)
            u = Sub(m1, tt)
            nc = Sqrt(u)
            h = Concat <axis = 1> (x, nc)
            q1 = QuantizeLinear <axis = 1> (h, s1, z1)
            d1 = DequantizeLinear <axis = 1> (q1, s1, z1)
            mm = MatMul(d1, w)
            y = QuantizeLinear(mm, ys, yz)
        }}""")


def test_qdq_allowance_reference_quantizes_nan_as_onnxruntimes_kernel():
    # onnxruntime's int8 QuantizeLinear gives NaN the code -128; the node written as float ops
    # gave 0 (Cast of NaN), so the reference run moved every output by about 64 steps and a
    # model 30 steps off passed as no farther
    m = _per_axis_nan_model(200)
    assert set(qdq_kept_out(m)) == {"q1", "d1"}
    assert verify(m, m).status == "passed"
    v = verify(m, _per_axis_nan_model(170))
    assert v.status == "failed" and v.requantized, v.detail


def _matmul_tiny_scale_model(ys: str) -> onnx.ModelProto:
    w = np.random.default_rng(1).standard_normal((16, 4)).astype(np.float32) * np.float32(1e-38)
    return parse_model(f"""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[8, 16] x) => (uint8[8, 4] y)
            <float[16, 4] w = {{{", ".join(repr(float(v)) for v in w.ravel())}}}, float ys = {{{ys}}},
             uint8 yz = {{128}}> {{
            mm = MatMul(x, w)
            y = QuantizeLinear(mm, ys, yz)
        }}""")


def test_qdq_allowance_reference_folds_no_scale_of_a_node_written_as_float_ops():
    # a Q at a scale of 1e-39 (kept out) after a MatMul, written Cast -> Div -> Round ...:
    # onnxruntime dropped the Cast and folded 1 / 1e-39 = inf into the MatMul's alpha
    # (MatMulScaleFusion), so its reference saturated every code and a model of scale 1e-45
    # (every code 0 or 255) passed. With a node written so, every float fold stays off
    m = _matmul_tiny_scale_model("1e-39")
    assert "the scale of QuantizeLinear" in _kept_out_why(m)
    assert verify(m, m).status == "passed"
    v = verify(m, _matmul_tiny_scale_model("1e-45"))
    assert v.status == "failed", v.detail


@pytest.mark.parametrize("mover", ["r = Reshape(d, shp)", "r = Transpose <perm = [0, 1, 3, 2]> (d)",
                                   "r = Identity(d)"], ids=["reshape", "transpose", "identity"])
def test_qdq_allowance_finds_a_miscounting_pool_behind_data_movement(mover):
    # DQ -> Reshape / Transpose / Identity -> AveragePool (ceil_mode, count_include_pad) -> Q:
    # onnxruntime moves the DQ past the op and fuses the miscounting QLinearAveragePool (87 to
    # 97 steps off); the check read only a DQ feeding the pool directly, and the allowance took
    # onnxruntime's fusion as its measure
    def model(body: str, ops: str = "") -> onnx.ModelProto:
        return parse_model(f"""
            <ir_version: 8, opset_import: ["" : 19{ops}]>
            g (uint8[1, 3, 7, 7] x) => (uint8[1, 3, 3, 3] y) <float s = {{0.05}}, uint8 z = {{100}},
                float ys = {{0.03}}, uint8 yz = {{120}}, int64[4] shp = {{1, 3, 7, 7}}> {{
                {body}
            }}""")
    attrs = "kernel_shape = [2, 2], strides = [3, 3], ceil_mode = 1, count_include_pad = 1"
    original = model(f"d = DequantizeLinear(x, s, z)\n {mover}\n a = AveragePool <{attrs}> (r)\n"
                     " y = QuantizeLinear(a, ys, yz)")
    moved = "xt = Transpose <perm = [0, 1, 3, 2]> (x)\n " if "Transpose" in mover else ""
    fused = model(f"{moved}y = com.microsoft.QLinearAveragePool <{attrs}> ({'xt' if moved else 'x'}, s, z, ys, yz)",
                  ', "com.microsoft" : 1')
    assert "AveragePool" in _kept_out_why(original)
    v = verify(original, fused)
    assert v.status == "failed", v.detail


QLINEAR_ADD_BODIES = ("ad = DequantizeLinear(a, s, z)\n bd = DequantizeLinear(b, s, z)\n c = Add(ad, bd)\n"
                      " yy = QuantizeLinear(c, ys, z)", "yy = com.microsoft.QLinearAdd(a, s, z, b, s, z, ys, z)")


@pytest.mark.parametrize("where", ["if-branch", "local-function"])
def test_qdq_allowance_is_withheld_where_a_subgraph_or_function_holds_qdq(where):
    # DQ -> Add -> Q with an output scale of 0 inside an If branch or a local function:
    # onnxruntime fuses QLinearAdd there too (255 codes off), and the check, which reads the
    # main graph, left it in the reference: the same QLinearAdd passed
    head = """
        <ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1{fn}]>
        g (uint8[4, 64] a, uint8[4, 64] b, bool c0, float[4] f) => (uint8[4, 64] y, uint8[4] fq)
           <float s = {{0.05}}, float ys = {{0.0}}, uint8 z = {{128}}, float fs = {{0.1}}> {{
            fq = QuantizeLinear(f, fs, z)
            {call}
        }}"""
    if where == "if-branch":
        text = head.format(fn="", call="y = If (c0) <then_branch = g1 () => (uint8[4, 64] yy) { %s }, "
                                        "else_branch = g2 () => (uint8[4, 64] yy) { %s }>")
        original, wrong = (parse_model(text % (body, body)) for body in QLINEAR_ADD_BODIES)
    else:
        text = head.format(fn=', "local" : 1', call="y = local.F(a, b, s, ys, z)") + """
            <domain: "local", opset_import: ["" : 17, "com.microsoft" : 1]>
            F (a, b, s, ys, z) => (yy) { %s }"""
        original, wrong = (parse_model(text % body) for body in QLINEAR_ADD_BODIES)
    assert "holds a QuantizeLinear or DequantizeLinear" in qdq_allowance_withheld(original)
    v = verify(original, wrong)
    assert v.status == "failed", v.detail


def test_qdq_allowance_is_withheld_where_its_reference_model_cannot_be_made(monkeypatch):
    # writing the kept-out nodes as float ops failing (shape inference refusing the model) is
    # no crash of verification: the allowance is withheld and the wrong program fails
    from eqsat.verification import qdq  # noqa: PLC0415

    def refuse(model, outputs):
        raise RuntimeError("inference refused")

    monkeypatch.setattr(qdq, "as_float_ops", refuse)
    m = _matmul_tiny_scale_model("1e-39")
    v = verify(m, _matmul_tiny_scale_model("1e-45"))
    assert v.status == "failed" and "its reference model could not be made (inference refused)" in v.detail, v.detail
