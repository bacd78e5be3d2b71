"""When the oracle runs between saturation rounds (eqsat.core.saturate.HOOK_EVERY): after a round
whose rules changed nothing, after HOOK_EVERY rounds without it, and after the last round a
limit allows; and the final e-graph is not serialized again when the oracle's last snapshot
is it. Each test checks the optimized model's numbers under onnxruntime."""

from __future__ import annotations

import pytest

import eqsat.core.pipeline as pipeline
from eqsat.core.pipeline import Options, optimize
from eqsat.core.saturate import HOOK_EVERY, Limits
from eqsat.errors import OptimizeError

from .conftest import assert_same_outputs, assert_verified, ops, parse_model

# Transpose pairs cancel over several rounds (one pair per round from the inside out), and
# the Add of two initializers is the oracle's to fold.
MODEL = """
    <ir_version: 8, opset_import: ["" : 18]>
    agraph (float[2, 3] x) => (float[2, 3] y) <float[2, 3] a = {1, 2, 3, 4, 5, 6}, float[2, 3] b = {1, 1, 1, 1, 1, 1}> {
        t1 = Transpose <perm = [1, 0]> (x)
        t2 = Transpose <perm = [1, 0]> (t1)
        t3 = Transpose <perm = [1, 0]> (t2)
        t4 = Transpose <perm = [1, 0]> (t3)
        c = Add(a, b)
        y = Mul(t4, c)
    }"""


def _counting_serialize(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = pipeline.serialize

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "serialize", counted)
    return calls


def test_oracle_waits_for_the_rules_and_its_last_snapshot_is_reused(monkeypatch):
    m = parse_model(MODEL)
    calls = _counting_serialize(monkeypatch)
    res = optimize(m, Options())
    sat = res.report["saturation"]
    rounds = sat["rounds"]
    assert sat["stop_reason"] == "saturated"
    assert rounds[-1]["hooks"]  # saturation is only declared after the oracle found nothing
    gaps = 0
    for r in rounds:  # never more than HOOK_EVERY rounds in a row without the oracle
        gaps = 0 if r["hooks"] else gaps + 1
        assert gaps < HOOK_EVERY
    assert not all(r["hooks"] for r in rounds)  # it skipped rounds whose rules were still changing
    assert len(calls) == sum(r["hooks"] for r in rounds)  # no extra serialization at the end
    assert ops(res.model) == ["Mul"]
    assert_same_outputs(m, res.model)
    assert_verified(m, res)


def test_the_oracle_runs_after_the_only_round_a_limit_allows(monkeypatch):
    m = parse_model(MODEL)
    calls = _counting_serialize(monkeypatch)
    res = optimize(m, Options(limits=Limits(iter_limit=1)))
    sat = res.report["saturation"]
    assert sat["stop_reason"] == "iteration-limit"
    assert [r["hooks"] for r in sat["rounds"]] == [True]
    assert "Add" not in ops(res.model)  # folded although the rules were still changing
    assert len(calls) == 2  # the oracle's snapshot, then the final e-graph (changed since)
    assert_same_outputs(m, res.model)
    assert_verified(m, res)


def test_rule_files_loaded_in_one_process_are_kept_to_a_bound(tmp_path):
    """A process that optimized with many rule files once kept an e-graph (about 575 MiB with
    the default rules) for each, and a test-suite worker was killed for memory. Rule files now
    load on top of the cached default rules (or prelude) and are popped when done; the cached
    e-graphs stay at most MAX_LOADED, the least recently used dropped first, and the default
    rules' stays while in use."""
    import eqsat.core.saturate as sat

    files = []
    for k in range(sat.MAX_LOADED + 2):
        f = tmp_path / f"r{k}.egg"
        f.write_text(f'; Relu(Relu(x)) -> Relu(x)\n(rewrite (Relu (Relu x)) (Relu x) :name "mine-{k}")\n')
        files.append(f)
    default = sat.Saturator()
    default.close()
    for f in files:
        s = sat.Saturator([f], default_rules=False)
        s.close()
        sat.Saturator().close()  # the default rules, used between
    assert len(sat._LOADED) <= sat.MAX_LOADED
    assert sat._key(True) in sat._LOADED


def test_a_rule_file_loads_on_top_of_the_cached_default_rules(tmp_path, monkeypatch):
    """`--rules FILE` loads FILE alone on top of the default rules' cached e-graph (each
    default file read once a process, whatever the user files): loading them again cost 2.5 s
    an optimization. The user's declarations live until the Saturator closes: the default
    rules' e-graph and declarations are as before, and the same file loads again; a file
    that fails half-way leaves nothing of its first half behind."""
    import eqsat.core.saturate as sat
    from eqsat.errors import RuleError

    sat.Saturator().close()  # the default rules, cached
    good = tmp_path / "good.egg"
    good.write_text('(ruleset mine)\n; Relu(Relu(x)) -> Relu(x)\n(rewrite (Relu (Relu x)) (Relu x) :ruleset mine '
                    ':name "mine-relu-relu")\n')
    bad = tmp_path / "bad.egg"  # its ruleset and first rule run before the unknown constructor fails
    bad.write_text('(ruleset mine)\n; Relu(Relu(x)) -> Relu(x)\n(rewrite (Relu (Relu x)) (Relu x) :ruleset mine '
                   ':name "mine-relu-relu")\n(rewrite (Relu x) (Nope x) :ruleset mine :name "mine-nope")\n')
    loaded: list[str] = []
    real = sat.load_rule_file
    monkeypatch.setattr(sat, "load_rule_file", lambda eg, path, *a, **k: (loaded.append(str(path)),
                                                                          real(eg, path, *a, **k))[1])
    with pytest.raises(RuleError, match=r"bad\.egg:4:\d+: unknown constructor or function Nope"):
        sat.Saturator([bad])
    for _ in range(2):
        s = sat.Saturator([good])
        try:
            assert s.user_rulesets == ["mine"] and s.declared.rules["mine-relu-relu"] == "mine"
            s.run_commands(s.eg.parse_program('(let $r (Relu (Relu (Input "x")))) (run-schedule (saturate (run mine)))'
                                              ' (check (= $r (Relu (Input "x"))))'))
        finally:
            s.close()
    assert loaded == [str(bad), str(good), str(good)]
    d = sat.Saturator()
    try:
        assert d.user_rulesets == [] and "mine-relu-relu" not in d.declared.rules and "mine" not in d.declared.rulesets
        with pytest.raises(OptimizeError):  # no ruleset `mine` in the default rules' e-graph
            d.run_commands(d.eg.parse_program("(run-schedule (run mine))"))
    finally:
        d.close()
