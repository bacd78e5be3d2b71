"""A rule file holds declarations, rules and facts, and nothing else: a command that reads
or writes a file (`output`, `input`), runs Python (`py-eval`, ...) or does eqsat's own work
(`run`, `push`, `check`, ...) is refused before any command of the file runs, by all three
commands that load rule files (`rules check`, `rules list`, `optimize --rules`), exit 2
with one line `FILE:LINE:COL: (CMD ...) is not allowed in a rule file: ...`. The refused
kinds one by one are the must-fail files tests/egg/fail/cmd_*.egg (tests/test_rule_files.py)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from eqsat.cli.main import main

from .conftest import parse_model

MODEL = """<ir_version: 8, opset_import: ["" : 17]>
agraph (float[2, 3] x) => (float[2, 3] y) {
    r = Relu(x)
    y = Relu(r)
}"""


def run(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def three_commands(tmp_path: Path, rule_file: Path) -> dict[str, list]:
    """The argument lists of the three commands that load a rule file."""
    model = tmp_path / "m.onnx"
    onnx.save(parse_model(MODEL), str(model))
    return {"rules check": ["rules", "check", rule_file],
            "rules list": ["rules", "list", "--rules", rule_file],
            "optimize": ["optimize", model, "--rules", rule_file, "-o", tmp_path / "out.onnx", "-q"]}


def refused(capsys, args, tmp_path: Path) -> str:
    rc, out, err = run(capsys, *args)
    lines = err.strip().splitlines()
    assert rc == 2, (rc, out, err)
    assert len(lines) == 1 and lines[0].startswith("eqsat: error: "), err
    assert "Traceback" not in err
    assert not (tmp_path / "out.onnx").exists()
    return lines[0].removeprefix("eqsat: error: ")


@pytest.fixture(autouse=True)
def _in_tmp(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # relative paths of the rule files land here


@pytest.mark.parametrize("command", ["rules check", "rules list", "optimize"])
def test_output_command_writes_no_file(capsys, tmp_path, command):
    written = tmp_path / "written.txt"
    f = tmp_path / "out.egg"
    f.write_text('(ruleset mine)\n'
                 '(rewrite (Relu (Relu x)) (Relu x) :ruleset mine :name "relu-relu")\n'
                 f'(output "{written}" (Relu (Input "x")))\n')
    msg = refused(capsys, three_commands(tmp_path, Path("out.egg"))[command], tmp_path)
    assert not written.exists()
    assert msg == ('out.egg:3:1: (output ...) is not allowed in a rule file: it writes a file; '
                   'a rule file only declares sorts, constructors, functions, relations, rulesets, '
                   'rules and facts')


@pytest.mark.parametrize("command", ["rules check", "rules list", "optimize"])
def test_input_command_reads_no_file(capsys, tmp_path, command):
    secret = tmp_path / "secret.csv"
    secret.write_text("token\n")
    f = tmp_path / "in.egg"
    f.write_text(f'(relation Leak (String))\n(input Leak "{secret}")\n')
    msg = refused(capsys, three_commands(tmp_path, Path("in.egg"))[command], tmp_path)
    assert msg.startswith("in.egg:2:1: (input ...) is not allowed in a rule file: it reads a file; ")


PY_EVAL = "(py-eval \"__import__('pathlib').Path('{}').touch()\" (py-dict) (py-dict))"


@pytest.mark.parametrize("command", ["rules check", "rules list", "optimize"])
@pytest.mark.parametrize("where", ["top", "rule"])
def test_python_primitives_run_no_code(capsys, tmp_path, command, where):
    touched = tmp_path / "touched"
    call = PY_EVAL.format(touched)
    f = tmp_path / "py.egg"
    if where == "top":
        f.write_text(f"(relation Pw (PyObject))\n(Pw {call})\n")
    else:  # in a rule's action: it would run when the rule matches (the model's Relu)
        f.write_text(f'(ruleset mine)\n(rule ((= e (Relu x)))\n      ((let p {call}))\n'
                     '      :ruleset mine :name "py")\n')
    msg = refused(capsys, three_commands(tmp_path, Path("py.egg"))[command], tmp_path)
    assert not touched.exists()
    if where == "top":
        assert msg == ("py.egg:1:1: (relation ...) is not allowed in a rule file: it uses the sort "
                       "PyObject, whose primitives run Python code")
    else:
        assert msg == "py.egg:3:15: (py-eval ...) is not allowed in a rule file: it runs Python code"


def test_allowed_commands_still_load(capsys, tmp_path):
    # every kind of command a rule file needs: declarations, rules, rewrites, facts
    f = tmp_path / "ok.egg"
    f.write_text("""(ruleset mine)
(sort IntVec (Vec i64))
(datatype Flag (On) (Off))
(constructor Pick (i64) Flag)
(function weight (Op) i64 :merge (max old new))
(relation tagged (Op))
(tagged (Input "x"))
(set (weight (Input "x")) 1)
(union (Pick 1) (On))
; Relu(Relu(x)) -> Relu(x)
(rewrite (Relu (Relu x)) (Relu x) :ruleset mine :name "relu-relu")
; Neg(Neg(x)) <-> x
(birewrite (Neg (Neg x)) (Identity x) :ruleset mine :name "neg-neg")
; Relu(x) : tagged
(rule ((= e (Relu x))) ((tagged e)) :ruleset mine :name "tag-relu")
""")
    rc, out, err = run(capsys, "rules", "list", "--rules", "ok.egg", "--no-default-rules")
    assert rc == 0, err
    assert [ln.split()[0] for ln in out.splitlines()] == ["relu-relu", "neg-neg", "tag-relu"]
