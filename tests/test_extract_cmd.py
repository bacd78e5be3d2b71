"""`eqsat extract` on saved e-graphs, choice files, and `eqsat optimize --choice`."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from eqsat.cli.main import main
from eqsat.demo import build_model

from .conftest import assert_same_outputs, ops, parse_model


def run_cli(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def saved(tmp_path, capsys) -> tuple[Path, Path]:
    """The demo model and the e-graph its default optimization saved."""
    model, egraph = tmp_path / "model.onnx", tmp_path / "model.egraph.json"
    onnx.save(build_model(), str(model))
    rc, _, err = run_cli(capsys, "optimize", model, "-o", tmp_path / "default.onnx", "--save-egraph", egraph, "-q")
    assert rc == 0, err
    return model, egraph


def test_a_choice_made_from_the_saved_egraph_decodes_to_what_optimize_makes(capsys, tmp_path, saved):
    model, egraph = saved
    for extractor, cost in (("ilp", "node-count"), ("tree-greedy", "roofline")):
        choice = tmp_path / f"{extractor}.json"
        rc, out, err = run_cli(capsys, "extract", egraph, "--extractor", extractor, "--cost-model", cost, "-o", choice)
        assert rc == 0, err
        assert f": {extractor}" in out and f" under {cost}: " in out
        if extractor == "ilp":  # the demo's convolutions put both layouts in the e-graph: the ILP says so
            assert "proven optimal over every layout choice" in out
            rc, out, err = run_cli(capsys, "extract", egraph, "--extractor", "ilp-fixed-layouts", "--cost-model", cost)
            assert rc == 0, err
            assert ": ilp-fixed-layouts under" in out and "proven optimal for the fixed layouts" in out
            assert "(optimal)" not in out
        data = json.loads(choice.read_text())
        assert data["extractor"] == extractor and data["cost_model"] == cost and data["egraph_digest"]
        rc, out, err = run_cli(capsys, "extract", egraph, "--check", choice, "--cost-model", cost)
        assert rc == 0, err
        # the check recomputes the costs the extractor reported
        assert f"DAG cost {data['dag_cost']:.6g}" in out and out.startswith(f"{choice}: valid for {egraph}")
        decoded, direct = tmp_path / f"{extractor}.onnx", tmp_path / f"{extractor}.direct.onnx"
        rep = tmp_path / "r.json"
        rc, _, err = run_cli(capsys, "optimize", model, "--choice", choice, "-o", decoded, "--report", rep, "-q")
        assert rc == 0, err
        assert json.loads(rep.read_text())["extraction"]["extractor"] == f"choice file {choice.name}"
        rc, _, err = run_cli(capsys, "optimize", model, "--extractor", extractor, "--cost-model", cost, "-o", direct,
                             "-q")
        assert rc == 0, err
        assert ops(onnx.load(str(decoded))) == ops(onnx.load(str(direct)))
        assert_same_outputs(onnx.load(str(model)), onnx.load(str(decoded)), dims={"batch": 3}, rtol=1e-5, atol=1e-6)


def test_a_choice_that_fails_the_checker_is_refused_and_nothing_written(capsys, tmp_path, saved):
    model, egraph = saved
    choice = tmp_path / "c.json"
    assert run_cli(capsys, "extract", egraph, "-o", choice)[0] == 0
    data = json.loads(choice.read_text())
    root = json.loads(egraph.read_text())["eqsat"]["roots"][0]
    del data["choice"][root]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(data))
    rc, _, err = run_cli(capsys, "extract", egraph, "--check", broken)
    assert rc == 1
    assert err.strip() == (f"eqsat: error: {broken}: not a valid choice for {egraph}: "
                           f"root e-class {root} has no chosen node")
    out = tmp_path / "o.onnx"
    rc, _, err = run_cli(capsys, "optimize", model, "--choice", broken, "-o", out, "-q")
    assert rc == 1 and f"{broken}: not a valid choice for this e-graph: root e-class {root}" in err
    assert not out.exists()


def test_a_choice_from_another_egraph_is_refused_by_its_digest(capsys, tmp_path, saved):
    model, egraph = saved
    other = tmp_path / "other.onnx"
    onnx.save(parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3] x) => (float[2, 3] y) { t = Relu(x)
                                               y = Relu(t) }"""), str(other))
    other_egraph, choice = tmp_path / "other.egraph.json", tmp_path / "c.json"
    assert run_cli(capsys, "optimize", other, "--save-egraph", other_egraph, "-q")[0] == 0
    assert run_cli(capsys, "extract", other_egraph, "-o", choice)[0] == 0
    rc, _, err = run_cli(capsys, "extract", egraph, "--check", choice)
    assert rc == 1 and "the choice was made on another e-graph (digest" in err
    rc, _, err = run_cli(capsys, "optimize", model, "--choice", choice, "-o", tmp_path / "o.onnx", "-q")
    assert rc == 1 and "made on another e-graph" in err and "saturate with the options of the run" in err
    # another tool's bare mapping carries no digest: the checker alone decides
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(json.loads(choice.read_text())["choice"]))
    rc, _, err = run_cli(capsys, "extract", egraph, "--check", bare)
    assert rc == 1 and "has no chosen node" in err


def test_the_saved_settings_are_the_defaults(capsys, tmp_path):
    """The roofline prices the e-graph with the profile and sizes it was saturated with,
    unless told otherwise: a larger batch costs more."""
    model, egraph = tmp_path / "model.onnx", tmp_path / "g.json"
    onnx.save(build_model(), str(model))
    assert run_cli(capsys, "optimize", model, "--save-egraph", egraph, "--dim", "batch=4", "--hardware", "h200",
                   "-q")[0] == 0
    assert json.loads(egraph.read_text())["eqsat"]["settings"]["hardware"] == "h200"
    costs = {}
    for args in ([], ["--dim", "batch=4", "--hardware", "h200"], ["--dim", "batch=4096"]):
        rc, out, err = run_cli(capsys, "extract", egraph, "--cost-model", "roofline", *args)
        assert rc == 0, err
        costs[len(args)] = float(out.split("DAG cost ")[1].split()[0])
    assert costs[0] == costs[4] and costs[2] > costs[0]


def test_every_extractor_under_every_cost_model_one_line_each(capsys, saved):
    _, egraph = saved
    rc, out, err = run_cli(capsys, "extract", egraph, "--extractor", "ilp", "--extractor", "tree-greedy",
                           "--cost-model", "node-count", "--cost-model", "roofline")
    assert rc == 0, err
    lines = out.splitlines()
    assert [(ln.split(": ")[1].split()[0], ln.split(" under ")[1].split(":")[0]) for ln in lines] == [
        ("ilp", "node-count"), ("tree-greedy", "node-count"), ("ilp", "roofline"), ("tree-greedy", "roofline")]
    dag = [float(ln.split("DAG cost ")[1].split()[0]) for ln in lines]
    assert dag[0] <= dag[1] and dag[2] <= dag[3]  # the ILP is never worse than greedy on DAG cost
    assert all(ln.split("DAG cost ")[1].split()[1] == unit for ln,
               unit in zip(lines, ["ops,", "ops,", "us,", "us,"], strict=True))


@pytest.mark.parametrize("content, says", [
    ("not json", "not JSON"),
    ('{"choice": 3}', 'not a choice file: expected {"choice": {e-class: node id, ...}}'),
    ('{"choice": {"a": 1}}', "not a choice file"),
    ('{"format": 99, "choice": {"a": "b"}}', "choice file format 99 is newer than this reader's (1)"),
    ('{"format": "x", "choice": {"a": "b"}}', 'format: expected an integer >= 1 (the choice file format\'s version), '
                                              'got "x"'),
    ('{"extractor": 3, "choice": {"a": "b"}}', "extractor: expected a string, got 3"),
    ('{"settings": "x", "choice": {"a": "b"}}', 'settings: expected an object, got "x"'),
])
def test_a_file_that_is_not_a_choice_file_is_one_line(capsys, tmp_path, saved, content, says):
    _, egraph = saved
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    rc, _, err = run_cli(capsys, "extract", egraph, "--check", bad)
    assert rc == 2 and err.strip().startswith(f"eqsat: error: {bad}: {says}"), err


def test_usage_errors(capsys, tmp_path, saved):
    model, egraph = saved
    rc, _, err = run_cli(capsys, "extract", tmp_path / "missing.json")
    assert rc == 2 and err.strip() == f"eqsat: error: {tmp_path / 'missing.json'}: no such file"
    rc, _, err = run_cli(capsys, "extract", model)  # an ONNX file, not an e-graph
    assert rc == 2 and err.strip() == (f"eqsat: error: {model}: not an e-graph file (binary, not JSON); "
                                       "`eqsat optimize --save-egraph` writes one")
    rc, _, err = run_cli(capsys, "optimize", egraph, "-o", tmp_path / "x.onnx")  # the e-graph where a model goes
    assert rc == 2 and err.strip().endswith(f"{egraph}: not an ONNX model: it is JSON, and eqsat reads binary .onnx "
                                            "files (an e-graph or a choice file goes to `eqsat extract`)")
    rc, _, err = run_cli(capsys, "extract", egraph, "-o", egraph)
    assert rc == 2 and err.strip() == (f"eqsat: error: {egraph}: --output would overwrite the input {egraph}; "
                                       "name another file")
    assert json.loads(egraph.read_text())["eqsat"]["roots"]  # untouched
    choice = tmp_path / "c.json"
    assert run_cli(capsys, "extract", egraph, "-o", choice)[0] == 0
    rc, _, err = run_cli(capsys, "extract", choice)  # a choice file, not an e-graph
    assert rc == 2 and "not an e-graph file" in err and "--save-egraph` writes one" in err
    listing = tmp_path / "list.json"
    listing.write_text("[1, 2]")
    rc, _, err = run_cli(capsys, "extract", listing)
    assert rc == 2 and err.strip() == (f"eqsat: error: {listing}: not an e-graph file (not egraph-serialize JSON); "
                                       "`eqsat optimize --save-egraph` writes one")
    raw = tmp_path / "raw.json"  # egglog's own serialization, without eqsat's object: the extraction was nonsense
    raw.write_text(json.dumps({k: v for k, v in json.loads(egraph.read_text()).items() if k != "eqsat"}))
    rc, _, err = run_cli(capsys, "extract", raw, "--cost-model", "roofline")
    assert rc == 2 and err.strip() == (
        f"eqsat: error: {raw}: an eqsat e-graph without eqsat's metadata (the top-level \"eqsat\" object: "
        "constructors, roots, value classes): its analysis tables would be read as terms; `eqsat optimize "
        "--save-egraph` writes the whole file")
    rc, _, err = run_cli(capsys, "extract", egraph, "--check", choice, "-o", tmp_path / "d.json")
    assert rc == 2 and "give one of them" in err
    rc, _, err = run_cli(capsys, "extract", egraph, "--extractor", "ilp", "--extractor", "dag-greedy", "-o",
                         tmp_path / "d.json")
    assert rc == 2 and "-o writes one choice" in err and not (tmp_path / "d.json").exists()
    rc, _, err = run_cli(capsys, "extract", egraph, "--extractor", "nope")
    assert rc == 2 and "unknown extractor 'nope'; choose one of tree-greedy, dag-greedy, ilp, ilp-fixed-layouts" in err


def test_a_choice_file_is_read_before_any_work(capsys, tmp_path, saved):
    model, _ = saved
    rc, _, err = run_cli(capsys, "optimize", model, "--choice", tmp_path / "missing.json", "-o", tmp_path / "o.onnx")
    assert rc == 2 and err.strip().splitlines()[-1] == f"eqsat: error: {tmp_path / 'missing.json'}: no such file"
    assert "round 1" not in err  # refused before saturating


def test_a_choice_from_other_options_names_the_option(capsys, tmp_path, saved):
    model, egraph = saved
    choice = tmp_path / "c.json"
    assert run_cli(capsys, "extract", egraph, "-o", choice)[0] == 0
    rc, _, err = run_cli(capsys, "optimize", model, "--choice", choice, "--layout", "nchw", "-o", tmp_path / "o.onnx",
                         "-q")
    if rc == 0:  # no blocked kernels in this onnxruntime: both layouts saturate alike
        pytest.skip("onnxruntime has no NCHWc kernels here, so --layout changes nothing")
    assert rc == 1 and "its settings differ: layout 'nchwc' there, 'nchw' here" in err


def test_a_choice_from_another_fold_limit_names_it(capsys, tmp_path, saved):
    model, egraph = saved
    choice = tmp_path / "c.json"
    assert run_cli(capsys, "extract", egraph, "-o", choice)[0] == 0
    rc, _, err = run_cli(capsys, "optimize", model, "--choice", choice, "--fold-limit", "1", "-o",
                         tmp_path / "o.onnx", "-q")
    assert rc == 1 and "fold_limit 1048576 there, 1 here" in err


def test_check_refuses_extractor_options_and_says_when_a_model_cannot_price(capsys, tmp_path, saved):
    _, egraph = saved
    choice = tmp_path / "c.json"
    # the same cost model twice is one choice
    assert run_cli(capsys, "extract", egraph, "--cost-model", "roofline", "--cost-model", "roofline", "-o",
                   choice)[0] == 0
    rc, _, err = run_cli(capsys, "extract", egraph, "--check", choice, "--extractor", "nope")
    assert rc == 2 and "--extractor and --extract-time-limit do not apply" in err
    # the e-graph holds no measured op times: the choice is fine, the model cannot price it
    # (exit 1 is for a choice that fails the check: it was 1 here)
    rc, out, err = run_cli(capsys, "extract", egraph, "--check", choice, "--cost-model", "measured",
                           "--cost-model", "node-count")
    assert rc == 0, err
    lines = out.strip().splitlines()
    assert lines[0] == (f"{choice}: valid for {egraph} (every root chosen, closed, acyclic); measured: not priced "
                        "(this e-graph has no measured op times (eqsat.measured_us): save it from a run with "
                        "--cost-model measured (or "
                        "compare-costs), or use the roofline model)")
    assert lines[1].startswith(f"{choice}: valid for {egraph} (every root chosen, closed, acyclic); node-count: DAG "
                               f"cost")
    # a model this eqsat lacks: priced under the default, with a warning
    data = json.loads(choice.read_text())
    data["cost_model"] = "someone-elses"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    rc, out, err = run_cli(capsys, "extract", egraph, "--check", other)
    assert rc == 0 and "; roofline: DAG cost" in out
    assert "made under cost model 'someone-elses', which this eqsat cannot build; pricing it under roofline" in err
    data["cost_model"] = ["a"]
    other.write_text(json.dumps(data))
    rc, _, err = run_cli(capsys, "extract", egraph, "--check", other)
    assert rc == 2 and err.strip() == f'eqsat: error: {other}: cost_model: expected a string, got ["a"]'


def test_check_defaults_to_the_choice_files_cost_model_and_warns_on_other_settings(capsys, tmp_path, saved):
    _, egraph = saved
    choice = tmp_path / "c.json"
    assert run_cli(capsys, "extract", egraph, "--cost-model", "roofline", "-o", choice)[0] == 0
    rc, out, err = run_cli(capsys, "extract", egraph, "--check", choice)
    assert rc == 0 and "; roofline: DAG cost" in out and err == ""
    rc, out, err = run_cli(capsys, "extract", egraph, "--check", choice, "--hardware", "h200", "--dim", "sequence=8")
    assert rc == 0
    assert "warning: --hardware h200: the e-graph was saturated with profile cpu" in err
    assert "warning: --dim sequence: the e-graph has no symbolic dimension of that name (its symbolic dimensions: " \
           "batch)" in err


def test_a_choice_is_checked_at_the_sizes_its_costs_were_computed_at(capsys, tmp_path, saved):
    # the choice file recorded no sizes: --check repriced it at the e-graph's own, another cost
    _, egraph = saved
    choice = tmp_path / "c.json"
    rc, out, err = run_cli(capsys, "extract", egraph, "--cost-model", "roofline", "--dim", "batch=64", "-o", choice)
    assert rc == 0, err
    data = json.loads(choice.read_text())
    assert data["dims"] == {"batch": 64}
    rc, out, err = run_cli(capsys, "extract", egraph, "--check", choice)
    assert rc == 0, err
    assert f"roofline: DAG cost {data['dag_cost']:g} us" in out
    rc, out, err = run_cli(capsys, "extract", egraph, "--check", choice, "--dim", "batch=1")  # told others
    assert rc == 0 and f"DAG cost {data['dag_cost']:g} us" not in out


def test_an_unknown_profile_is_an_error_before_any_warning(capsys, saved):
    _, egraph = saved
    rc, _, err = run_cli(capsys, "extract", egraph, "--hardware", "nosuch")
    assert rc == 2 and err.strip().splitlines() == [
        "eqsat: error: no hardware profile 'nosuch' (known: cpu, cpu-avx2, h200, or a .json path)"]
