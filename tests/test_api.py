"""eqsat's Python API (eqsat/api.py), called as a user calls it: `import eqsat`, then
`eqsat.optimize`, `eqsat.plan`, `eqsat.verify`, `eqsat.load_rules`."""

from __future__ import annotations

import importlib
import subprocess
import sys

import numpy as np
import onnx
import pytest

import eqsat
from eqsat.demo import build_model

from .conftest import assert_same_outputs, parse_model, run_cli

RELU = """<ir_version: 8, opset_import: ["" : 18]>
agraph (float[4] x) => (float[4] y) { y = Relu(x) }"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    path = tmp_path_factory.mktemp("api") / "model.onnx"
    onnx.save(build_model(), str(path))
    return path


def test_optimize_a_path_gives_the_cli_program(demo, tmp_path, capsys):
    r = eqsat.optimize(demo)
    out = tmp_path / "cli.onnx"
    assert run_cli(capsys, "optimize", demo, "-o", out, "-q")[0] == 0
    cli = onnx.load(str(out))
    assert [n.op_type for n in r.model.graph.node] == [n.op_type for n in cli.graph.node]
    assert r.report.nodes_before == len(onnx.load(str(demo)).graph.node)
    assert r.report.nodes_after == len(r.model.graph.node) < r.report.nodes_before
    assert r.report.verification["status"] == "passed"
    assert r.report.as_dict()["ops_after"] == r.report.ops_after
    onnx.checker.check_model(r.model, full_check=True)
    assert_same_outputs(onnx.load(str(demo)), r.model, dims={"batch": 3}, rtol=1e-5, atol=1e-6)


def test_optimize_a_model_in_memory_leaves_it_unchanged():
    m = build_model()
    before = m.SerializeToString()
    r = eqsat.optimize(m, verify=False)
    assert m.SerializeToString() == before
    assert r.report.verification["status"] == "skipped"
    assert len(r.model.graph.node) < len(m.graph.node)


def test_a_wrong_rule_raises_and_returns_nothing(tmp_path):
    rules = tmp_path / "wrong.egg"
    rules.write_text('(rewrite (Relu x) x :name "relu-is-identity")\n')
    with pytest.raises(eqsat.OptimizeError, match="verification failed: output 'y'"):
        eqsat.optimize(parse_model(RELU), rules=[rules])
    r = eqsat.optimize(parse_model(RELU), rules=[rules], verify=False)  # the user's choice
    assert [n.op_type for n in r.model.graph.node] == ["Identity"] or not r.model.graph.node


def test_bad_options_fail_before_the_model_loads(tmp_path):
    missing = tmp_path / "missing.onnx"
    with pytest.raises(eqsat.UsageError, match="cost model"):
        eqsat.optimize(missing, cost_model="no-such-model")
    with pytest.raises(eqsat.RuleError, match="no such rule file"):
        eqsat.optimize(missing, rules=[tmp_path / "absent.egg"])
    with pytest.raises(eqsat.InputError, match="no such file"):
        eqsat.optimize(missing)
    with pytest.raises(eqsat.UsageError, match="ModelProto or a path"):
        eqsat.optimize(42)


def test_plan_in_optimize_and_on_its_own(demo, tmp_path):
    r = eqsat.optimize(demo, plan=True, dims={"batch": 4}, verify=False)
    assert r.plan["lower_bound_bytes"] <= r.plan["arena_bytes"] <= r.plan["no_reuse_bytes"]
    assert r.report.data["plan"]["arena_bytes"] == r.plan["arena_bytes"]
    importlib.import_module("eqsat.plan.planner")  # the package stays callable once a submodule loads

    p = eqsat.plan(r.model, dims={"batch": 4})
    assert p.arena_bytes == r.plan["arena_bytes"]
    with pytest.raises(eqsat.UsageError, match="batch"):
        eqsat.optimize(demo, plan=True)  # the symbolic batch is unbound: refused before optimizing


def test_verify_two_models(demo):
    good = eqsat.optimize(demo, verify=False).model
    assert eqsat.verify(demo, good).status == "passed"
    wrong = parse_model(RELU.replace("Relu", "Neg"))
    v = eqsat.verify(parse_model(RELU), wrong)
    assert v.status == "failed" and "output 'y'" in v.detail


def test_save_writes_a_model_onnxruntime_runs(demo, tmp_path):
    r = eqsat.optimize(demo, verify=False)
    path = r.save(tmp_path / "o.onnx")
    back = onnx.load(str(path))
    onnx.checker.check_model(back)
    image = np.random.default_rng(0).standard_normal((2, 3, 16, 16), dtype=np.float32)
    assert_same_outputs(r.model, back, {"image": image})


def test_load_rules(tmp_path):
    defaults = eqsat.load_rules()
    assert len(defaults) > 100 and all(r.name for r in defaults)
    mine = tmp_path / "mine.egg"
    mine.write_text(";; Relu(Relu(x)) -> Relu(x)\n"
                    '(rewrite (Relu (Relu x)) (Relu x) :name "relu-twice")\n')
    rules = eqsat.load_rules(mine)
    assert [(r.name, r.line) for r in rules] == [("relu-twice", 2)]
    bad = tmp_path / "bad.egg"
    bad.write_text('(rewrite (Relu (Relu x)) (Relu y) :name "unbound")\n')
    with pytest.raises(eqsat.RuleError, match=r"bad\.egg:1:"):
        eqsat.load_rules(bad)


def test_import_eqsat_is_light_and_the_issue_one_liner_works(demo):
    code = ("import sys, eqsat; assert not {'onnx', 'egglog'} & set(sys.modules), sorted(sys.modules)\n"
            f"r = eqsat.optimize({str(demo)!r}); print(r.report.nodes_after)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert int(p.stdout) == len(eqsat.optimize(demo, verify=False).model.graph.node)


def test_the_package_is_typed():
    from importlib.resources import files

    assert files("eqsat").joinpath("py.typed").is_file()
    assert set(eqsat.__all__) <= set(dir(eqsat))
    for name in eqsat.__all__:
        assert getattr(eqsat, name) is not None


def test_the_python_api_page_runs_as_written(tmp_path):
    from pathlib import Path

    from .test_tutorial import run_doc

    doc = Path(__file__).resolve().parent.parent / "docs" / "python-api.md"
    out = {cmd: p.stdout for cmd, p in run_doc(doc, tmp_path)}
    before, _, after, status = out["$ python optimize.py"].split()[:4]
    assert int(after) < int(before) and status == "passed"
    assert (tmp_path / "model.opt.onnx").is_file()
    assert out["$ python options.py"].startswith("arena ")
    assert out["$ python wrong.py"].startswith("refused: verification failed: output 'y'")
    lines = out["$ python parts.py"].splitlines()
    assert lines[0].startswith("passed ")
    arena, bound = map(int, lines[1].split())
    assert 0 < bound <= arena
    assert len(lines) == 5
    profile, status, planned = out["$ python steps.py"].split()
    assert profile.startswith("cpu") and status == "passed" and planned == "True"
