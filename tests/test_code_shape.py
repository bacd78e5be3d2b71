"""Functions stay short enough to read: none in eqsat/ or extract/ (methods and nested
functions included) is over MAX_LINES lines, counted as end_lineno - lineno + 1: from the
`def` line to the body's last line, docstring and nested functions in, decorators out."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_egglog  # calls no egglog (tests/conftest.py's guard)

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("eqsat", "extract")
MAX_LINES = 80

# Over the limit still, each to be split next; each entry must still be over the limit
# (test_not_yet_split_is_not_stale), so that the set shrinks. Empty: no function is over it.
NOT_YET_SPLIT: set[tuple[str, str]] = set()


def _functions() -> list[tuple[str, int, str, int]]:
    """(path relative to the repository, first line, name, lines) of every function and method."""
    found = []
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.append((rel, node.lineno, node.name, node.end_lineno - node.lineno + 1))
    return found


def test_no_function_is_over_the_limit():
    over = [f"{rel}:{line} {name} ({n} lines)" for rel, line, name, n in _functions()
            if n > MAX_LINES and (rel, name) not in NOT_YET_SPLIT]
    assert not over, f"functions over {MAX_LINES} lines: split them along their steps:\n" + "\n".join(over)


def test_not_yet_split_is_not_stale():
    longest: dict[tuple[str, str], int] = {}
    for rel, _, name, n in _functions():
        longest[(rel, name)] = max(longest.get((rel, name), 0), n)
    stale = [f"{rel} {name} ({longest[(rel, name)]} lines)" if (rel, name) in longest else f"{rel} {name} (gone)"
             for rel, name in sorted(NOT_YET_SPLIT) if longest.get((rel, name), 0) <= MAX_LINES]
    assert not stale, "no longer over the limit: take them out of NOT_YET_SPLIT:\n" + "\n".join(stale)
