"""Shared helpers: building models from ONNX text, optimizing, comparing under onnxruntime."""

from __future__ import annotations

import atexit
import functools
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest

from eqsat.core.pipeline import Options, optimize
from eqsat.verification import compare, random_inputs, run


def parse_model(text: str) -> onnx.ModelProto:
    m = onnx.parser.parse_model(text)
    onnx.checker.check_model(m)
    return m


def roundtrip(model: onnx.ModelProto, **opts) -> onnx.ModelProto:
    """Optimize with no rules at all: the e-graph round trip alone."""
    return optimize(model, Options(default_rules=False, **opts)).model


def assert_same_outputs(a: onnx.ModelProto, b: onnx.ModelProto, feeds=None, dims=None, rtol=0.0, atol=0.0,
                        ort_optimize=True):
    """`ort_optimize=False` runs both with onnxruntime's own optimizations off (each as written)."""
    onnx.checker.check_model(b)
    feeds = feeds if feeds is not None else random_inputs(a, dims)
    bad = compare(run(a, feeds, ort_optimize), run(b, feeds, ort_optimize), rtol, atol)
    assert not bad, "; ".join(map(str, bad))


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """`eqsat ARGS...` in this process: (exit code, stdout, stderr)."""
    from eqsat.cli.main import main

    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def rules_check(capsys, tmp_path, body: str, *args, ruleset: str = "r") -> tuple[int, str, str]:
    """`eqsat rules check ARGS...` on a file `tmp_path/RULESET.egg` holding `(ruleset RULESET)`, a
    blank line and `body` (a body that opens with its `; before -> after` line has its rule on
    line 4): (exit code, stdout, stderr)."""
    f = tmp_path / f"{ruleset}.egg"
    f.write_text(f"(ruleset {ruleset})\n\n" + body)
    return run_cli(capsys, "rules", "check", f, *args)


def assert_one_unsound(capsys, tmp_path, body: str, *args, ruleset: str = "r") -> str:
    """`rules_check` exits 1 with one rule unsound. Returns stdout."""
    rc, out, err = rules_check(capsys, tmp_path, body, *args, ruleset=ruleset)
    assert rc == 1, out + err
    assert "1 unsound" in err, err
    return out


def optimize_cli(capsys, tmp_path, model: onnx.ModelProto, *args, rules: str = ""):
    """`eqsat optimize -q ARGS...` of `model` (saved as tmp_path/m.onnx, written to o.onnx), with
    `rules` (egglog text, saved as bad.egg) as `--rules` where given: (exit code, stderr, the
    written model or None)."""
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(model, src)
    if rules:
        (tmp_path / "bad.egg").write_text(rules)
        args = ("--rules", tmp_path / "bad.egg", *args)
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "-q", *args)
    return rc, err, onnx.load(out) if out.exists() else None


def assert_refused_or_right(capsys, tmp_path, model: onnx.ModelProto, right, *args, rules: str = ""):
    """`optimize_cli` either exits 0 and writes a model for which `right(written)` holds (it
    asserts what the written model must compute), or exits non-zero and writes nothing.
    Returns the written model or None."""
    rc, err, out = optimize_cli(capsys, tmp_path, model, *args, rules=rules)
    assert (rc == 0) == (out is not None), f"exit {rc}, written: {out is not None}; {err}"
    if out is not None:
        right(out)
    return out


def assert_refused(capsys, tmp_path, model: onnx.ModelProto, *args, rules: str = "") -> str:
    """`optimize_cli` exits 1 and writes nothing. Returns stderr."""
    rc, err, out = optimize_cli(capsys, tmp_path, model, *args, rules=rules)
    assert rc == 1 and out is None, err
    return err


def assert_wrong_never_written(capsys, tmp_path, model: onnx.ModelProto, wrong: onnx.ModelProto, *args,
                               rules: str = "", right=None):
    """Verification passes `model` against itself and fails `wrong`; and `eqsat optimize` of
    `model` (`optimize_cli`, with `rules`) exits 1 and writes nothing, or, where `right` is
    given, may instead exit 0 writing a model for which `right(written)` holds (it asserts that
    the written model computes the original). Returns the failed Verification of `wrong`."""
    from eqsat.verification import verify

    assert verify(model, model).status == "passed"
    v = verify(model, wrong)
    assert v.status == "failed", v.detail
    if right is None:
        assert_refused(capsys, tmp_path, model, *args, rules=rules)
    else:
        assert_refused_or_right(capsys, tmp_path, model, right, *args, rules=rules)
    return v


def one_error(err: str) -> str:
    """The one `eqsat: error:` line of a command's stderr (and no traceback)."""
    lines = [ln for ln in err.splitlines() if ln.startswith("eqsat: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def sample(items: list, env: str) -> list:
    """All items, or, where the environment variable `env` holds a positive number n smaller
    than their count, a deterministic sample of n of them."""
    n = int(os.environ.get(env, "0") or 0)
    if n <= 0 or n >= len(items):
        return items
    return random.Random(0).sample(items, n)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def portable_weights(monkeypatch):
    """onnxruntime's uint8 x int8 kernels taken to saturate (AVX2 without VNNI), whatever this
    machine's do: rules/qdq.egg then writes what is exact on every CPU (exact-kernel); the QDQ
    test modules use it for every test, and tests of the int8-dot-product form set
    EQSAT_U8S8_EXACT=1 themselves."""
    monkeypatch.setenv("EQSAT_U8S8_EXACT", "0")


@pytest.fixture
def block(monkeypatch) -> int:
    """The NCHWc layout on (the default): onnxruntime's block size on this machine, probed
    afresh (0 where it has no blocked kernels)."""
    from eqsat.backends.ort.target import nchwc_block

    monkeypatch.delenv("EQSAT_NCHWC", raising=False)
    monkeypatch.delenv("EQSAT_NCHWC_BLOCK", raising=False)
    nchwc_block.cache_clear()
    b = nchwc_block()
    yield b
    nchwc_block.cache_clear()


@pytest.fixture
def blocked(block) -> int:
    """`block`, where onnxruntime has blocked kernels (the test is skipped elsewhere)."""
    if not block:
        pytest.skip("onnxruntime has no NCHWc kernels on this CPU")
    return block


def rule_test_profile() -> str:
    """The hardware profile rule tests optimize with unless they name one: the shipped AVX-512
    profile (cpu.json) with the NCHWc block in use (this machine's, or EQSAT_NCHWC_BLOCK's). A
    test of a rule's choice then sees the same figures on every machine, where the default
    `cpu` would pick cpu-avx2.json on an AVX2 one; and onnxruntime runs the blocked ops written."""
    from eqsat.backends.ort.target import nchwc_block

    return _profile_with_block(nchwc_block())


@functools.cache
def _profile_with_block(block: int) -> str:
    from eqsat.extract.costs.roofline import HARDWARE_DIR

    prof = json.loads((HARDWARE_DIR / "cpu.json").read_text())
    if block:
        prof["layouts"]["nchwc"]["block"] = block
    prof["name"] = f"cpu-test-block{block}"
    folder = tempfile.mkdtemp(prefix="eqsat-tests-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # one a process, gone with it
    path = Path(folder) / f"{prof['name']}.json"
    path.write_text(json.dumps(prof))
    return str(path)


def optimized(model: onnx.ModelProto, **opts):
    """Optimize with the default rules (Options fields as keywords), on `rule_test_profile()`
    unless `hardware` is given; returns the Result."""
    opts.setdefault("hardware", rule_test_profile())
    return optimize(model, Options(**opts))


def op_list(model: onnx.ModelProto) -> list[str]:
    """Op types in graph order, with the domain for non-standard ones (com.microsoft.FusedConv)."""
    return [(f"{n.domain}." if n.domain not in ("", "ai.onnx") else "") + n.op_type for n in model.graph.node]


def check_rewrite(model: onnx.ModelProto, expect_ops, fired=(), not_fired=(), feeds=None, dims=None,
                  rtol=1e-4, atol=1e-5, ort_optimize=True, unverified: str = "", **opts):
    """Optimize `model` and check: the op list (sorted, so graph order does not matter) is
    `expect_ops`; each rule in `fired` matched and each in `not_fired` did not; the onnx
    checker accepts the result; onnxruntime gives the original's outputs; and eqsat's own
    verification passes (`assert_verified`), unless `unverified` says why it cannot.
    `expect_ops` may be a tuple of op lists, any of which is right. Returns the Result."""
    res = optimized(model, **opts)
    got = sorted(op_list(res.model))
    alternatives = expect_ops if isinstance(expect_ops, tuple) else (expect_ops,)
    assert got in [sorted(a) for a in alternatives], f"ops after optimization: {got}"
    matches = res.report["saturation"]["rule_matches"]
    for name in fired:
        assert matches.get(name, 0) > 0, f"rule {name} did not fire; fired: {sorted(matches)}"
    for name in not_fired:
        assert matches.get(name, 0) == 0, f"rule {name} fired but must not"
    assert_same_outputs(model, res.model, feeds, dims, rtol=rtol, atol=atol, ort_optimize=ort_optimize)
    if not unverified:
        assert_verified(model, res, dims)
    return res


def assert_verified(model: onnx.ModelProto, res, dims=None) -> None:
    """eqsat's verification (eqsat.verification.verify, as `eqsat optimize` runs it, in this
    process) passes on `res` (a Result, or a model such as `roundtrip`'s) against `model`: first
    with every symbolic size free, as the CLI without --dim; where that is "not possible", with
    `dims` bound, as with --dim. A rule test whose model the CLI refuses (an op that refuses the
    sizes verification tries) passed onnxruntime's comparison on the test's own inputs alone."""
    import time

    from eqsat.verification import verify

    out, pairs = (res, None) if isinstance(res, onnx.ModelProto) else (res.model, res.random_pairs)
    start = time.perf_counter()
    v = verify(model, out, random_pairs=pairs)
    if v.status == "not possible" and dims:
        v = verify(model, out, dims=dims, random_pairs=pairs)
    VERIFY_SECONDS.append(time.perf_counter() - start)
    assert v.status == "passed", f"eqsat's verification {v.status}: {v.detail}"


def assert_written(model: onnx.ModelProto, res) -> None:
    """What `eqsat optimize` writes for `res` (a Result of `optimized`) passes its verification:
    `res.model` itself, or, where verification refuses a QDQ model's requantizing fusions, the
    first program with fewer that passes (eqsat.api.finish's retries), which then replaces
    `res.model` and `res.report`. For the tests of a rule whose own program verification
    refuses (`check_rewrite(..., unverified=...)`), so that the program written is verified."""
    import time

    from eqsat.api import Checks, finish

    start = time.perf_counter()
    finish(model, res, {}, Checks())  # raises OptimizeError where nothing would be written
    VERIFY_SECONDS.append(time.perf_counter() - start)
    assert res.report["verification"]["status"] == "passed", res.report["verification"]


def refuse_egglog(monkeypatch) -> None:
    """Every public name of `egglog.bindings` raises, until `monkeypatch` undoes it."""
    import egglog.bindings as bindings

    def refuse(*_args, **_kwargs):
        raise AssertionError("a test marked no_egglog called egglog; remove the marker")

    for name in dir(bindings):
        if not name.startswith("_") and callable(getattr(bindings, name)):
            monkeypatch.setattr(bindings, name, refuse)


def pytest_configure(config):
    config.addinivalue_line("markers", "no_egglog: calls no egglog (the guard below fails it otherwise); left out of "
                                       "`make test`'s egglog-14 pass")
    config.addinivalue_line("markers", "egglog_incidental: the test module's subject is a part of eqsat that calls "
                                       "no egglog (EGGLOG_INCIDENTAL below); left out of `make test`'s egglog-14 pass")


# The egglog-14 pass of `make test` checks eqsat against egglog 14's bindings. A test module
# whose subject is a part of eqsat that calls no egglog itself runs in the egglog-13 pass only:
# it optimizes models, if at all, to have something to verify, time, plan, report or write,
# and what egglog does on them is the subject of other modules, which run in both passes.
# The subjects, and the modules (by file name) that test them:
EGGLOG_INCIDENTAL = {
    "verification (eqsat/verification: draws, tolerances, reach, isolation, conformance)": (
        "test_verify.py", "test_verify_draws.py", "test_verify_fp16.py", "test_verify_reach.py",
        "test_verify_reach2.py", "test_verify_tolerance.py", "test_crash_isolation.py", "test_conformance.py",
        "test_verify_paired.py", "test_verify_review.py", "test_verify_ties.py", "test_verify_reach4.py"),
    "the command line's checks of its inputs, outputs and environment before and after the work": (
        "test_env_settings.py", "test_settings.py", "test_output_checks.py", "test_output_commit.py",
        "test_external_paths.py", "test_wellformed.py", "test_large_model.py"),
    "report formats (eqsat/report.py)": ("test_report.py",),
    "the memory planner (eqsat/plan)": ("test_plan.py", "test_plan_crafted.py", "test_plan_property.py"),
    "cost models measured on onnxruntime, plugins, and compare-costs' timing": (
        "test_measure.py", "test_latency.py", "test_calibrate.py", "test_learned.py", "test_plugins.py",
        "test_compare_costs.py", "test_compare_costs_errors.py"),
    "benchmark harnesses (benchmarks/)": ("test_bench_harness.py",),
}
# What such a module may not hold (tests/test_suite_markers.py checks each): a rule test
# (check_rewrite, rules_check, assert_one_unsound, fired=/not_fired=: every rule stays exercised
# on egglog 14); an import of egglog, or of a module of eqsat whose source imports egglog (or a
# module inside such a package); nor may it live in tests/rules or tests/egg, or be the
# round-trip suite (tests/test_roundtrip_onnx_suite.py, whose sample runs on egglog 14).


def pytest_collection_modifyitems(config, items):
    """Marks each test of an EGGLOG_INCIDENTAL module `egglog_incidental`."""
    names = {n for mods in EGGLOG_INCIDENTAL.values() for n in mods}
    for item in items:
        if item.path.name in names and item.path.parent == Path(__file__).parent:
            item.add_marker(pytest.mark.egglog_incidental)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test marked `no_egglog` calls nothing of egglog's bindings in this process: each
    public name of `egglog.bindings` raises while it runs. `make test`'s egglog-14 pass leaves
    such tests out (they would run the same code twice); this guard, in the egglog-13 pass,
    fails one that came to use egglog. It cannot see into child processes: tests that start
    eqsat in a subprocess (a CLI run, an isolated worker) are not marked."""
    if item.get_closest_marker("no_egglog") is None:
        return (yield)
    with pytest.MonkeyPatch.context() as mp:
        refuse_egglog(mp)
        return (yield)


VERIFY_SECONDS: list[float] = []  # the time assert_verified took, each call (tests/conftest.py's summary)


def pytest_terminal_summary(terminalreporter):
    if VERIFY_SECONDS:
        terminalreporter.write_line(f"eqsat verification in rule tests: {len(VERIFY_SECONDS)} calls, "
                                    f"{sum(VERIFY_SECONDS):.1f} s")
