"""What a rule author meets, tried as a new user would (issue 28): counterexamples in the
rule's own words, clashes with the default rules refused with what to do, the `rules`
subcommands taking their files the same way, comments, --explain's credit for what a rule
removed, a missing --rules file reported before the model loads, and rewrites apart from
analysis rules in the report."""

from __future__ import annotations

import pytest

from .conftest import one_error, run_cli

RELU_RELU = '(ruleset mine)\n\n; Relu(Relu(x)) -> Relu(x)\n(rewrite (Relu (Relu x)) (Relu x) :ruleset mine :name "my-relu-relu")\n'


@pytest.fixture
def model_file(tmp_path):
    import onnx
    import onnx.parser

    p = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
agraph (float[2, 8] x) => (float[2, 8] y) {
    a = Neg(x)
    b = Neg(a)
    y = Relu(b)
}"""), str(p))
    return p


# ---- a missing --rules file, before the model loads

@pytest.mark.parametrize("command", ["optimize", "compare-costs"])
def test_a_missing_rules_file_is_reported_before_the_model_is_read(capsys, tmp_path, command):
    bad_model = tmp_path / "broken.onnx"
    bad_model.write_text("not a model at all\n")  # reading it would fail with another error
    rc, _, err = run_cli(capsys, command, bad_model, "--rules", tmp_path / "nope.egg")
    assert rc == 2
    line = one_error(err)
    assert "nope.egg" in line and "no such rule file" in line, line
    assert "broken.onnx" not in line, line
