"""Verification of an optimized model against its original (eqsat/verify.py): the sizes it
picks for symbolic dimensions, and its tolerance by output type."""

from __future__ import annotations

import numpy as np

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


def test_a_model_with_random_ops_cannot_be_verified_and_says_why():
    # two runs of such a model differ: verification always "failed" (exit 1), so a model with
    # training-mode Dropout could only be optimized with --no-verify
    m = parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, 4] x) => (float[batch, 4] y, float[batch, 4] z) {
            r = Constant <value = float {0.5}> ()
            t = Constant <value = bool {1}> ()
            y = Dropout(x, r, t)
            u = RandomUniformLike(x)
            z = Add(x, u)
        }""")
    v = verify(m, m)
    assert v.status == "not possible"
    assert v.detail == ("the model has random ops (Dropout (training mode), RandomUniformLike): two runs of it differ, "
                        "so there is nothing to compare")
    inference = parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, 4] x) => (float[batch, 4] y) {
            r = Constant <value = float {0.5}> ()
            y = Dropout(x, r)
        }""")
    assert verify(inference, inference).status == "passed"  # no training_mode: an identity
    seeded = parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, 4] x) => (float[batch, 4] y) {
            r = Constant <value = float {0.5}> ()
            t = Constant <value = bool {1}> ()
            y = Dropout <seed = 0> (x, r, t)
        }""")
    assert verify(seeded, seeded).status == "passed"  # a seed repeats the mask run to run
