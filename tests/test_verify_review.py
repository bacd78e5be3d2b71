"""Holes a review of verification found: inputs where a wrong optimized model was written with
exit 0. Each test crafts the input, has a user's unsound rule file make the wrong rewrite on
purpose (or hands verify the wrong program), and checks that it is refused, beside a right
program on the same input that is still verified."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto
from onnx import helper as oh

from eqsat.verification import random_inputs, run, verify
from eqsat.verification.widen import kept, widened

from .conftest import ops, optimize_cli, parse_model
from .test_verify_fp16 import bfloat16, layer_norm

# ---- float16: a rounding the original asks for (a Cast to float16 of a computed value)

# y: the rounding error of x * x (exact in float32) stored in float16, as a float32 value split
# into a float16 part and the rest: `widened` drops the Cast of b to float16 (a computed value),
# so the original's float32 copy, the truth, gives 0
SPLIT = """
    <ir_version: 8, opset_import: ["" : 18]>
    g (float16[64] x) => (float16[64] y) {
        a = Cast <to = 1> (x)
        b = Mul(a, a)
        c = Cast <to = 10> (b)
        d = Cast <to = 1> (c)
        e = Sub(d, b)
        y = Cast <to = 10> (e)
    }"""
DROP_ROUNDING = ("(ruleset bad)\n; Cast(Cast(b, float16), float32) -> b, unsound: drops the rounding to float16\n"
                 "(rewrite (Cast (Cast b rm sat (F16)) rm2 sat2 (F32)) b :when ((= (F32) (dtype b)))"
                 ' :ruleset bad :name "bad-cast-round-trip")\n')


def test_a_dropped_rounding_to_float16_is_refused(capsys, tmp_path):
    # Before: exit 0, written with y = 0 where the original gives x * x's float16 rounding error
    # (up to 0.0019 on the random draw, 100 % of the output): the fp16 runs' difference was
    # excused, the optimized run being exactly the original's float32 copy (which drops the
    # rounding too), and the float32 copies agreed
    m = parse_model(SPLIT)
    rc, err, out = optimize_cli(capsys, tmp_path, m, rules=DROP_ROUNDING)
    assert rc == 1 and out is None, err
    assert "output 'y'" in err
    f = random_inputs(m, {}, 0)
    assert np.abs(run(m, f)["y"]).max() > 1e-4  # what the wrong program gives as 0


def test_a_float16_rounding_changed_to_bfloat16_is_refused():
    # the same rounding done to bfloat16 (8 bits where float16 keeps 11): the float32 copies of
    # both drop either Cast, so only the original's kept copy tells them apart
    m = parse_model(SPLIT)
    bad = parse_model(SPLIT.replace("c = Cast <to = 10> (b)", "c = Cast <to = 16> (b)"))
    v = verify(m, bad)
    assert v.status == "failed", v.detail


def test_a_dropped_rounding_to_bfloat16_is_refused():
    # bfloat16: onnxruntime runs no bfloat16 kernels, the models are verified as their rounded
    # copies against the float32 copy (`_emulated`), which dropped the rounding of b as well
    m = parse_model(SPLIT.replace("float16[64]", "bfloat16[64]").replace("<to = 10>", "<to = 16>"))
    bad = parse_model(SPLIT.replace("float16[64]", "bfloat16[64]").replace("<to = 10>", "<to = 16>")
                      .replace("d = Cast <to = 1> (c)", "d = Identity(b)"))
    v = verify(m, bad)
    assert v.status == "failed", v.detail
    # before: "not possible" for the right program too (onnxruntime's binding takes no bfloat16
    # arrays, and every op here has a kernel, so the runs failed before any session did)
    v = verify(m, parse_model(SPLIT.replace("float16[64]", "bfloat16[64]").replace("<to = 10>", "<to = 16>")))
    assert v.status == "passed", v.detail


def test_a_layer_norm_fusion_beside_a_rounding_of_a_computed_value_is_verified():
    # the kept copy holds excused differences to it too: the fused LayerNormalization's
    # rounding difference is still excused where the model rounds a computed value elsewhere
    extra = ([oh.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT), oh.make_node("Mul", ["xf", "xf"], ["sq"]),
              oh.make_node("Cast", ["sq"], ["z"], to=TensorProto.FLOAT16)], ["z"])
    m = layer_norm(4.0, extra=[extra])
    assert kept(m) is not None and ops(kept(m)).count("Cast") == ops(widened(m)).count("Cast") + 1
    v = verify(m, layer_norm(4.0, fused=True, extra=[extra]))
    assert v.status == "passed", v.detail
    assert "float32 copies of both agree" in v.detail
    assert verify(bfloat16(m), bfloat16(layer_norm(4.0, fused=True, extra=[extra]))).status == "passed"


def test_kept_copies():
    m = parse_model(SPLIT)
    k = kept(m)
    assert ops(k).count("Cast") == ops(widened(m)).count("Cast") + 2  # b's and e's rounding
    assert all(v.type.tensor_type.elem_type == TensorProto.FLOAT for v in (*k.graph.input, *k.graph.output))
    assert kept(layer_norm(4.0)) is None  # no Cast of a computed value: the widened copy is the truth
    onnx.checker.check_model(k)
