"""What a rule author meets, tried as a new user would (issue 28): counterexamples in the
rule's own words, clashes with the default rules refused with what to do, the `rules`
subcommands taking their files the same way, comments, --explain's credit for what a rule
removed, a missing --rules file reported before the model loads, and rewrites apart from
analysis rules in the report."""

from __future__ import annotations

import pytest

from .conftest import one_error, run_cli

RELU_RELU = ('(ruleset mine)\n\n; Relu(Relu(x)) -> Relu(x)\n'
             '(rewrite (Relu (Relu x)) (Relu x) :ruleset mine :name "my-relu-relu")\n')


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


# ---- names that clash with the default rules

def _default_rule(name: str):
    from eqsat.core.rulefiles import default_rule_files
    from eqsat.ruletool.model import read_files

    return next(r for r in read_files(default_rule_files()).rules if r.name == name)


@pytest.mark.parametrize("command", [("rules", "check", "{f}"), ("rules", "list", "--rules", "{f}"),
                                     ("optimize", "{m}", "--rules", "{f}")])
def test_a_rule_named_like_a_default_rule_is_refused_naming_both(capsys, tmp_path, model_file, command):
    f = tmp_path / "dup.egg"
    f.write_text('(ruleset mine)\n\n; Identity(x) -> x\n(rewrite (Identity x) x :ruleset mine :name "identity-elim")\n')
    rc, _, err = run_cli(capsys, *[a.format(f=f, m=model_file) for a in command])
    assert rc == 2, err
    line = one_error(err)
    theirs = _default_rule("identity-elim")
    assert "dup.egg:4:1: " in line, line  # the user's rule, FILE:LINE:COL
    assert f"{theirs.path}:{theirs.line}:{theirs.col}" in line, line  # the default rule it clashes with
    assert "identity-elim" in line and "rename" in line, line


def test_two_rule_files_with_one_rule_name_are_refused(capsys, tmp_path):
    a, b = tmp_path / "a.egg", tmp_path / "b.egg"
    a.write_text(RELU_RELU)
    b.write_text('(ruleset theirs)\n; Relu(Relu(x)) -> Relu(x)\n'
                 '(rewrite (Relu (Relu x)) (Relu x) :ruleset theirs :name "my-relu-relu")\n')
    rc, _, err = run_cli(capsys, "rules", "list", "--no-default-rules", "--rules", a, "--rules", b)
    assert rc == 2
    line = one_error(err)
    assert "b.egg:3:1: " in line and "a.egg:4:1" in line and "rename" in line, line


# ---- a ruleset named like a default phase

@pytest.mark.parametrize("no_defaults", [False, True])
def test_a_ruleset_named_like_a_default_phase_says_why_and_what_to_do(capsys, tmp_path, no_defaults):
    f = tmp_path / "phase.egg"
    f.write_text('; mine\n(ruleset fusion)\n\n; Relu(Relu(x)) -> Relu(x)\n'
                 '(rewrite (Relu (Relu x)) (Relu x) :ruleset fusion :name "my-relu-relu")\n')
    rc, _, err = run_cli(capsys, "rules", "list", "--rules", f, *(["--no-default-rules"] if no_defaults else []))
    assert rc == 2
    line = one_error(err)
    assert "phase.egg:2:1: " in line, line
    assert "phase of the default schedule" in line, line  # why
    assert "leave out" in line and ":ruleset fusion" in line and "rename" in line, line  # what to do


def test_rules_may_join_a_default_phase_without_declaring_it(capsys, tmp_path):
    f = tmp_path / "join.egg"
    f.write_text('; Relu(Relu(x)) -> Relu(x)\n'
                 '(rewrite (Relu (Relu x)) (Relu x) :ruleset fusion :name "my-relu-relu")\n')
    rc, out, err = run_cli(capsys, "rules", "list", "--rules", f, "--no-default-rules")
    assert rc == 0, err
    assert out.split()[:2] == ["my-relu-relu", "fusion"], out


# ---- the rules subcommands take their files the same way, and report their own usage

def test_rules_list_takes_files_as_arguments_as_check_does(capsys, tmp_path):
    f = tmp_path / "mine.egg"
    f.write_text(RELU_RELU)
    rc, by_option, err = run_cli(capsys, "rules", "list", "--rules", f, "--no-default-rules")
    assert rc == 0, err
    rc, by_argument, err = run_cli(capsys, "rules", "list", f, "--no-default-rules")
    assert rc == 0, err
    assert by_argument == by_option and by_argument.startswith("my-relu-relu "), by_argument


def test_rules_check_takes_files_with_rules_as_list_does(capsys, tmp_path):
    f = tmp_path / "mine.egg"
    f.write_text(RELU_RELU)
    rc, out, err = run_cli(capsys, "rules", "check", "--rules", f, "-v")
    assert rc == 0, err
    assert "my-relu-relu: ok" in out, out
    rc, out2, err = run_cli(capsys, "rules", "check", f, "-v")
    assert rc == 0 and out2 == out, err


def test_rules_check_of_a_default_rule_file_checks_it_once(capsys):
    from eqsat.core.rulefiles import rules_dir

    rc, out, err = run_cli(capsys, "rules", "check", rules_dir() / "cleanup.egg", "--rule", "identity-elim", "-v")
    assert rc == 0, err
    assert "identity-elim: ok" in out, out


@pytest.mark.parametrize("sub", ["list", "check"])
def test_a_rules_subcommand_reports_a_bad_argument_with_its_own_usage(capsys, sub):
    rc, _, err = run_cli(capsys, "rules", sub, "--no-such-option")
    assert rc == 2
    assert "--no-such-option" in one_error(err)
    usage = [ln for ln in err.splitlines() if ln.startswith("usage:")]
    assert len(usage) == 1 and usage[0].startswith(f"usage: eqsat rules {sub} "), err


# ---- comments: a rule's own, or its group's, shown once

GROUPED = """(ruleset mine)

; Neg(Neg(x)) -> x
(rewrite (Neg (Neg x)) x :ruleset mine :name "my-neg-neg")

; Floor(Floor(x)) -> Floor(x) ; Ceil(Ceil(x)) -> Ceil(x)
(rewrite (Floor (Floor x)) (Floor x) :ruleset mine :name "my-floor-floor")
(rewrite (Ceil (Ceil x)) (Ceil x) :ruleset mine :name "my-ceil-ceil")

(rewrite (Abs (Abs x)) (Abs x) :ruleset mine :name "my-abs-abs")
"""


def test_rules_list_shows_a_group_comment_once_as_the_groups_heading(capsys, tmp_path):
    import json

    f = tmp_path / "mine.egg"
    f.write_text(GROUPED)
    rc, out, err = run_cli(capsys, "rules", "list", f, "--no-default-rules")
    assert rc == 0, err
    lines = out.splitlines()
    group = "Floor(Floor(x)) -> Floor(x) ; Ceil(Ceil(x)) -> Ceil(x)"
    assert sum(group in ln for ln in lines) == 1, out  # once, not on each rule of the group
    heading = next(i for i, ln in enumerate(lines) if group in ln)
    assert not lines[heading].lstrip().startswith("my-"), out  # a heading, not a rule's line
    below = [ln.split()[0] for ln in lines[heading + 1:heading + 3]]
    assert below == ["my-floor-floor", "my-ceil-ceil"], out  # the group's rules under it
    neg = next(ln for ln in lines if ln.split()[0] == "my-neg-neg")
    assert neg.rstrip().endswith("Neg(Neg(x)) -> x"), out  # a rule's own comment on its line
    abs_ = next(ln for ln in lines if ln.split()[0] == "my-abs-abs")
    assert "(no before -> after comment)" in abs_ and group not in abs_, out  # after a blank line: none
    rc, out, err = run_cli(capsys, "rules", "list", f, "--no-default-rules", "--json")
    by_name = {r["name"]: r for r in json.loads(out)}
    assert by_name["my-neg-neg"]["comment"] == "Neg(Neg(x)) -> x" and by_name["my-neg-neg"]["group"] == ""
    for name in ("my-floor-floor", "my-ceil-ceil"):
        assert by_name[name]["comment"] == "" and by_name[name]["group"] == group, by_name[name]
    assert by_name["my-abs-abs"]["comment"] == by_name["my-abs-abs"]["group"] == ""


def test_a_flag_keyword_does_not_swallow_the_next_keyword(capsys, tmp_path):
    # `:subsume` takes no value: it took `:ruleset` as its value, and the rule was listed in
    # no ruleset (rules/layout.egg's nchwc-conv-plain)
    f = tmp_path / "mine.egg"
    f.write_text('(ruleset mine)\n; Neg(Neg(x)) -> x\n(rewrite (Neg (Neg x)) x :subsume :ruleset mine :name '
                 '"my-neg-neg")\n')
    rc, out, err = run_cli(capsys, "rules", "list", f, "--no-default-rules")
    assert rc == 0, err
    assert out.split()[:2] == ["my-neg-neg", "mine"], out


# ---- counterexamples in the rule's own words, and as JSON

WRONG_VARIADIC = """(ruleset bad)
; Concat(a, b) -> Concat(b, a)   (WRONG)
(rewrite (Concat (Cons a (Cons b (Nil))) ax) (Concat (Cons b (Cons a (Nil))) ax) :ruleset bad :name "concat-swap")
; x - Const(k) -> Const(k) - x   (WRONG)
(rule ((= e (Sub x c)) (= c (Const k))) ((union e (Sub (Relu c) x))) :ruleset bad :name "sub-swap")
; x - Relu(y) -> Relu(y) - x   (WRONG)
(rewrite (Sub x (Relu y)) (Sub (Relu y) x) :ruleset bad :name "sub-relu-swap")
"""


def _names_shown(block: str) -> list[str]:
    import re

    names = re.findall(r"^  (\S.*?) = ", block, re.M)
    names += re.findall(r"UNSOUND: (.*?): (?:values|shape|dtype) ", block)
    return names


def test_a_counterexample_names_only_what_the_rule_writes(capsys, tmp_path):
    import re

    f = tmp_path / "bad.egg"
    f.write_text(WRONG_VARIADIC)
    rc, out, err = run_cli(capsys, "rules", "check", f)
    assert rc == 1, out + err
    assert "3 unsound" in err, out + err
    for block in re.split(r"\n(?=\S)", out.strip()):
        names = _names_shown(block)
        assert names, block
        for name in names:
            assert name in WRONG_VARIADIC, f"{name!r} is not in the rule:\n{block}"
    concat = next(b for b in re.split(r"\n(?=\S)", out) if "concat-swap" in b)
    assert sorted(re.findall(r"^  (a|b) = float32", concat, re.M)) == ["a", "b"], concat  # its two inputs, no more


def test_json_gives_a_counterexamples_inputs_one_by_one(capsys, tmp_path):
    import json

    import numpy as np

    f = tmp_path / "bad.egg"
    f.write_text(WRONG_VARIADIC)
    rc, _, err = run_cli(capsys, "rules", "check", f, "--rule", "concat-swap", "--json", tmp_path / "r.json")
    assert rc == 1, err
    (r,) = json.loads((tmp_path / "r.json").read_text())
    assert r["status"] == "unsound" and "UNSOUND" not in r["detail"]
    cx = r["counterexample"]
    inputs = {i["name"]: i for i in cx["inputs"]}
    assert set(inputs) == {"a", "b"}, cx["inputs"]
    for i in inputs.values():
        assert i["dtype"] == "float32"
        assert np.asarray(i["values"]).shape == tuple(i["shape"]) and len(i["shape"]) >= 1
    # the counterexample is the one the rule fails on: Concat(a, b) is not Concat(b, a)
    a, b = (np.asarray(inputs[k]["values"], dtype=np.float32) for k in "ab")
    ax = cx["values"]["ax"]
    assert np.allclose(cx["before"]["values"], np.concatenate([a, b], axis=ax))
    assert np.allclose(cx["after"]["values"], np.concatenate([b, a], axis=ax))
    assert cx["before"]["shape"] == list(np.concatenate([a, b], axis=ax).shape)
    assert cx["problem"].startswith("(Concat (Cons a (Cons b (Nil))) ax): values differ"), cx["problem"]


# ---- --explain credits a rule with the nodes it removed

NEG_NEG = '(ruleset mine)\n; Neg(Neg(x)) -> x\n(rewrite (Neg (Neg x)) x :ruleset mine :name "my-neg-neg")\n'


@pytest.mark.parametrize("defaults", [True, False])
def test_explain_credits_a_users_rule_with_the_nodes_it_removed(capsys, tmp_path, model_file, defaults):
    import json

    import onnx

    rules, rep = tmp_path / "negneg.egg", tmp_path / "r.json"
    rules.write_text(NEG_NEG)
    out = tmp_path / "m.opt.onnx"
    rc, text, err = run_cli(capsys, "optimize", model_file, "--rules", rules, "--explain", "-o", out,
                            "--report", rep, "-q", *([] if defaults else ["--no-default-rules"]))
    assert rc == 0, err
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == ["Relu"]  # both Negs gone
    ex = json.loads(rep.read_text())["explain"]
    assert sorted(ex["removed"]) == ["Neg#0", "Neg#1"], ex["removed"]
    for node in ("Neg#0", "Neg#1"):
        assert "my-neg-neg" in ex["removed_by"][node], ex["removed_by"]
    assert ex["rules_removing"]["my-neg-neg"] == 2, ex["rules_removing"]
    removed_line = next(ln for ln in text.splitlines() if ln.startswith("removed"))
    assert "Neg#1 (" in removed_line and "my-neg-neg" in removed_line, text
    assert re_line(text, "my-neg-neg"), text


def re_line(text: str, rule: str) -> bool:
    """A line of the rules tables that names the rule with a count."""
    import re

    return bool(re.search(rf"^  {re.escape(rule)}\s+\d+$", text, re.M))


# ---- the report and `make demo`: rewrites first, analysis rules apart

def _unions(rule) -> bool:
    """Whether a rule, as the rule file writes it, adds an equal form (a union): read from
    the text (eqsat.ruletool.model), not from egglog's commands as the report does."""
    return rule.kind in ("rewrite", "birewrite") or any(a and str(a[0]) == "union" for a in rule.actions)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    import json

    import onnx

    from eqsat.cli.main import main
    from eqsat.demo import build_model

    d = tmp_path_factory.mktemp("demo")
    src, out, rep = d / "model.onnx", d / "model.opt.onnx", d / "report.json"
    onnx.save(build_model(), str(src))
    assert main(["optimize", str(src), "-o", str(out), "--report", str(rep), "-q"]) == 0
    return src, out, rep, json.loads(rep.read_text())


def test_the_report_splits_rule_matches_into_rewrites_and_analysis(demo_run):
    from eqsat.core.rulefiles import default_rule_files
    from eqsat.ruletool.model import read_files

    sat = demo_run[3]["saturation"]
    allm, rw, an = sat["rule_matches"], sat["rewrite_matches"], sat["analysis_matches"]
    assert rw and an and not set(rw) & set(an)
    assert {**rw, **an} == allm  # the old key still has every rule
    rules = {r.name: r for r in read_files(default_rule_files()).rules}
    assert all(_unions(rules[n]) for n in rw), [n for n in rw if not _unions(rules[n])]
    assert not any(_unions(rules[n]) for n in an), [n for n in an if _unions(rules[n])]
    assert len(an) > len(rw)  # most of what fires is analysis, which is why it goes apart


def test_demo_summary_shows_the_rewrites_first_and_analysis_apart(demo_run):
    from eqsat.demo import summary

    src, out, rep, report = demo_run
    text = summary(src, out, rep)
    lines = text.splitlines()
    rw = next(i for i, ln in enumerate(lines) if ln.strip().startswith("rewrites fired:"))
    an = next(i for i, ln in enumerate(lines) if ln.strip().startswith("analysis rules fired:"))
    assert rw < an, text
    sat = report["saturation"]
    for name in sat["rewrite_matches"]:
        assert name in lines[rw], text
    for name in sat["analysis_matches"]:
        assert name not in lines[rw], text
    assert f"{len(sat['analysis_matches'])} rules" in lines[an], text


def test_a_users_unnamed_rules_are_split_too(capsys, tmp_path, model_file):
    import json

    f, rep = tmp_path / "u.egg", tmp_path / "r.json"
    f.write_text("(ruleset mine)\n(rewrite (Neg (Neg x)) x :ruleset mine)\n"
                 "(rule ((= e (Neg x))) ((set (dtype e) (F32))) :ruleset mine)\n")
    rc, _, err = run_cli(capsys, "optimize", model_file, "--rules", f, "--no-default-rules", "-o",
                         tmp_path / "o.onnx", "--report", rep, "-q")
    assert rc == 0, err
    sat = json.loads(rep.read_text())["saturation"]
    assert [k.split()[0] for k in sat["rewrite_matches"]] == ["(rewrite"], sat
    assert [k.split()[0] for k in sat["analysis_matches"]] == ["(rule"], sat


def test_a_rule_uniting_an_opaque_op_with_a_value_is_a_clean_error(capsys, tmp_path):
    # (union (Opaque ...) x) made the op's e-class a value: decoding its (Out op 0) raised a
    # KeyError with a traceback
    import onnx
    import onnx.parser

    m = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17, "custom.x" : 1]>
        g (float[4] x) => (float[4] y) { t = custom.x.Foo(x)  y = Relu(t) }""")
    onnx.save(m, tmp_path / "m.onnx")
    (tmp_path / "bad.egg").write_text(
        "(ruleset bad)\n; Opaque(x) -> x, ill-typed: the op, not its output\n"
        '(rule ((= e (Opaque d n (Cons x (Nil)) a s k))) ((union e x)) :ruleset bad :name "opaque-drop")\n')
    rc, _, err = run_cli(capsys, "optimize", tmp_path / "m.onnx", "-o", tmp_path / "o.onnx",
                         "--rules", tmp_path / "bad.egg", "-q")
    assert rc == 1 and not (tmp_path / "o.onnx").exists()
    assert "rewrite its output instead, (Out op k)" in one_error(err)
