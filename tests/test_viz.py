"""`eqsat show` and `eqsat diff`: op histograms, node matching, and the drawings (SVG and a
self-contained HTML page)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest

from eqsat.cli.main import main
from eqsat.core.pipeline import Options, optimize
from eqsat.viz.diffing import match_nodes
from eqsat.viz.graph import Box, Drawing, layout, render_svg

from .test_explain import conv_bn_relu

pytestmark = pytest.mark.no_egglog  # calls no egglog (tests/conftest.py's guard)

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("viz")
    before = conv_bn_relu()
    after = optimize(before, Options()).model
    onnx.save(before, d / "before.onnx")
    onnx.save(after, d / "after.onnx")
    return d


def xml_of(page: str) -> ET.Element:
    assert page.startswith("<!DOCTYPE html>")
    return ET.fromstring(page.split("\n", 1)[1])  # raises on anything not well-formed


def nodes_in(root: ET.Element, state: str) -> list[str]:
    """Op labels of the drawn nodes with the given state."""
    out = []
    for g in root.iter(f"{SVG}g"):
        if g.get("class") == f"node {state}":
            out.append(g.find(f"{SVG}text").text)
    return out


def test_show_prints_the_histogram_and_writes_html_and_svg(pair, capsys):
    html, svg = pair / "show.html", pair / "show.svg"
    assert main(["show", str(pair / "before.onnx"), "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "5 nodes, 1 inputs, 1 outputs, 6 initializers" in out
    rows = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines()[1:] if ln and not ln.startswith("-")}
    assert rows["Conv"] == ["1"] and rows["BatchNormalization"] == ["1"] and rows["total"] == ["5"]
    root = xml_of(html.read_text())
    assert sorted(nodes_in(root, "same")) == ["BatchNormalization", "Conv", "Identity", "MaxPool", "Relu"]
    assert "http" not in html.read_text().replace('xmlns="http://www.w3.org/', "")  # no external resources
    assert main(["show", str(pair / "after.onnx"), "--svg", str(svg)]) == 0
    assert ET.parse(svg).getroot().tag == f"{SVG}svg"


def test_diff_counts_before_after_and_delta(pair, capsys):
    assert main(["diff", str(pair / "before.onnx"), str(pair / "after.onnx")]) == 0
    out = capsys.readouterr().out
    rows = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines() if ln and ln[0].isalpha() and "->" not in ln}
    assert rows["com.microsoft.FusedConv"] == ["0", "1", "+1"]
    for op in ("Conv", "BatchNormalization", "Relu", "Identity"):
        assert rows[op] == ["1", "0", "-1"]
    assert rows["MaxPool"] == ["1", "1", "0"]
    assert rows["total"] == ["5", "2", "-3"]
    # MaxPool keeps its output name; it reads the fused conv's output now that the Identity
    # went away: the same node, changed
    assert "nodes: 0 unchanged, 1 changed (other inputs or attributes), 4 removed, 1 added" in out
    # the conv's weight and bias folded with the BatchNormalization's four into two new ones
    assert "initializers: 0 unchanged, 0 changed (other values), 6 removed, 2 added" in out


def test_diff_html_highlights_added_and_removed_nodes(pair, capsys):
    html = pair / "diff.html"
    assert main(["diff", str(pair / "before.onnx"), str(pair / "after.onnx"), "--html", str(html)]) == 0
    root = xml_of(html.read_text())
    assert nodes_in(root, "added") == ["com.microsoft.FusedConv"]
    assert sorted(nodes_in(root, "removed")) == ["BatchNormalization", "Conv", "Identity", "Relu"]
    assert nodes_in(root, "changed") == ["MaxPool"] and nodes_in(root, "same") == []
    assert main(["diff", str(pair / "before.onnx"), str(pair / "before.onnx"), "--html", str(html)]) == 0
    root = xml_of(html.read_text())
    assert nodes_in(root, "added") == nodes_in(root, "removed") == []  # nothing changed, nothing drawn


def _v(name, dtype=onnx.TensorProto.FLOAT, shape=(4,)):
    return onnx.helper.make_tensor_value_info(name, dtype, list(shape))


def _model(nodes, inputs, outputs, inits=()):
    m = onnx.helper.make_model(onnx.helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                               opset_imports=[onnx.helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _diff_lines(capsys, tmp_path, a, b, *extra):
    onnx.save(a, tmp_path / "a.onnx")
    onnx.save(b, tmp_path / "b.onnx")
    assert main(["diff", str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), *extra]) == 0
    return [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("nodes:", "initializers:"))]


def test_diff_sees_a_rewired_input_an_attribute_a_subgraph_and_a_weight(capsys, tmp_path):
    # each of these was reported "unchanged": nodes matched by op and output names alone
    def rewired(i):
        h = onnx.helper
        return _model([h.make_node("Relu", ["x"], ["a"]), h.make_node("Exp", ["x"], ["b"]),
                       h.make_node("Add", ["a", i], ["y"])], [_v("x")], [_v("y")])

    assert _diff_lines(capsys, tmp_path, rewired("b"), rewired("x"))[0] == (
        "nodes: 2 unchanged, 1 changed (other inputs or attributes), 0 removed, 0 added")

    def branch(op):
        h = onnx.helper
        body = h.make_graph([h.make_node(op, ["x", "x"], ["r"], name="in-branch")], "b", [], [_v("r")])
        other = h.make_graph([h.make_node("Sub", ["x", "x"], ["r"])], "e", [], [_v("r")])
        return _model([h.make_node("If", ["c"], ["y"], then_branch=body, else_branch=other)],
                      [_v("c", onnx.TensorProto.BOOL, ()), _v("x")], [_v("y")])

    assert _diff_lines(capsys, tmp_path, branch("Add"), branch("Mul"))[0].startswith("nodes: 0 unchanged, 1 changed")
    renamed = branch("Add")
    renamed.graph.node[0].attribute[0].g.node[0].name = "another-name"  # names are not compared
    assert _diff_lines(capsys, tmp_path, branch("Add"), renamed)[0].startswith("nodes: 1 unchanged, 0 changed")

    def flat(axis, w):
        h = onnx.helper
        init = onnx.numpy_helper.from_array(np.full((2, 2), w, np.float32), "w")
        return _model([h.make_node("Flatten", ["x"], ["f"], axis=axis), h.make_node("MatMul", ["f", "w"], ["y"])],
                      [_v("x", shape=(2, 1, 2))], [_v("y", shape=(2, 2))], [init])

    lines = _diff_lines(capsys, tmp_path, flat(1, 1.0), flat(2, 0.0))
    assert lines == ["nodes: 1 unchanged, 1 changed (other inputs or attributes), 0 removed, 0 added",
                     "initializers: 0 unchanged, 1 changed (other values), 0 removed, 0 added"]
    onnx.save(flat(1, 1.0), tmp_path / "a.onnx")
    onnx.save(flat(2, 1.0), tmp_path / "b.onnx")
    html = tmp_path / "d.html"
    assert main(["diff", str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), "--html", str(html)]) == 0
    root = xml_of(html.read_text())
    assert nodes_in(root, "changed") == ["Flatten"]
    title = next(g.find(f"{SVG}title").text for g in root.iter(f"{SVG}g") if g.get("class") == "node changed")
    assert title.endswith("before: inputs x; attributes differ")


def test_drawings_show_what_a_subgraph_reads_from_outside(tmp_path):
    # t is read only inside the If's branches: Exp was drawn as a dead end
    h = onnx.helper
    branch = h.make_graph([h.make_node("Add", ["t", "t"], ["r"])], "b", [], [_v("r")])
    m = _model([h.make_node("Exp", ["x"], ["t"]), h.make_node("If", ["c"], ["y"], then_branch=branch,
                                                              else_branch=branch)],
               [_v("c", onnx.TensorProto.BOOL, ()), _v("x")], [_v("y")])
    onnx.save(m, tmp_path / "m.onnx")
    assert main(["show", str(tmp_path / "m.onnx"), "--svg", str(tmp_path / "m.svg")]) == 0
    root = ET.parse(tmp_path / "m.svg").getroot()
    edges = [p.find(f"{SVG}title").text for p in root.iter(f"{SVG}path") if p.find(f"{SVG}title") is not None]
    assert "t" in edges
    titles = [g.find(f"{SVG}title").text for g in root.iter(f"{SVG}g") if g.get("class") == "node same"]
    assert any("read by its subgraphs: t" in t for t in titles)


def test_show_counts_the_ops_inside_subgraphs(tmp_path, capsys):
    h = onnx.helper
    inner = h.make_graph([h.make_node("Neg", ["t"], ["q"])], "inner", [], [_v("q")])
    then = h.make_graph([h.make_node("Add", ["t", "t"], ["a"]), h.make_node("If", ["c"], ["r"], then_branch=inner,
                                                                            else_branch=inner)], "b", [], [_v("r")])
    other = h.make_graph([h.make_node("Sub", ["t", "t"], ["r"])], "e", [], [_v("r")])
    m = _model([h.make_node("Exp", ["x"], ["t"]), h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
               [_v("c", onnx.TensorProto.BOOL, ()), _v("x")], [_v("y")])
    onnx.save(m, tmp_path / "m.onnx")
    assert main(["show", str(tmp_path / "m.onnx")]) == 0
    out = capsys.readouterr().out
    assert "inside 4 subgraphs (If, Loop, Scan bodies): 5 nodes" in out
    rows = {ln.split()[0]: ln.split()[1:] for ln in out.split("inside")[1].splitlines()[1:] if ln and ln[0].isalpha()}
    assert rows == {"Neg": ["2"], "Add": ["1"], "If": ["1"], "Sub": ["1"], "op": ["count"], "total": ["5"]}


def test_identical_models_match_node_for_node():
    m = conv_bn_relu()
    nd = match_nodes(m, m)
    assert nd.same == [(k, k) for k in range(5)] and nd.removed == nd.added == []


def test_layout_puts_producers_above_consumers_and_survives_a_cycle():
    d = Drawing({k: Box(k, k) for k in "abcd"}, [("a", "b", "x"), ("b", "c", "y"), ("a", "c", "z"), ("c", "b", "w")])
    pos = layout(d)
    assert pos["a"][1] < pos["b"][1] and pos["a"][1] < pos["c"][1]
    ET.fromstring(render_svg(d))


@pytest.mark.parametrize("argv", [["show", "{d}/missing.onnx"], ["diff", "{d}/before.onnx", "{d}/missing.onnx"],
                                  ["diff", "{d}/missing.onnx", "{d}/before.onnx", "--html", "{d}/x.html"]])
def test_missing_files_exit_2_with_one_line(pair, capsys, argv):
    assert main([a.format(d=pair) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"eqsat: error: {pair}/missing.onnx: no such file"]
    assert not (pair / "x.html").exists()


def test_a_negative_context_is_a_usage_error(pair, capsys):
    assert main(["diff", str(pair / "before.onnx"), str(pair / "after.onnx"), "--context", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: eqsat diff") and "argument --context: must be >= 0: -1" in err
