"""The optimization report's contract (eqsat/report.py, docs/report.md): the published schema
is the one the dataclasses generate; every report the CLI and the API write validates against
it, carries its version and round-trips through Report.from_dict/as_dict with no key left
untyped; a report missing a key or with a wrong type does not validate."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

import eqsat
from eqsat.demo import build_model
from eqsat.report import REPORT_VERSION, Report, Section, json_schema, validate

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "docs" / "report.schema.json"
REGENERATE = "python -m eqsat.report > docs/report.schema.json"


def _if_model() -> onnx.ModelProto:
    """y = If(c) on a run-time condition: then Relu(Identity(x)), else Identity(x) + w."""
    vi = h.make_tensor_value_info
    then_g = h.make_graph([h.make_node("Identity", ["x"], ["t"]), h.make_node("Relu", ["t"], ["a"])],
                          "then", [], [vi("a", TP.FLOAT, [4])])
    else_g = h.make_graph([h.make_node("Identity", ["x"], ["u"]), h.make_node("Add", ["u", "w"], ["b"])],
                          "else", [], [vi("b", TP.FLOAT, [4])])
    g = h.make_graph([h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "g",
                     [vi("c", TP.BOOL, []), vi("x", TP.FLOAT, [4])], [vi("y", TP.FLOAT, [4])],
                     [numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    """--report files of `eqsat optimize`: with --plan and --explain; with --no-verify; on a
    model with subgraphs; with no default rules."""
    from eqsat.cli.main import main

    tmp = tmp_path_factory.mktemp("report")
    demo, branchy = tmp / "demo.onnx", tmp / "if.onnx"
    onnx.save(build_model(), str(demo))
    onnx.save(_if_model(), str(branchy))
    runs = {
        "plan-explain": [demo, "--plan", tmp / "p.json", "--dim", "batch=2", "--explain"],
        "no-verify": [demo, "--no-verify"],
        "subgraphs": [branchy],
        "no-default-rules": [demo, "--no-default-rules", "--no-verify"],
    }
    out = {}
    for name, (src, *extra) in runs.items():
        rep = tmp / f"{name}.json"
        rc = main([str(a) for a in ["optimize", src, "-o", tmp / f"{name}.onnx", "--report", rep, "-q", *extra]])
        assert rc == 0, name
        out[name] = json.loads(rep.read_text())
    return out


KINDS = ["plan-explain", "no-verify", "subgraphs", "no-default-rules"]


def _extras(section: Section, where: str = "report") -> list[str]:
    """Keys of the report that no dataclass field types, anywhere in it."""
    found = [f"{where}.{k}" for k in section.extra]
    for name, value in vars(section).items():
        for i, v in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(v, Section):
                found += _extras(v, f"{where}.{name}" + (f"[{i}]" if isinstance(value, list) else ""))
    return found


def test_published_schema_is_generated():
    published = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert published == json_schema(), (
        f"docs/report.schema.json is not the schema eqsat/report.py's dataclasses generate: run `{REGENERATE}`")


def test_schema_shape():
    s = json_schema()
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert s["properties"]["version"]["const"] == REPORT_VERSION
    assert {"version", "nodes_before", "saturation", "extraction", "work", "warnings"} <= set(s["required"])
    assert not {"verification", "plan", "subgraphs", "explain", "input", "output"} & set(s["required"])
    try:
        import jsonschema
    except ImportError:
        return  # not a dependency: eqsat.report.validate checks the reports below
    jsonschema.Draft202012Validator.check_schema(s)


@pytest.mark.parametrize("kind", KINDS)
def test_cli_report_validates(reports, kind):
    d = reports[kind]
    assert d["version"] == REPORT_VERSION
    assert validate(d) == []
    try:
        import jsonschema
    except ImportError:
        return
    jsonschema.validate(d, json_schema())


def test_reports_cover_the_optional_sections(reports):
    assert {"plan", "explain", "verification", "input", "output"} <= set(reports["plan-explain"])
    assert reports["plan-explain"]["verification"]["status"] == "passed"
    assert reports["no-verify"]["verification"]["status"] == "skipped"
    assert "plan" not in reports["no-verify"] and "explain" not in reports["no-verify"]
    assert reports["subgraphs"]["subgraphs"], "the If model's report has no subgraph rows"


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_types_every_key(reports, kind):
    d = reports[kind]
    r = Report.from_dict(d)
    assert r.as_dict() == d
    assert _extras(r) == [], "keys the pipeline writes that eqsat/report.py does not type"
    assert r.version == REPORT_VERSION and r.nodes_after == d["nodes_after"]
    assert r.saturation.stop_reason == d["saturation"]["stop_reason"]
    assert r.verification["status"] == r.verification.status  # sections read as the dicts they were


def test_api_report_is_the_typed_one(tmp_path):
    path = tmp_path / "demo.onnx"
    onnx.save(build_model(), str(path))
    r = eqsat.optimize(path, plan=True, dims={"batch": 2})
    assert isinstance(r.report, Report) and eqsat.Report is Report
    d = r.report.as_dict()
    assert d["version"] == REPORT_VERSION and validate(d) == []
    assert r.report.plan.arena_bytes == r.plan["arena_bytes"] and r.report.plan.file is None
    assert r.report.data == d and Report.from_dict(d).as_dict() == d


def _broken(d: dict, path: str, value=None, delete=False) -> dict:
    out = copy.deepcopy(d)
    *parents, last = path.split(".")
    node = out
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    if delete:
        del node[last]
    else:
        node[last] = value
    return out


@pytest.mark.parametrize(("path", "value", "delete", "says"), [
    ("version", None, True, "missing key 'version'"),
    ("saturation", None, True, "missing key 'saturation'"),
    ("saturation.enodes", None, True, "$.saturation: missing key 'enodes'"),
    ("work.output.contractions", None, True, "$.work.output: missing key 'contractions'"),
    ("nodes_after", "7", False, "$.nodes_after: str"),
    ("nodes_after", 7.5, False, "$.nodes_after: float"),
    ("work.input.flops", True, False, "$.work.input.flops: bool"),
    ("saturation.rounds", {}, False, "$.saturation.rounds: dict"),
    ("saturation.rule_matches", {"r": "1"}, False, "$.saturation.rule_matches.r: str"),
    ("saturation.stop_reason", "bored", False, "not one of"),
    ("verification.status", "fine", False, "not one of"),
    ("version", REPORT_VERSION + 1, False, "$.version"),
    ("warnings", [1], False, "$.warnings[0]: int"),
    ("plan", None, False, "$.plan: NoneType"),
])
def test_broken_report_fails_validation(reports, path, value, delete, says):
    bad = _broken(reports["plan-explain"], path, value, delete)
    errors = validate(bad)
    assert errors and any(says in e for e in errors), errors


def test_from_dict_tolerates_optional_keys_and_unknown_ones(reports):
    d = copy.deepcopy(reports["plan-explain"])
    for k in ("verification", "plan", "explain", "input", "output", "version"):
        d.pop(k)
    r = Report.from_dict(d)
    assert r.verification is None and r.plan is None and r.version == REPORT_VERSION
    assert r.as_dict() == dict(d, version=REPORT_VERSION)  # a report from before versioning is version 1
    newer = dict(reports["no-verify"], added_later=[1])
    newer["saturation"] = dict(newer["saturation"], also_added=True)
    assert validate(newer) == []  # adding a key does not change the version
    assert Report.from_dict(newer).as_dict() == newer


def test_from_dict_refuses_what_it_cannot_read(reports):
    with pytest.raises(ValueError, match="missing key 'extraction'"):
        Report.from_dict({k: v for k, v in reports["no-verify"].items() if k != "extraction"})
    with pytest.raises(ValueError, match="newer"):
        Report.from_dict(dict(reports["no-verify"], version=REPORT_VERSION + 1))


def test_docs_table_names_every_top_level_key():
    text = (ROOT / "docs" / "report.md").read_text(encoding="utf-8")
    rows = [ln for ln in text.splitlines() if ln.startswith("| `")]
    missing = [k for k in json_schema()["properties"] if not any(f"`{k}`" in r.split("|")[1] for r in rows)]
    assert not missing, f"docs/report.md's table does not name: {missing}"


def test_report_module_imports_nothing_heavy():
    code = ("import sys, eqsat.report; heavy = [m for m in ('onnx', 'numpy', 'egglog', 'eqsat.core') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
