"""A rule test that compares an optimized model with the original under onnxruntime on its own
inputs (`assert_same_outputs`) also runs eqsat's verification on it, as `eqsat optimize` does:
a rewrite that is wrong on inputs the test did not draw must not pass.

The tests are read, not run: `ast` finds each function of tests/rules/*.py that calls
`assert_same_outputs`; the function must also call `assert_verified`, `assert_written` or
`check_rewrite` (or a test file's wrapper of it, whose own body calls one), or the call's line
or the line above it must say why the model is verified elsewhere ("# verified: ...", such as
a model that `eqsat.optimize`, which verifies, wrote in a fixture)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RULE_TESTS = Path(__file__).resolve().parent
VERIFYING = {"assert_verified", "assert_written", "check_rewrite"}


def _called(node: ast.AST) -> set[str]:
    """The names of the functions `node` calls (f(...) and m.f(...) both give f)."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            out.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return out


def unverified_comparisons(path: Path) -> list[str]:
    """'FILE:LINE function' for each function of `path` that compares outputs and verifies nothing."""
    source = path.read_text()
    lines = source.splitlines()
    funcs = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)]
    verifying = set(VERIFYING)
    for _ in range(3):  # a file's wrappers of the verifying helpers (check, check_shared, ...)
        verifying |= {f.name for f in funcs if _called(f) & verifying}
    out = []
    for f in funcs:
        if f.name == "assert_same_outputs" or _called(f) & verifying:
            continue
        for n in ast.walk(f):
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "assert_same_outputs"
                    and not any("# verified:" in ln for ln in lines[max(0, n.lineno - 2):n.lineno])):
                out.append(f"{path.name}:{n.lineno} {f.name}")
    return out


@pytest.mark.parametrize("path", sorted(RULE_TESTS.glob("test_*.py")), ids=lambda p: p.name)
def test_every_comparison_of_an_optimized_model_is_verified(path):
    assert unverified_comparisons(path) == []


def test_the_scan_finds_a_comparison_without_verification(tmp_path):
    src = tmp_path / "test_x.py"
    src.write_text("def test_a(m, res):\n    assert_same_outputs(m, res.model)\n\n"
                   "def test_b(m, res):\n    assert_same_outputs(m, res.model)\n    assert_verified(m, res)\n\n"
                   "def test_c(m, opt):\n    # verified: by eqsat.optimize\n    assert_same_outputs(m, opt)\n\n"
                   "def check(m):\n    check_rewrite(m, [])\n\n"
                   "def test_d(m, res):\n    check(m)\n    assert_same_outputs(m, res.model)\n")
    assert unverified_comparisons(src) == ["test_x.py:2 test_a"]
