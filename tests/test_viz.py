"""`eqsat show` and `eqsat diff`: op histograms, node matching, and the drawings (SVG and a
self-contained HTML page)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import onnx
import pytest

from eqsat.cli import main
from eqsat.pipeline import Options, optimize
from eqsat.viz.diffing import match_nodes
from eqsat.viz.graph import Box, Drawing, layout, render_svg

from .test_explain import conv_bn_relu

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
    # MaxPool keeps its output name (its input was renamed when the Identity went away)
    assert "nodes: 1 unchanged, 4 removed, 1 added" in out


def test_diff_html_highlights_added_and_removed_nodes(pair, capsys):
    html = pair / "diff.html"
    assert main(["diff", str(pair / "before.onnx"), str(pair / "after.onnx"), "--html", str(html)]) == 0
    root = xml_of(html.read_text())
    assert nodes_in(root, "added") == ["com.microsoft.FusedConv"]
    assert sorted(nodes_in(root, "removed")) == ["BatchNormalization", "Conv", "Identity", "Relu"]
    assert nodes_in(root, "same") == ["MaxPool"]
    assert main(["diff", str(pair / "before.onnx"), str(pair / "before.onnx"), "--html", str(html)]) == 0
    root = xml_of(html.read_text())
    assert nodes_in(root, "added") == nodes_in(root, "removed") == []  # nothing changed, nothing drawn


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
