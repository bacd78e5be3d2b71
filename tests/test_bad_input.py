"""Bad and unusual input through `eqsat optimize`: each case gives its exact message and exit
code, never a traceback, and leaves no output file behind on failure.

Covered elsewhere, not repeated here (tests/test_cli.py): missing file, not an ONNX file,
truncated file, a model the onnx checker rejects, an unbound variable in a rule file,
the node/iteration/time limits on a blow-up rule set, refusing to overwrite the input
(with the output, a side file or the output's weights),
verification failure and verification not possible; tests/test_large_model.py: a model
over 2 GiB with external data.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import onnx.reference
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from eqsat.cli.main import main
from eqsat.errors import EqsatError
from eqsat.io import modelio

from .conftest import assert_same_outputs
from .test_cli import COMMUTE, _sum_chain, error_line, run_cli

NEWEST = onnx.defs.onnx_opset_version()


def _relu_model(opset: int = 18, domain: str = "") -> onnx.ModelProto:
    x = h.make_tensor_value_info("x", TP.FLOAT, [2, 3])
    y = h.make_tensor_value_info("y", TP.FLOAT, [2, 3])
    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Identity", ["a"], ["y"])]
    imports = [h.make_opsetid("", opset)] if domain == "" else [h.make_opsetid("", 18), h.make_opsetid(domain, opset)]
    m = h.make_model(h.make_graph(nodes, "g", [x], [y]), opset_imports=imports)
    m.ir_version = 8
    return m


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def _only_input_left(folder: Path, *keep: str) -> None:
    """Nothing but the named files in `folder`: no output, no temporary file or folder."""
    assert sorted(p.name for p in folder.iterdir()) == sorted(keep)


# ---- opsets


def test_opset_older_than_supported(capsys, tmp_path):
    src = _save(_relu_model(opset=0), tmp_path / "m.onnx")
    rc, _, err = run_cli(capsys, "optimize", src, "-o", tmp_path / "o.onnx")
    assert rc == 2
    assert error_line(err) == (
        f"eqsat: error: {src}: opset 0 of the default ONNX domain (ai.onnx) is older than supported "
        f"(1 to {NEWEST}); re-export the model with an opset from 1 to {NEWEST}")
    _only_input_left(tmp_path, "m.onnx")


@pytest.mark.parametrize("domain", ["", "ai.onnx", "ai.onnx.ml"])
def test_opset_newer_than_supported(capsys, tmp_path, domain):
    lo, hi = modelio.supported_opsets()["" if domain == "ai.onnx" else domain]
    m = _relu_model(opset=hi + 1, domain=domain)
    if domain == "ai.onnx":  # the default domain spelled out
        m.opset_import[0].domain = "ai.onnx"
    src = _save(m, tmp_path / "m.onnx")
    rc, _, err = run_cli(capsys, "optimize", src, "-o", tmp_path / "o.onnx")
    assert rc == 2
    label = "domain ai.onnx.ml" if domain == "ai.onnx.ml" else "the default ONNX domain (ai.onnx)"
    assert error_line(err) == (
        f"eqsat: error: {src}: opset {hi + 1} of {label} is newer than supported ({lo} to {hi}, the newest that "
        f"onnx {onnx.__version__} knows); upgrade onnx or re-export the model at opset {hi} or older")
    _only_input_left(tmp_path, "m.onnx")


@pytest.mark.parametrize("opset", [1, 7, NEWEST])
def test_opsets_in_the_supported_range_are_optimized(capsys, tmp_path, opset):
    src = _save(_relu_model(opset=opset), tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "-q")
    if opset == 1:  # onnxruntime has no kernel for Relu-1: nothing checks the model, so it is refused
        assert rc == 1 and not out.exists()
        assert error_line(err).startswith("eqsat: error: verification not possible, nothing written: onnxruntime "
                                          "cannot run the original: "), err
        rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "-q", "--allow-unverified")
    assert rc == 0, err
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == ["Relu"]  # Identity removed


# ---- ops of unknown domains


def _custom_op_model() -> onnx.ModelProto:
    """Identity -> my.ops.Mystery (attributes of several kinds) -> Relu -> Identity."""
    mystery = h.make_node("Mystery", ["i"], ["z"], domain="my.ops", alpha=0.5, mode="fast", sizes=[1, 2, 3],
                          table=h.make_tensor("table", TP.FLOAT, [2], [1.0, 2.0]))
    nodes = [h.make_node("Identity", ["x"], ["i"]), mystery, h.make_node("Relu", ["z"], ["r"]),
             h.make_node("Identity", ["r"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [2, 3])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18), h.make_opsetid("my.ops", 3)])


def test_unknown_domain_op_is_carried_unchanged_and_verified_around(capsys, tmp_path):
    # onnxruntime cannot run my.ops.Mystery: verification feeds it the same stand-in values
    # in both models, checks what is computed around it, and says what it did not verify
    m = _custom_op_model()
    src, out, rep = _save(m, tmp_path / "m.onnx"), tmp_path / "o.onnx", tmp_path / "r.json"
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--report", rep)
    assert rc == 0, err
    o = onnx.load(str(out))
    assert [(n.domain, n.op_type) for n in o.graph.node] == [("my.ops", "Mystery"), ("", "Relu")]
    # every attribute exactly as it was, the name inside the tensor attribute included
    assert [a.name for a in o.graph.node[0].attribute] == ["alpha", "mode", "sizes", "table"]
    assert o.graph.node[0].attribute == m.graph.node[1].attribute
    assert o.graph.node[0].attribute[3].t.name == "table"
    assert {(i.domain, i.version) for i in o.opset_import} >= {("my.ops", 3)}
    assert [i.name for i in o.graph.input] == ["x"] and [i.name for i in o.graph.output] == ["y"]
    warn = [ln for ln in err.splitlines() if ln.startswith("eqsat: warning: not verified: ")]
    assert warn and "my.ops.Mystery x1" in warn[0]
    r = json.loads(rep.read_text())
    assert r["verification"]["status"] == "passed" and "my.ops.Mystery x1" in r["verification"]["not_verified"]
    assert r["ops_after"] == {"my.ops.Mystery": 1, "Relu": 1}


def test_unknown_domain_op_defined_by_a_model_function_is_verified(capsys, tmp_path):
    """A custom-domain op that the model defines as a function: onnxruntime runs it, so the
    optimized model is verified against the original, and the op stays as it was."""
    f = h.make_function("my.funcs", "AddRelu", ["a", "b"], ["c"],
                        [h.make_node("Add", ["a", "b"], ["s"]), h.make_node("Relu", ["s"], ["c"])],
                        opset_imports=[h.make_opsetid("", 18)])
    nodes = [h.make_node("Identity", ["x"], ["i"]), h.make_node("AddRelu", ["i", "x"], ["r"], domain="my.funcs"),
             h.make_node("Identity", ["r"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [3, 4])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [3, 4])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18), h.make_opsetid("my.funcs", 1)], functions=[f])
    src, out, rep = _save(m, tmp_path / "m.onnx"), tmp_path / "o.onnx", tmp_path / "r.json"
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--report", rep)
    assert rc == 0, err
    o = onnx.load(str(out))
    assert [(n.domain, n.op_type) for n in o.graph.node] == [("my.funcs", "AddRelu")]
    assert [fn.name for fn in o.functions] == ["AddRelu"]
    assert json.loads(rep.read_text())["verification"]["status"] == "passed"
    assert_same_outputs(m, o)


# ---- symbolic and unknown dimensions


def _dims(vi: onnx.ValueInfoProto) -> list:
    return [d.dim_param if d.HasField("dim_param") else d.dim_value if d.HasField("dim_value") else None
            for d in vi.type.tensor_type.shape.dim]


def test_symbolic_and_unknown_dimensions_stay_symbolic(capsys, tmp_path):
    """Input [batch, ?, 4] (a named and an unnamed dimension): the optimized model keeps
    both as they were, in its inputs and outputs, and runs for any size."""
    w = h.make_tensor("w", TP.FLOAT, [4, 5], np.random.default_rng(0).standard_normal(20).astype(np.float32))
    b = h.make_tensor("b", TP.FLOAT, [5], np.ones(5, np.float32))
    nodes = [h.make_node("MatMul", ["x", "w"], ["mm"]), h.make_node("Add", ["mm", "b"], ["s"]),
             h.make_node("Identity", ["s"], ["t"]), h.make_node("Relu", ["t"], ["y"])]
    x = h.make_tensor_value_info("x", TP.FLOAT, ["batch", None, 4])
    y = h.make_tensor_value_info("y", TP.FLOAT, ["batch", None, 5])
    m = h.make_model(h.make_graph(nodes, "g", [x], [y], [w, b]), opset_imports=[h.make_opsetid("", 18)])
    src, out, rep = _save(m, tmp_path / "m.onnx"), tmp_path / "o.onnx", tmp_path / "r.json"
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--report", rep, "--dim", "batch=3")
    assert rc == 0, err
    o = onnx.load(str(out))
    assert _dims(o.graph.input[0]) == ["batch", None, 4]
    assert _dims(o.graph.output[0]) == ["batch", None, 5]
    assert len(o.graph.node) < len(m.graph.node)
    assert json.loads(rep.read_text())["verification"]["status"] == "passed"
    rng = np.random.default_rng(1)
    for shape in [(1, 1, 4), (3, 7, 4)]:
        assert_same_outputs(m, o, {"x": rng.standard_normal(shape).astype(np.float32)}, rtol=1e-5, atol=1e-6)


# ---- control flow


def _control_flow_model() -> onnx.ModelProto:
    """If on a run-time condition, a Loop and a Scan; each body has an Identity to remove."""
    f, b, i64 = TP.FLOAT, TP.BOOL, TP.INT64
    then_g = h.make_graph([h.make_node("Identity", ["x"], ["ti"]), h.make_node("Relu", ["ti"], ["t_out"])],
                          "then", [], [h.make_tensor_value_info("t_out", f, [2, 3])])
    else_g = h.make_graph([h.make_node("Neg", ["x"], ["e_out"])], "else", [],
                          [h.make_tensor_value_info("e_out", f, [2, 3])])
    loop_body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]), h.make_node("Add", ["acc_in", "x"], ["a1"]),
         h.make_node("Identity", ["a1"], ["acc_out"])],
        "loop", [h.make_tensor_value_info("iter", i64, []), h.make_tensor_value_info("cond_in", b, []),
                 h.make_tensor_value_info("acc_in", f, [2, 3])],
        [h.make_tensor_value_info("cond_out", b, []), h.make_tensor_value_info("acc_out", f, [2, 3])])
    scan_body = h.make_graph(
        [h.make_node("Add", ["s_in", "row"], ["s1"]), h.make_node("Identity", ["s1"], ["s_out"]),
         h.make_node("Identity", ["s1"], ["row_out"])],
        "scan", [h.make_tensor_value_info("s_in", f, [3]), h.make_tensor_value_info("row", f, [3])],
        [h.make_tensor_value_info("s_out", f, [3]), h.make_tensor_value_info("row_out", f, [3])])
    trip = h.make_tensor("trip", i64, [], [3])
    cond_true = h.make_tensor("cond_true", b, [], [True])
    zeros = h.make_tensor("zeros", f, [3], [0.0, 0.0, 0.0])
    nodes = [
        h.make_node("If", ["c"], ["if_out"], then_branch=then_g, else_branch=else_g),
        h.make_node("Loop", ["trip", "cond_true", "x"], ["loop_out"], body=loop_body),
        h.make_node("Scan", ["zeros", "x"], ["scan_sum", "scan_rows"], body=scan_body, num_scan_inputs=1),
        h.make_node("Identity", ["if_out"], ["y_if"]),
    ]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("c", b, []), h.make_tensor_value_info("x", f, [2, 3])],
                     [h.make_tensor_value_info("y_if", f, [2, 3]), h.make_tensor_value_info("loop_out", f, [2, 3]),
                      h.make_tensor_value_info("scan_sum", f, [3]), h.make_tensor_value_info("scan_rows", f, [2, 3])],
                     [trip, cond_true, zeros])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    onnx.checker.check_model(m)
    return m


def test_if_loop_scan_subgraphs_are_carried_through(capsys, tmp_path):
    m = _control_flow_model()
    src, out, rep = _save(m, tmp_path / "m.onnx"), tmp_path / "o.onnx", tmp_path / "r.json"
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--report", rep)
    assert rc == 0, err
    o = onnx.load(str(out))
    assert sorted(n.op_type for n in o.graph.node) == ["If", "Loop", "Scan"]  # the outer Identity is gone
    assert json.loads(rep.read_text())["verification"]["status"] == "passed"
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    for c in (True, False):
        assert_same_outputs(m, o, {"c": np.array(c), "x": x})


def test_if_on_a_constant_condition_is_replaced_by_its_branch(capsys, tmp_path):
    m = _control_flow_model()
    cond = h.make_tensor("c", TP.BOOL, [], [False])
    m.graph.initializer.append(cond)
    del m.graph.input[0]  # c: now a constant, not an input
    src, out = _save(m, tmp_path / "m.onnx"), tmp_path / "o.onnx"
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "-q")
    assert rc == 0, err
    o = onnx.load(str(out))
    assert "If" not in [n.op_type for n in o.graph.node] and "Neg" in [n.op_type for n in o.graph.node]
    assert_same_outputs(m, o)


# ---- rule files (an unbound variable: tests/test_cli.py::test_rule_file_error_is_file_line_col)


@pytest.mark.parametrize("text, message", [
    ("(ruleset mine)\n(rewrite (Relu x) x :ruleset mine\n",
     "mine.egg:2:1: unclosed '(': this parenthesis is never closed"),
    ("(ruleset mine)\n(rewrite (Relu x) x :ruleset mine))\n",
     "mine.egg:2:35: syntax error: unexpected `)`"),
    ("(ruleset mine)\n(rewrite (Reluu x) x :ruleset mine)\n",
     "mine.egg:2:10: unknown constructor or function Reluu; did you mean Relu?"),
    ("(ruleset mine)\n(rewrite (Relu x) (Add x 1) :ruleset mine)\n",
     "mine.egg:2:26: type error: 1 has type i64 but must have type Op"),
], ids=["unclosed-paren", "syntax-error", "unbound-name", "type-error"])
def test_rule_file_errors_are_file_line_col(capsys, tmp_path, monkeypatch, text, message):
    monkeypatch.chdir(tmp_path)
    src = _save(_relu_model(), tmp_path / "m.onnx")
    (tmp_path / "mine.egg").write_text(text)
    rc, _, err = run_cli(capsys, "optimize", src, "-o", "o.onnx", "--rules", "mine.egg")
    assert rc == 2
    assert error_line(err) == f"eqsat: error: {message}"
    _only_input_left(tmp_path, "m.onnx", "mine.egg")


def test_blowup_reports_the_node_limit_on_stderr(capsys, tmp_path):
    """The report's stop reason is tested in tests/test_cli.py; here the progress line."""
    src, out, rules = _save(_sum_chain(8), tmp_path / "m.onnx"), tmp_path / "o.onnx", tmp_path / "ac.egg"
    rules.write_text(COMMUTE)
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--rules", rules, "--node-limit", "2000",
                         "--extractor", "dag-greedy")
    assert rc == 0, err
    assert "saturation stopped: node-limit after " in err
    assert out.is_file()


# ---- egglog panics (pyo3 PanicException derives from BaseException)

PANIC_RULE = """(ruleset boom)
(rule ((= y (Relu x))) ((union y (Relu (Relu x))) (let z (log2 0))) :ruleset boom :name "boom")
"""


def test_egglog_panic_during_saturation_is_a_clear_error(capsys, tmp_path):
    src, out, rules = _save(_relu_model(), tmp_path / "m.onnx"), tmp_path / "o.onnx", tmp_path / "boom.egg"
    rules.write_text(PANIC_RULE)
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--rules", rules)
    assert rc == 1
    # egglog 13 panics with Rust's message, egglog 14 reports the failed primitive call
    assert error_line(err) in (
        f"eqsat: error: egglog failed while running the rules: {detail}; check the --rules files (nothing written)"
        for detail in ("argument of integer logarithm must be positive", "(log2 0): call of primitive log2 failed"))
    _only_input_left(tmp_path, "m.onnx", "boom.egg")
    # the e-graph egglog panicked on is not reused: the next optimization works
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "-q")
    assert rc == 0, err


def test_egglog_panic_while_loading_a_rule_file_is_a_clear_error(capfd, tmp_path, monkeypatch):
    # egglog's panic hook printed its message (and a backtrace) on stderr before eqsat's line
    monkeypatch.setenv("RUST_BACKTRACE", "1")
    src, out, rules = _save(_relu_model(), tmp_path / "m.onnx"), tmp_path / "o.onnx", tmp_path / "boom.egg"
    rules.write_text("(relation boom (i64))\n(boom (log2 0))\n")  # a fact: a rule file may hold one
    rc = main(["optimize", str(src), "-o", str(out), "--rules", str(rules), "-q"])
    err = capfd.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert error_line(err) in (
        f"eqsat: error: {rules}: egglog failed while loading this file: argument of integer logarithm must be positive",
        f"eqsat: error: {rules}:2:7: (log2 0): call of primitive log2 failed")  # egglog 13, egglog 14
    _only_input_left(tmp_path, "m.onnx", "boom.egg")


# ---- writing the output


def test_output_is_written_to_a_temporary_file_then_renamed(capsys, tmp_path, monkeypatch):
    src, out = _save(_relu_model(), tmp_path / "m.onnx"), tmp_path / "o.onnx"
    renames = []
    real_replace = os.replace

    def spy(a, b):
        assert Path(b).exists() is False or Path(b) == out
        renames.append((Path(a), Path(b), Path(a).is_file()))
        real_replace(a, b)

    monkeypatch.setattr(modelio.os, "replace", spy)
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "-q")
    assert rc == 0, err
    assert len(renames) == 1
    tmp, dst, was_file = renames[0]
    assert dst == out and was_file and tmp != out
    assert tmp.parent.parent == tmp_path and tmp.parent.name.startswith(".o.onnx.")  # same folder: a rename
    _only_input_left(tmp_path, "m.onnx", "o.onnx")


def test_a_failed_write_leaves_nothing_and_keeps_an_existing_output(capsys, tmp_path, monkeypatch):
    src, out = _save(_relu_model(), tmp_path / "m.onnx"), tmp_path / "o.onnx"
    out.write_bytes(b"previous output")

    def broken_check(path, *a, **k):
        raise onnx.checker.ValidationError("simulated: the written file is not valid")

    monkeypatch.setattr(modelio.onnx.checker, "check_model", broken_check)
    monkeypatch.setattr(modelio, "check_model", lambda *a, **k: None)  # the input check is not under test
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "-q")
    assert rc == 1
    assert error_line(err) == ("eqsat: error: the optimized model fails the onnx checker: "
                               "simulated: the written file is not valid")
    assert out.read_bytes() == b"previous output"
    _only_input_left(tmp_path, "m.onnx", "o.onnx")


def test_the_checker_reads_the_bytes_on_disk(capsys, tmp_path, monkeypatch):
    # The input is checked from the bytes just read and the output from the bytes written,
    # not from models serialized again: what passes the checker is what is in the files.
    src, out = _save(_relu_model(), tmp_path / "m.onnx"), tmp_path / "o.onnx"
    checked, real = [], onnx.checker.check_model

    def spy(model, *a, **k):
        checked.append(model)
        return real(model, *a, **k)

    monkeypatch.setattr(modelio.onnx.checker, "check_model", spy)
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "-q", "--no-verify")
    assert rc == 0, err
    assert [type(c) for c in checked] == [bytes, bytes]
    assert checked == [src.read_bytes(), out.read_bytes()]


def test_a_constant_with_external_data_is_checked_as_bound(capsys, tmp_path):
    # Only a node holds external data: the file's bytes name c.bin, which the checker
    # cannot check from bytes, so the model is checked once its data is read in.
    c = np.arange(6, dtype=np.float32).reshape(2, 3)
    (tmp_path / "c.bin").write_bytes(c.tobytes())
    t = onnx.numpy_helper.from_array(c, "c")
    t.ClearField("raw_data")
    t.data_location = TP.EXTERNAL
    for k, v in (("location", "c.bin"), ("length", str(c.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    m = _relu_model()
    m.graph.node.insert(0, h.make_node("Constant", [], ["k"], value=t))
    m.graph.node[-1].CopyFrom(h.make_node("Add", ["a", "k"], ["y"]))
    src, out = _save(m, tmp_path / "m.onnx"), tmp_path / "o.onnx"
    assert modelio.read_model(src, check=True)[1]
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "-q")
    assert rc == 0, err
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    got = onnx.reference.ReferenceEvaluator(str(out)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, np.maximum(x, 0) + c, rtol=1e-6)


def test_a_model_over_two_gib_outside_its_initializers_is_a_clear_error():
    class Huge:
        def SerializeToString(self):
            raise ValueError("Message onnx.ModelProto exceeds maximum protobuf size of 2GB: 2147483700")

    with pytest.raises(modelio.OptimizeError, match=r"cannot be written as one protobuf \(Message onnx.ModelProto "
                                                  r"exceeds .*\): .*move large constants to initializers"):
        modelio._serialize(Huge())


def test_verification_failure_keeps_an_existing_output(capsys, tmp_path):
    src, out, rules = _save(_relu_model(), tmp_path / "m.onnx"), tmp_path / "o.onnx", tmp_path / "wrong.egg"
    out.write_bytes(b"previous output")
    rules.write_text('(ruleset wrong)\n(rewrite (Relu x) x :ruleset wrong :name "relu-is-identity")\n')
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--rules", rules)
    assert rc == 1 and error_line(err).startswith("eqsat: error: verification failed, nothing written: ")
    assert out.read_bytes() == b"previous output"
    _only_input_left(tmp_path, "m.onnx", "o.onnx", "wrong.egg")


def test_never_writes_over_the_input_through_a_symlink(capsys, tmp_path):
    src = _save(_relu_model(), tmp_path / "m.onnx")
    before = src.read_bytes()
    link = tmp_path / "link.onnx"
    link.symlink_to(src)
    rc, _, err = run_cli(capsys, "optimize", src, "-o", link)
    assert rc == 2
    assert error_line(err) == (f"eqsat: error: {link}: --output would overwrite the input {src}; "
                               "pass --in-place to allow it")
    assert src.read_bytes() == before and link.is_symlink()


@pytest.mark.parametrize("out", [["-o", "{m}"], []])  # without -o too: --in-place alone named m.opt.onnx
def test_in_place_replaces_the_input(capsys, tmp_path, out):
    src = _save(_relu_model(), tmp_path / "m.onnx")
    rc, _, err = run_cli(capsys, "optimize", src, *[a.format(m=src) for a in out], "--in-place", "-q")
    assert rc == 0, err
    assert [n.op_type for n in onnx.load(str(src)).graph.node] == ["Relu"]
    _only_input_left(tmp_path, "m.onnx")


def test_in_place_with_another_output_is_refused(capsys, tmp_path):
    # it wrote -o's file and left the input as it was, exit 0
    src = _save(_relu_model(), tmp_path / "m.onnx")
    rc, _, err = run_cli(capsys, "optimize", src, "--in-place", "-o", tmp_path / "c.onnx", "-q")
    assert rc == 2 and error_line(err) == (f"eqsat: error: --in-place replaces {src}, but -o names another file "
                                           f"({tmp_path / 'c.onnx'}): give one of them")
    _only_input_left(tmp_path, "m.onnx")


def test_default_output_never_overwrites_the_input(capsys, tmp_path):
    """Without -o the output is IN.opt.onnx beside the input; the input is untouched."""
    src = _save(_relu_model(), tmp_path / "m.onnx")
    before = src.read_bytes()
    rc, _, err = run_cli(capsys, "optimize", src, "-q")
    assert rc == 0, err
    assert src.read_bytes() == before and (tmp_path / "m.opt.onnx").is_file()


@pytest.mark.parametrize("flag", ["--report", "--plan", "--save-egraph"])
def test_a_side_file_never_overwrites_the_input(capsys, tmp_path, flag):
    # --save-egraph was written mid-run, so verification then could not read the original
    src = _save(_relu_model(), tmp_path / "m.onnx")
    before = src.read_bytes()
    rc, _, err = run_cli(capsys, "optimize", src, "-o", tmp_path / "o.onnx", flag, src)
    assert rc == 2
    assert error_line(err) == f"eqsat: error: {src}: {flag} would overwrite the input {src}; name another file"
    assert src.read_bytes() == before
    _only_input_left(tmp_path, "m.onnx")


@pytest.mark.parametrize("args", [["-o", "o.onnx", "--report", "o.onnx"], ["--report", "m.opt.onnx"],
                                  ["-o", "o.onnx", "--report", "r.json", "--save-egraph", "r.json"]])
def test_two_outputs_never_name_one_file(capsys, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    _save(_relu_model(), tmp_path / "m.onnx")
    rc, _, err = run_cli(capsys, "optimize", "m.onnx", *args)
    assert rc == 2
    assert "name the same file; give each its own" in error_line(err)
    _only_input_left(tmp_path, "m.onnx")


def _external_model(folder: Path, name: str, data: str) -> Path:
    w = onnx.numpy_helper.from_array(np.arange(256 * 128, dtype=np.float32).reshape(256, 128), "w")
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"])], "g",
                     [h.make_tensor_value_info("x", TP.FLOAT, [1, 256])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [1, 128])], [w])
    path = folder / name
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 18)]), str(path), save_as_external_data=True,
              location=data, size_threshold=0)
    return path


def test_the_outputs_weights_never_overwrite_the_inputs_data_file(capsys, tmp_path):
    # a.onnx keeps its weights in c.onnx.data, the file `-o c.onnx` writes its weights to
    src = _external_model(tmp_path, "a.onnx", "c.onnx.data")
    before = (tmp_path / "c.onnx.data").read_bytes()
    rc, _, err = run_cli(capsys, "optimize", src, "-o", tmp_path / "c.onnx")
    assert rc == 2
    assert error_line(err) == (f"eqsat: error: {tmp_path / 'c.onnx.data'}: the output's data file would overwrite "
                               f"{tmp_path / 'c.onnx.data'}, the input's data file; name another file")
    assert (tmp_path / "c.onnx.data").read_bytes() == before
    for args in (["-o", tmp_path / "b.onnx", "--report", tmp_path / "c.onnx.data"],
                 ["-o", tmp_path / "c.onnx.data"]):  # the output itself over the data file
        rc, _, err = run_cli(capsys, "optimize", src, *args)
        assert rc == 2, err
        assert error_line(err).endswith(f"would overwrite {tmp_path / 'c.onnx.data'}, the input's data file; "
                                        "name another file")
        assert (tmp_path / "c.onnx.data").read_bytes() == before
    _only_input_left(tmp_path, "a.onnx", "c.onnx.data")
    # in place, the model and its data file are replaced together
    original = onnx.load(str(src))  # weights read into memory
    rc, _, err = run_cli(capsys, "optimize", src, "-o", src, "--in-place", "-q")
    assert rc == 0, err
    assert_same_outputs(original, onnx.load(str(src)))


@pytest.mark.parametrize("command", [["plan", "{m}", "-o", "{m}"], ["show", "{m}", "--html", "{m}"],
                                     ["diff", "{m}", "{m}", "--html", "{m}"],
                                     ["rules", "check", "{m}", "--json", "{m}"]])
def test_other_commands_never_write_over_their_input(capsys, tmp_path, command):
    src = _save(_relu_model(), tmp_path / "m.onnx")  # (a rule file in `rules check`: refused before it is read)
    before = src.read_bytes()
    rc, _, err = run_cli(capsys, *[a.format(m=src) for a in command])
    assert rc == 2
    assert error_line(err).endswith(f"would overwrite the input {src}; name another file")
    assert src.read_bytes() == before


@pytest.mark.parametrize("command", [["plan", "{m}", "-o", "{d}"], ["show", "{m}", "--html", "{d}"],
                                     ["diff", "{m}", "{m}", "--html", "{d}"]])
def test_other_commands_never_write_over_their_inputs_data_file(capsys, tmp_path, command):
    src = _external_model(tmp_path, "a.onnx", "weights.bin")
    data = tmp_path / "weights.bin"
    before = data.read_bytes()
    rc, _, err = run_cli(capsys, *[a.format(m=src, d=data) for a in command])
    assert rc == 2
    assert error_line(err).endswith(f"would overwrite {data}, the input's data file; name another file")
    assert data.read_bytes() == before


def test_an_option_value_too_long_for_a_file_name_is_not_a_traceback(capsys, tmp_path):
    # every option's value is looked up as a possible input file; a 300-character name
    # made Path.is_file raise "File name too long"
    rules = tmp_path / "r.egg"
    rules.write_text('(ruleset r)\n(rewrite (Relu (Relu x)) (Relu x) :ruleset r :name "my-relu-relu")\n')
    rc, _, err = run_cli(capsys, "rules", "check", rules, "--rule", "a" * 300)
    assert rc == 2 and error_line(err).startswith("eqsat: error: no rule named")


def test_result_files_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    # --report, --save-egraph, --json and the choice files went through Path.write_text: an
    # interrupt mid-write left a partial file in place of the previous one
    from eqsat.io import atomic

    out = tmp_path / "r.json"
    out.write_text("previous")

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_text(out, "{}" * 1000)
    assert out.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    monkeypatch.undo()

    def refused(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(atomic.tempfile, "mkstemp", refused)  # a folder that refuses files: one line
    with pytest.raises(EqsatError, match=f"^{out}: cannot write it: Permission denied$"):
        atomic.write_text(out, "new")
    monkeypatch.undo()
    atomic.write_text(out, "new")
    assert out.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_results_are_written_as_a_plain_write_would(capsys, tmp_path):
    # through a symbolic link to its target (the rename replaced the link), with the umask's
    # mode for a new file and the old mode for a replaced one (the temporary file's 0600 stayed)
    src = _save(_relu_model(), tmp_path / "m.onnx")
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "o.onnx").symlink_to(real / "model.onnx")
    (tmp_path / "r.json").symlink_to(real / "report.json")
    (real / "report.json").write_text("{}")
    os.chmod(real / "report.json", 0o640)
    old = os.umask(0o022)
    try:
        rc, _, err = run_cli(capsys, "optimize", src, "-o", tmp_path / "o.onnx", "--report", tmp_path / "r.json",
                             "--save-egraph", tmp_path / "g.json", "-q")
    finally:
        os.umask(old)
    assert rc == 0, err
    assert (tmp_path / "o.onnx").is_symlink() and (tmp_path / "r.json").is_symlink()
    assert onnx.load(str(real / "model.onnx")).graph.node and json.loads((real / "report.json").read_text())
    assert sorted(p.name for p in real.iterdir()) == ["model.onnx", "report.json"]
    modes = {p.name: p.stat().st_mode & 0o777 for p in (real / "model.onnx", real / "report.json", tmp_path / "g.json")}
    assert modes == {"model.onnx": 0o644, "report.json": 0o640, "g.json": 0o644}


# ---- options checked before the model is read


@pytest.mark.parametrize("option, value, message", [
    ("--cost-model", "nope",
     "unknown cost model 'nope'; choose one of roofline, node-count, measured, file-costs, learned"),
    ("--extractor", "nope", "unknown extractor 'nope'; choose one of tree-greedy, dag-greedy, ilp, ilp-fixed-layouts"),
    ("--hardware", "nope", "no hardware profile 'nope' (known: cpu, cpu-avx2, h200, or a .json path)"),
])
def test_bad_option_fails_before_the_model_is_read(capsys, tmp_path, option, value, message):
    # the input is no model at all: the option's error comes first, as it would before a
    # large model's load of seconds
    src = tmp_path / "m.onnx"
    src.write_bytes(b"not a model")
    rc, _, err = run_cli(capsys, "optimize", src, option, value)
    assert rc == 2 and error_line(err) == f"eqsat: error: {message}"
    assert "loaded" not in err
    _only_input_left(tmp_path, "m.onnx")
