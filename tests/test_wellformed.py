"""Models the onnx checker accepts but eqsat cannot read (eqsat/core/wellformed.py, and external
data numbers in eqsat/io/external.py): one line, exit 2, nothing written, in every command.
Each case was found by the fuzzer (tests/fuzz) as a traceback, a wrong read or a hang."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from .conftest import one_error, run_cli


def _add_model(c: onnx.TensorProto, node_name: str = "n") -> onnx.ModelProto:
    """y = x + c, x float[2]."""
    g = h.make_graph([h.make_node("Add", ["x", c.name], ["y"], name=node_name)], "g",
                     [h.make_tensor_value_info("x", TP.FLOAT, [2])], [h.make_tensor_value_info("y", TP.FLOAT, [2])],
                     [c])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _only(folder, *names: str) -> None:
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)


@pytest.mark.parametrize("dims, raw", [([], np.array([1, 2], np.float32).tobytes()),  # 8 bytes for 1 float
                                       ([2], b"\x00" * 10),  # not a whole number of floats
                                       ([2], b"\x00" * 12)])  # one float too many
def test_data_that_does_not_fit_its_dims_is_refused(capsys, tmp_path, dims, raw):
    # ValueError tracebacks from numpy (cannot reshape, buffer size not a multiple)
    c = h.make_tensor("c", TP.FLOAT, dims, [0.0] * int(np.prod(dims)))
    c.ClearField("float_data")
    c.raw_data = raw
    onnx.save(_add_model(c), tmp_path / "m.onnx")
    rc, _, err = run_cli(capsys, "optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-q")
    assert rc == 2 and "tensor 'c': holds" in one_error(err), err
    _only(tmp_path, "m.onnx")


def test_typed_data_that_does_not_fit_its_dims_is_refused(capsys, tmp_path):
    c = h.make_tensor("c", TP.FLOAT, [2], [1.0, 2.0])
    c.float_data.append(3.0)  # make_tensor checks the count
    onnx.save(_add_model(c), tmp_path / "m.onnx")
    rc, _, err = run_cli(capsys, "plan", tmp_path / "m.onnx", "-q")
    assert rc == 2 and "tensor 'c': holds 3 values where dims [2] need 2" in one_error(err), err


@pytest.mark.parametrize("command", ["optimize", "show", "plan", "diff"])
def test_a_name_that_is_not_utf8_is_refused(capsys, tmp_path, command):
    # UnicodeDecodeError in the decoder, TypeError in show: protobuf hands out bytes
    m = _add_model(numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "c"), node_name="QQQQ")
    src = tmp_path / "m.onnx"
    src.write_bytes(m.SerializeToString().replace(b"QQQQ", b"\xff\xfeQQ"))
    args = {"optimize": ["optimize", src, "-o", tmp_path / "o.onnx", "-q"],
            "show": ["show", src, "--svg", tmp_path / "g.svg"],
            "plan": ["plan", src, "-q"],
            "diff": ["diff", src, src]}[command]
    rc, _, err = run_cli(capsys, *args)
    assert rc == 2 and "the model.graph.node[0].name holds text that is not UTF-8" in one_error(err), err
    _only(tmp_path, "m.onnx")


def _elem_model(elem_type: int) -> onnx.ModelProto:
    """x[N, 2, 4] of element type `elem_type` -> MatMul -> Add -> Relu -> y."""
    w = numpy_helper.from_array(np.ones((4, 1), np.float32), "w")
    b = numpy_helper.from_array(np.ones((1,), np.float32), "b")
    nodes = [h.make_node("MatMul", ["x", "w"], ["a"]), h.make_node("Add", ["b", "a"], ["s"]),
             h.make_node("Relu", ["s"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, ["N", 2, 4])],
                     [h.make_tensor_value_info("y", TP.FLOAT, ["N", 2, 1])], [w, b])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 7
    m.graph.input[0].type.tensor_type.elem_type = elem_type
    return m


@pytest.mark.parametrize("elem_type", [0, 99])
@pytest.mark.parametrize("command", ["optimize", "plan"])
def test_an_input_of_no_element_type_is_refused_promptly(tmp_path, elem_type, command):
    # optimize never ended (onnxruntime's symbolic shape inference looped), plan: KeyError 99
    onnx.save(_elem_model(elem_type), tmp_path / "m.onnx")
    args = {"optimize": ["optimize", "m.onnx", "-o", "o.onnx", "-q"],
            "plan": ["plan", "m.onnx", "-q", "--dim", "N=2", "-o", "p.json"]}[command]
    try:
        p = subprocess.run([sys.executable, "-m", "eqsat", *args], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"eqsat {command} did not finish in 120 s")
    assert p.returncode == 2 and "graph input 'x': element type" in one_error(p.stderr), p.stderr
    _only(tmp_path, "m.onnx")


def _optimize_external(capsys, tmp_path, entries: list[tuple[str, str]], values: int = 2):
    """optimize y = x + c with c's external data at `entries` in w.bin (`values` float32s)."""
    data = np.arange(values, dtype=np.float32)
    c = numpy_helper.from_array(data[:2], "c")
    c.ClearField("raw_data")
    c.data_location = TP.EXTERNAL
    for k, v in entries:
        c.external_data.add(key=k, value=v)
    (tmp_path / "w.bin").write_bytes(data.tobytes())
    onnx.save(_add_model(c), tmp_path / "m.onnx")
    return run_cli(capsys, "optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-q")


@pytest.mark.parametrize("key, value", [("offset", " 4"), ("offset", "4 "), ("length", " 8"), ("offset", "+4"),
                                        ("offset", "0x4"), ("offset", "\u0664"), ("offset", ""),
                                        ("length", "")])
def test_external_offsets_and_lengths_are_decimal_digits(capsys, tmp_path, key, value):
    # Python's int() took " 4" where onnxruntime refuses it, and "" was read as absent:
    # eqsat read weights no runtime reads
    entries = {"location": "w.bin", "offset": "4", "length": "8"}
    entries[key] = value
    rc, _, err = _optimize_external(capsys, tmp_path, list(entries.items()), values=4)
    assert rc == 2 and f"tensor 'c': external data {key}" in one_error(err), err
    _only(tmp_path, "m.onnx", "w.bin")


@pytest.mark.parametrize("extra, says", [(("color", "blue"), "external data key 'color' is not one of"),
                                         (("basepath", "."), "external data key 'basepath' is not one of"),
                                         (("location", "w.bin"), "external data key 'location' is given twice"),
                                         (("offset", "0"), "external data key 'offset' is given twice")])
def test_external_data_keys_are_the_ones_onnxruntime_reads_once_each(capsys, tmp_path, extra, says):
    # eqsat read the weights and wrote a model where onnxruntime refuses the input ("model
    # format error") (found by the fuzzer)
    rc, _, err = _optimize_external(capsys, tmp_path, [("location", "w.bin"), ("offset", "0"), ("length", "8"), extra])
    assert rc == 2 and f"tensor 'c': {says}" in one_error(err), err
    _only(tmp_path, "m.onnx", "w.bin")


def test_a_checksum_is_an_accepted_key(capsys, tmp_path):
    rc, _, err = _optimize_external(capsys, tmp_path, [("location", "w.bin"), ("length", "8"), ("checksum", "0")])
    assert rc == 0, err


def _split_model(outputs: int, num_outputs: int, in_branch: bool = False) -> onnx.ModelProto:
    """Split<num_outputs>(x[1, 4]) into `outputs` values, in the main graph or in an If's branch."""
    names = [f"p{i}" for i in range(outputs)]
    split = h.make_node("Split", ["x"], names, axis=1, num_outputs=num_outputs)
    last = h.make_tensor_value_info(names[-1], TP.FLOAT, [1, 1])
    if in_branch:
        branch = h.make_graph([split], "b", [], [last])
        other = h.make_graph([h.make_node("Identity", ["x"], [names[-1]])], "o", [],
                             [h.make_tensor_value_info(names[-1], TP.FLOAT, [None, None])])
        nodes = [h.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)]
        inputs = [h.make_tensor_value_info("x", TP.FLOAT, [1, 4]), h.make_tensor_value_info("c", TP.BOOL, [])]
        out = h.make_tensor_value_info("y", TP.FLOAT, [None, None])
    else:
        nodes, out = [split], last
        inputs = [h.make_tensor_value_info("x", TP.FLOAT, [1, 4])]
    m = h.make_model(h.make_graph(nodes, "g", inputs, [out]), opset_imports=[h.make_opsetid("", 20)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("in_branch", [False, True])
@pytest.mark.parametrize("command", ["optimize", "plan", "show"])
def test_a_split_whose_outputs_are_not_num_outputs_is_refused(tmp_path, command, in_branch):
    # onnx's own shape inference aborts on it (an assertion in its C++ code, SIGABRT): eqsat
    # died by signal 6 with no message (found by the fuzz campaign)
    m = _split_model(4, 3, in_branch)
    onnx.checker.check_model(m)  # the checker does not see it
    onnx.save(m, tmp_path / "m.onnx")
    args = {"optimize": ["optimize", "m.onnx", "-o", "o.onnx", "-q"], "plan": ["plan", "m.onnx", "-q"],
            "show": ["show", "m.onnx"]}[command]
    p = subprocess.run([sys.executable, "-m", "eqsat", *args], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2, p.stderr
    graph = "'b'" if in_branch else "'g'"
    assert f"node 0 (Split) of graph {graph}: 4 outputs where its num_outputs is 3" in one_error(p.stderr), p.stderr
    _only(tmp_path, "m.onnx")


def test_a_split_with_as_many_outputs_as_num_outputs_is_read(capsys, tmp_path):
    onnx.save(_split_model(3, 3), tmp_path / "m.onnx")
    rc, _, err = run_cli(capsys, "optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx", "-q")
    assert rc == 0, err
