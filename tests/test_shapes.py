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

from eqsat.core import ort_symbolic
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
    assert ort_symbolic.load() is not None, ort_symbolic.unavailable


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


# Slice(u, 0, n) where u has 2 * ceiling(N / 2) elements and n = N: onnxruntime's symbolic
# inference cannot decide n <= 2 * ceiling(N / 2), and "treats them as equal": it gives the
# Slice u's length, N + 1 where N is odd. The Gather of element 8 keeps the original from
# running on the sizes verification tries first (a Funnel-Transformer export does the same
# with its pooling), so verification ran only on N = 32.
CEIL_SLICE = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 1, N] x) => (float[1, 1, M] z, float[1, 1] g)
  <int64[1] zero = {0}, int64[1] two = {2}, int64[1] three = {3}, int64 i = {8}> {
    p = AveragePool <ceil_mode = 1, kernel_shape = [2], strides = [2]> (x)
    u = Concat <axis = 2> (p, p)
    s = Shape(x)
    n = Slice(s, two, three)
    z = Slice(u, zero, n, two)
    g = Gather <axis = 2> (x, i)
}
"""

# MaxPool with auto_pad SAME_UPPER and stride 2 gives ceiling(N / 2) rows; onnxruntime's
# symbolic inference, unable to compare N mod 2 with the kernel, assumes no remainder: floor(N / 2)
SAME_POOL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 1, N, 4] x) => (float[1, 1, M, 4] y) {
    y = MaxPool <auto_pad = "SAME_UPPER", kernel_shape = [3, 1], strides = [2, 1]> (x)
}
"""


def _size_right(dim, symbol: str, sizes: dict[int, int]) -> bool:
    """Whether an inferred size is right at each N of `sizes` (N -> the size onnxruntime
    gives): a number must equal it, an expression of `symbol` evaluate to it; a symbol of its
    own (an unknown) claims nothing and is right."""
    import sympy

    if dim is None or (isinstance(dim, str) and symbol not in dim):
        return True
    sym = sympy.Symbol(symbol, integer=True, positive=True)
    expr = sympy.sympify(dim, locals={symbol: sym})
    return all(int(expr.subs(sym, n)) == want for n, want in sizes.items())


def test_a_slice_whose_end_onnxruntimes_inference_cannot_compare_is_no_shape_fact():
    types, _ = infer_types(onnx.parser.parse_model(CEIL_SLICE))
    assert types["z"].dims is None or _size_right(types["z"].dims[2], "N", {9: 9, 10: 10, 11: 11}), types["z"]


def test_same_padding_with_a_stride_on_a_symbolic_size_rounds_up():
    types, _ = infer_types(onnx.parser.parse_model(SAME_POOL))
    assert types["y"].dims is None or _size_right(types["y"].dims[2], "N", {4: 2, 5: 3, 7: 4}), types["y"]


def test_a_slice_onnxruntimes_inference_guessed_is_kept(tmp_path, capsys):
    # eqsat dropped the Slice as a no-op (same shape as its input) and wrote, with exit 0, a model
    # that gives N + 1 elements for every odd N >= 9
    import numpy as np
    import onnxruntime as ort

    from tests.conftest import run_cli

    m = onnx.parser.parse_model(CEIL_SLICE)
    onnx.save(m, tmp_path / "m.onnx")
    rc, _, err = run_cli(capsys, "optimize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.onnx"), "-q")
    if rc != 0:
        assert not (tmp_path / "o.onnx").exists(), err
        return
    a, b = (ort.InferenceSession(str(p)) for p in (tmp_path / "m.onnx", tmp_path / "o.onnx"))
    for n in (9, 10, 11, 12):
        x = np.random.default_rng(n).random((1, 1, n), dtype=np.float32)
        assert a.run(None, {"x": x})[0].shape == b.run(None, {"x": x})[0].shape == (1, 1, n)
