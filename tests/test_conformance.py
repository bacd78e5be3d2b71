"""`eqsat conformance`: the onnx wheel's test cases through the default optimization,
compared with the expected outputs each case ships.

The full run (about 2,000 cases, a few minutes) is `eqsat conformance`; here a bounded
sample, the classification of each kind of case, a deliberately broken optimization, and
the cases the full run once failed (bugs since fixed)."""

from __future__ import annotations

import argparse
import json
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from eqsat.cli import conformance as conformance_cmd
from eqsat.core.pipeline import Options, optimize
from eqsat.verification.conformance import (
    FAILED,
    ORT_CANNOT_RUN,
    ORT_DIFFERS,
    PASSED,
    SKIPPED,
    STATUSES,
    Case,
    all_cases,
    check_expected,
)

from .conftest import assert_same_outputs, assert_verified
from .test_cli import error_line, run_cli

SUMMARY = re.compile(r"^pass rate (\d+\.\d\d)%: (\d+) of (\d+) cases that onnxruntime runs correctly pass after "
                     r"optimization; (\d+) failed$")


def _summary(out: str) -> tuple[float, int, int, int]:
    lines = [ln for ln in out.splitlines() if ln.startswith("pass rate ")]
    assert len(lines) == 1, out
    m = SUMMARY.match(lines[0])
    assert m, lines[0]
    return float(m[1]), int(m[2]), int(m[3]), int(m[4])


def test_sample_passes_and_is_reported(capsys, tmp_path):
    js = tmp_path / "c.json"
    rc, out, err = run_cli(capsys, "conformance", "--sample", "25", "--json", js)
    assert rc == 0, out
    rate, passed, counted, failed = _summary(out)
    assert failed == 0 and passed == counted and rate == 100.0 and counted >= 10
    assert "25 of " in err and "[25/25]" in err  # progress on stderr
    data = json.loads(js.read_text())
    assert data["summary"]["cases"] == 25 == len(data["cases"])
    assert sum(data["summary"]["counts"].values()) == 25
    assert {c["status"] for c in data["cases"]} <= set(STATUSES)
    assert data["summary"]["pass_rate"] == 1.0
    # the same sample every time
    rc, out2, _ = run_cli(capsys, "conformance", "--sample", "25", "-q", "--json", tmp_path / "d.json")
    assert [c["name"] for c in json.loads((tmp_path / "d.json").read_text())["cases"]] == \
        [c["name"] for c in data["cases"]]


def test_only_selects_by_pattern_or_text(capsys):
    names = ["node/test_relu", "node/test_relu_expanded", "simple/test_x", "node/test_abs"]
    assert conformance_cmd.select(names, ["node/test_relu*"], None) == [0, 1]
    assert conformance_cmd.select(names, ["simple"], None) == [2]
    assert conformance_cmd.select(names, ["abs", "simple"], None) == [2, 3]
    assert conformance_cmd.select(names, [], 2) == conformance_cmd.select(names, [], 2)
    rc, _, err = run_cli(capsys, "conformance", "--only", "no-such-case-anywhere")
    assert rc == 2
    assert error_line(err) == "eqsat: error: no test case matches --only no-such-case-anywhere"


def _negate_relu(model: onnx.ModelProto) -> onnx.ModelProto:
    """A broken 'optimization': every Relu becomes a Neg."""
    out = optimize(model, Options()).model
    for n in out.graph.node:
        if n.op_type == "Relu":
            n.op_type = "Neg"
    return out


def test_a_broken_optimization_is_reported_as_a_failure(capsys, monkeypatch):
    monkeypatch.setattr(conformance_cmd, "default_optimize", _negate_relu)
    rc, out, _ = run_cli(capsys, "conformance", "--only", "node/test_rel?", "--only", "node/test_ab?", "-q")
    assert rc == 1
    assert _summary(out) == (50.0, 1, 2, 1)
    lines = out.splitlines()
    assert lines[0] == "FAILED (1):"
    assert lines[1].startswith("  node/test_relu: output 'y': ")
    assert "values differ" in lines[1] and "the original under onnxruntime is within tolerance" in lines[1]


def _relu_case(expected_shift: float = 0.0, domain: str = "", with_expected: bool = True) -> Case:
    node = h.make_node("Relu" if not domain else "Mystery", ["x"], ["y"], domain=domain)
    g = h.make_graph([node, h.make_node("Identity", ["y"], ["z"])], "g",
                     [h.make_tensor_value_info("x", TP.FLOAT, [4])], [h.make_tensor_value_info("z", TP.FLOAT, [4])])
    imports = [h.make_opsetid("", 18)] + ([h.make_opsetid(domain, 1)] if domain else [])
    model = h.make_model(g, opset_imports=imports)
    x = np.array([-1.0, 0.5, 2.0, -3.0], np.float32)
    feeds, expected = {"x": x}, [np.maximum(x, 0) + np.float32(expected_shift)]
    return Case("mine/relu", lambda: model, lambda m: [feeds],
                (lambda m: [(feeds, expected)]) if with_expected else None)


def test_each_kind_of_case_is_classified():
    ok = check_expected(_relu_case(), lambda m: optimize(m, Options()).model)
    assert (ok.status, ok.basis) == (PASSED, "expected")
    wrong = check_expected(_relu_case(), _negate_relu)
    assert wrong.status == FAILED and wrong.reason.startswith("output 'z': ")
    cannot = check_expected(_relu_case(domain="my.ops"), lambda m: m)
    assert cannot.status == ORT_CANNOT_RUN and "Mystery" in cannot.reason
    differs = check_expected(_relu_case(expected_shift=1.0), lambda m: m)
    assert differs.status == ORT_DIFFERS and differs.reason.startswith("original under onnxruntime: output 'z': ")
    original = check_expected(_relu_case(with_expected=False), _negate_relu)
    assert (original.status, original.basis) == (FAILED, "original")

    def crash(m):
        raise RuntimeError("boom")

    crashed = check_expected(_relu_case(), crash)
    assert (crashed.status, crashed.reason) == (FAILED, "optimize raised RuntimeError: boom")


def test_random_ops_are_skipped():
    node = h.make_node("RandomUniformLike", ["x"], ["y"])
    g = h.make_graph([node], "g", [h.make_tensor_value_info("x", TP.FLOAT, [4])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [4])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    v = check_expected(Case("mine/rand", lambda: m, lambda _m: [{"x": np.zeros(4, np.float32)}]), lambda x: x)
    assert v.status == SKIPPED and v.reason == "random op RandomUniformLike: outputs differ run to run"


def test_case_sources_ship_expected_outputs():
    cases = {c.name: c for c in all_cases()}
    assert len(cases) >= 2000
    for name in ("node/test_relu", "simple/test_sequence_model1", "pytorch-operator/test_operator_exp",
                 "light/light_resnet50"):
        case = cases[name]
        model = case.load()
        pairs = case.expected(model)
        assert pairs and len(pairs[0][1]) == len(model.graph.output), name


# ---- bugs the full run found, fixed since


@pytest.mark.parametrize("name", ["simple/test_sequence_model1", "node/test_sequence_map_identity_1_sequence_expanded",
                                  "node/test_rotary_embedding_interleaved_expanded",
                                  "node/test_rotary_embedding_no_position_ids_interleaved_expanded"])
def test_cases_the_full_run_once_failed(name):
    case = next(c for c in all_cases() if c.name == name)
    v = check_expected(case, conformance_cmd.default_optimize)
    assert v.status == PASSED, v.reason


def test_an_empty_sequence_is_not_folded_into_a_tensor():
    """The folding oracle turned SequenceEmpty's value (an empty list) into a double[0]
    initializer, which onnxruntime then refused as SequenceInsert's input."""
    nodes = [h.make_node("SequenceEmpty", [], ["s0"], dtype=TP.FLOAT),
             h.make_node("SequenceInsert", ["s0", "x"], ["s1"]),
             h.make_node("SequenceAt", ["s1", "zero"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [2])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [2])], [h.make_tensor("zero", TP.INT64, [], [0])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    res = optimize(m, Options())
    assert "SequenceEmpty" in [n.op_type for n in res.model.graph.node]
    assert_same_outputs(m, res.model)
    assert_verified(m, res)


def test_split_with_computed_sizes_keeps_its_real_shapes():
    """onnxruntime's symbolic shape inference guesses an equal split when the sizes are
    computed at run time: Split(x[2, 8], [8, 0]) gave two halves of 4, and a Reshape to
    Shape(first part) was folded to [2, 4] (found by node/test_rotary_embedding_interleaved_expanded)."""
    nodes = [h.make_node("Shape", ["x"], ["d"], start=1, end=2), h.make_node("Identity", ["d"], ["e"]),
             h.make_node("Sub", ["d", "e"], ["zero"]), h.make_node("Concat", ["e", "zero"], ["sizes"], axis=0),
             h.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1),
             h.make_node("Relu", ["x"], ["r"]), h.make_node("Shape", ["a"], ["sa"]),
             h.make_node("Reshape", ["r", "sa"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TP.FLOAT, [2, 8])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [2, 8]), h.make_tensor_value_info("b", TP.FLOAT, [2, 0])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    res = optimize(m, Options())
    assert_same_outputs(m, res.model)
    assert_verified(m, res)


def test_run_conformance_counts(monkeypatch):
    args = argparse.Namespace(only=[], sample=None, rtol=None, atol=None, quiet=True)
    verdicts, summary = conformance_cmd.run_conformance(args, _negate_relu, [_relu_case(), _relu_case(domain="my.o")])
    assert [v.status for v in verdicts] == [FAILED, ORT_CANNOT_RUN]
    assert summary["counts"][FAILED] == 1 and summary["counts"][ORT_CANNOT_RUN] == 1 and summary["pass_rate"] == 0.0
