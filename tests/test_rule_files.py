"""Rule files run by a glob, as in egglog's own test suite: every file in tests/egg/pass
loads (and its `check` commands hold) on top of the default rules; every file in
tests/egg/fail fails with exactly the error its first line states. The default rule files
themselves must load."""

from __future__ import annotations

from pathlib import Path

import pytest
from egglog import bindings as b

from eqsat.errors import RuleError
from eqsat.rulefiles import Declared, default_rule_files, load_rule_file
from eqsat.saturate import Saturator

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
    Saturator([path.relative_to(ROOT)])


@pytest.mark.parametrize("path", FAIL, ids=[p.name for p in FAIL])
def test_rule_file_fails_with_its_message(path):
    first = path.read_text().splitlines()[0]
    assert first.startswith("; error: "), "a must-fail file states its error on line 1"
    with pytest.raises(RuleError) as e:
        Saturator([path.relative_to(ROOT)])
    assert str(e.value) == first[len("; error: "):]


def test_missing_rule_file():
    with pytest.raises(RuleError, match=r"^nope\.egg: no such rule file$"):
        Saturator([Path("nope.egg")])
