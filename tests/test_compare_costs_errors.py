"""compare-costs where onnxruntime cannot run something: the input (exit 2, before any
saturation) or a program extracted from it (exit 1, naming the program); one line each,
never a traceback."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from .conftest import one_error, parse_model, run_cli


def custom_op_model() -> onnx.ModelProto:
    v = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Foo", ["r"], ["y"],
                                                                                   domain="my.domain")],
                          "g", [v("x", TensorProto.FLOAT, [2, 4])], [v("y", TensorProto.FLOAT, [2, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)])


def test_an_input_onnxruntime_cannot_run_is_refused_before_saturation(capsys, tmp_path, monkeypatch):
    # it was a traceback from onnxruntime's session, after saturating and extracting
    src = tmp_path / "m.onnx"
    onnx.save(custom_op_model(), str(src))
    import eqsat.backends.ort.compare_costs

    def no_saturation(*a, **k):
        raise AssertionError("saturated a model that cannot be timed")

    monkeypatch.setattr(eqsat.backends.ort.compare_costs, "saturate", no_saturation)
    rc, out, err = run_cli(capsys, "compare-costs", src, "-q", "--samples", "1", "--runs", "1",
                           "--json", tmp_path / "c.json")
    line = one_error(err)
    assert rc == 2 and out == "", err
    assert line.startswith("eqsat: error: compare-costs times programs under onnxruntime, which cannot run this "
                           "model: "), line
    assert "my.domain:Foo" in line
    assert not (tmp_path / "c.json").exists()


def test_a_program_onnxruntime_cannot_run_is_named(capsys, tmp_path, monkeypatch):
    src = tmp_path / "m.onnx"
    onnx.save(parse_model("""<ir_version: 8, opset_import: ["": 17]>
g (float[2, 8] x) => (float[2, 8] y) { a = Relu(x)
 y = Sigmoid(a) }"""), str(src))
    import eqsat.backends.ort.latency

    def refuse(model, **kw):
        raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : no kernel for it\nsecond line")

    monkeypatch.setattr(eqsat.backends.ort.latency, "session", refuse)  # the programs' sessions, not the input's check
    rc, out, err = run_cli(capsys, "compare-costs", src, "-q", "--samples", "1", "--runs", "1",
                           "--cost-model", "node-count", "--json", tmp_path / "c.json")
    line = one_error(err)
    assert rc == 1 and out == "", err
    assert line.startswith("eqsat: error: compare-costs: onnxruntime cannot run program 1 of "), line
    assert line.endswith("(the one node-count chose): [ONNXRuntimeError] : 1 : FAIL : no kernel for it"), line
    assert not (tmp_path / "c.json").exists()
