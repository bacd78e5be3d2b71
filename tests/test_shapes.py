"""Shape inference (eqsat.core.shapes): onnxruntime's symbolic inference is installed with the
project, says so when it is not, and leaves nothing behind in the working directory."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import onnx.parser
import pytest

from eqsat.core import shapes
from eqsat.core.shapes import infer_types

# Half a dimension: onnx's inference leaves the Reshape's last size unknown, onnxruntime's
# symbolic inference knows it is floor(n/2).
HALVED = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[batch, n] a) => (float[batch, 2, m] y) {
    s = Shape(a)
    i0 = Constant<value = int64[1] {0}>()
    i1 = Constant<value = int64[1] {1}>()
    two = Constant<value = int64[1] {2}>()
    b = Gather(s, i0)
    n = Gather(s, i1)
    h = Div(n, two)
    shape = Concat<axis = 0>(b, two, h)
    r = Reshape(a, shape)
    y = Relu(r)
}
"""

def test_symbolic_inference_loads_where_the_project_is_installed():
    # `pip install eqsat[cpu]` brings sympy, which onnxruntime's symbolic inference imports;
    # without it the symbolic sizes of exported transformers stay unrelated (Llama-4l:
    # 355 nodes instead of 212) and nothing said so.
    assert shapes._symbolic_shape_infer() is not None, shapes._unavailable


def test_without_sympy_inference_warns_and_says_how_to_install_it():
    script = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "sympy" or name.startswith("sympy."):
                    raise ImportError("No module named 'sympy'")
        sys.meta_path.insert(0, Block())
        import onnx.parser
        from eqsat.core.shapes import infer_types
        types, warning = infer_types(onnx.parser.parse_model({HALVED!r}))
        print(warning)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert "symbolic shape inference is unavailable (" in out and "sympy" in out
    assert out.rstrip().endswith("; pip install sympy")  # not eqsat[cpu]: a gpu install has onnxruntime-gpu


def test_no_warning_when_symbolic_inference_runs():
    import onnx.parser

    types, warning = infer_types(onnx.parser.parse_model(HALVED))
    assert warning is None
    assert types["r"].dims == ("batch", 2, "floor(n/2)")


@pytest.mark.slow  # generating the onnx node test cases takes ~15 s
def test_incomplete_symbolic_inference_writes_no_temp_files(tmp_path, monkeypatch):
    # onnxruntime's symbolic shape inference saves sym_shape_infer_temp.onnx (with external
    # data files) into the working directory when it cannot infer every shape: this
    # generated onnx node test case is one such model.
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        case = next(c for c in collect_testcases("Attention") if c.name == "test_attention_4d_expanded")
    monkeypatch.chdir(tmp_path)
    types, _ = infer_types(case.model)
    assert types  # inference still gave the declared and inferred types
    assert sorted(os.listdir(tmp_path)) == []


REVERSED_SLICE = """
<ir_version: 8, opset_import: ["" : 15]>
g (float[3] x) => (int64[1] s, int64[?] r) {
    st = Constant <value = int64[1] {1}> ()
    en = Constant <value = int64[1] {-8}> ()
    ax = Constant <value = int64[1] {0}> ()
    sp = Constant <value = int64[1] {-1}> ()
    y = Slice(x, st, en, ax, sp)
    s = Shape(y)
    zero = Constant <value = int64 {0}> ()
    one = Constant <value = int64 {1}> ()
    n = Gather(s, zero)
    r = Range(zero, n, one)
}
"""


def test_shapes_the_two_inferences_disagree_on_are_not_trusted():
    # onnxruntime's symbolic inference gives Slice(x[3], 1, -8, step -1) one element, onnx's
    # two (right): eqsat took the first, folded Shape(y) to [1] and wrote a wrong model
    # (found by tests/fuzz)
    import numpy as np

    from eqsat.core.pipeline import Options, optimize
    from eqsat.verification import compare, run

    m = onnx.parser.parse_model(REVERSED_SLICE)
    types, _ = infer_types(m)
    assert types["y"].dims is None  # neither inference's shape
    assert types["r"].dims is None  # nor of what is computed from it (the output's declared rank is no fact)
    feeds = {"x": np.arange(1, 4, dtype=np.float32)}
    expected = run(m, feeds)
    assert expected["s"].tolist() == [2]
    assert not compare(expected, run(optimize(m, Options()).model, feeds))
