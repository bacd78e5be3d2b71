"""Rule files run by a glob, as in egglog's own test suite: every file in tests/egg/pass
loads on top of the default rules, and the egglog commands of its NAME.checks (a model
fragment, a run, `check`s: commands a rule file may not hold) then hold; every file in
tests/egg/fail fails with exactly the error its first line states. The default rule files
themselves must load."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from egglog import bindings as b

from eqsat.core.rulefiles import Declared, default_rule_files, load_rule_file
from eqsat.core.saturate import Saturator
from eqsat.errors import OptimizeError, RuleError

ROOT = Path(__file__).resolve().parent.parent
PASS = sorted((ROOT / "tests/egg/pass").glob("*.egg"))
FAIL = sorted((ROOT / "tests/egg/fail").glob("*.egg"))


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # error messages show paths relative to the working directory


def test_default_rule_files_load():
    d = Declared()
    eg = b.EGraph()
    for f in default_rule_files():
        load_rule_file(eg, f, d)
    assert "cleanup" in d.rulesets
    assert all(name and "-" in name or name.isalpha() for name in d.rules), "rules have kebab-case names"


@pytest.mark.parametrize("path", PASS, ids=[p.name for p in PASS])
def test_rule_file_passes(path):
    sat = Saturator([path.relative_to(ROOT)])
    try:
        checks = path.with_suffix(".checks")
        if checks.is_file():
            cmds = sat.eg.parse_program(checks.read_text(), filename=str(checks))
            assert any(isinstance(c, b.Check) for c in cmds), "a .checks file checks something"
            sat.run_commands(cmds)  # a `check` that does not hold raises
    finally:
        sat.close()


def test_a_check_that_does_not_hold_fails():
    # the harness above would notice a pass file whose rules do not do what it checks
    sat = Saturator([Path("tests/egg/pass/relu_idempotent.egg")])
    try:
        with pytest.raises(OptimizeError, match=r"\(Sigmoid"):
            sat.run_commands(sat.eg.parse_program(
                '(let $x (Input "x")) (let $r (Relu (Sigmoid $x))) (run-schedule (saturate (run mine)))'
                ' (check (= $r (Sigmoid $x)))'))
    finally:
        sat.close()


@pytest.fixture(scope="module")
def defaults():
    """One e-graph with the default rules for all must-fail files (each is loaded on top of
    a push and popped: loading the default rules for each file would cost seconds)."""
    eg, declared = b.EGraph(), Declared()
    for f in default_rule_files():
        load_rule_file(eg, f, declared)
    return eg, declared


@pytest.mark.parametrize("path", FAIL, ids=[p.name for p in FAIL])
def test_rule_file_fails_with_its_message(path, defaults):
    first = path.read_text().splitlines()[0]
    assert first.startswith("; error: "), "a must-fail file states its error on line 1"
    eg, declared = defaults
    eg.run_program(b.Push(1))
    try:
        with pytest.raises(RuleError) as e:
            load_rule_file(eg, path.relative_to(ROOT), copy.deepcopy(declared))
    finally:
        eg.run_program(b.Pop(b.PanicSpan(), 1))
    assert str(e.value) == first[len("; error: "):]


def test_a_must_fail_file_fails_through_the_saturator_too():
    # the path `eqsat optimize --rules` takes, for one of them
    with pytest.raises(RuleError, match=r"^tests/egg/fail/cmd_output\.egg:3:1: \(output \.\.\.\) is not"):
        Saturator([Path("tests/egg/fail/cmd_output.egg")])


def test_missing_rule_file():
    with pytest.raises(RuleError, match=r"^nope\.egg: no such rule file$"):
        Saturator([Path("nope.egg")])


def test_run_batch_names_are_local_and_value_handles_cross_batches():
    # The encoder sends the model as one batch (one one-shot rule) and the oracles send
    # theirs later: `let` names must not leak from one batch into the next (so a second
    # batch can reuse them), and a class is reached again through its (Value N) handle.
    from eqsat.lang import terms as T

    sat = Saturator([])
    try:
        before = sat.size()  # the rule files' own facts (dtype constants)
        x = T.call("Input", T.string("x"))
        sat.run_batch([T.let("v0", T.call("Relu", x)), T.union(T.value(0), T.var("v0")),
                       T.let("v1", x), T.union(T.value(1), T.var("v1"))])
        sat.run_batch([T.let("v0", T.call("Sigmoid", x)), T.union(T.value(0), T.var("v0"))])
        sizes = dict(sat.run_commands([b.PrintSize(b.PanicSpan(), None)])[0].sizes)
        assert sizes.get("Relu") == 1 and sizes.get("Sigmoid") == 1
        assert sizes.get("Value") == 2
        # batch 2's union went through the handle into value 0's class (check raises if not)
        sat.run_commands(sat.eg.parse_program('(check (= (Value 0) (Relu (Input "x"))) (= (Value 0) (Sigmoid (Input '
                                              '"x"))))'))
        with pytest.raises(Exception, match='Value 1'):
            sat.run_commands(sat.eg.parse_program('(check (= (Value 1) (Relu (Input "x"))))'))
        assert sat.size() - before == 3  # Input, Relu, Sigmoid: handles are not counted as e-nodes
        assert not any(name.startswith("$") for name in sizes), "no egglog globals"
    finally:
        sat.close()
