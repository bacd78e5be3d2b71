"""Verification of an optimized model against its original (eqsat/verify.py): the sizes it
picks for symbolic dimensions, and its tolerance by output type."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

from eqsat.verify import compare, tolerance, verification_dims, verify

from .conftest import parse_model


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


def test_a_float16_models_verification_uses_and_reports_the_float16_tolerance():
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float16[batch, 4] x) => (float16[batch, 4] y) { y = Relu(x) }""")
    v = verify(m, m)
    assert v.status == "passed" and "within rtol 0.01, atol 0.001" in v.detail


def test_sizes_no_try_fits_is_not_possible_and_says_to_pass_dim():
    # the export fixed 16 elements behind a symbolic name: no size tried is 16
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[n] x) => (float[4, 4] y) { s = Constant <value = int64[2] {4, 4}> ()
                                             y = Reshape(x, s) }""")
    v = verify(m, m)
    assert v.status == "not possible"
    assert v.detail.endswith("(symbolic sizes tried: n=2; n=32; n=256; pass --dim NAME=SIZE for the sizes "
                             "the model needs)")
    assert verify(m, m, dims={"n": 16}).status == "passed"



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
    n = len(verification_dims(m))
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
    assert v.status == "passed" and not v.not_verified  # a seed repeats the mask run to run


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
