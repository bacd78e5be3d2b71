"""Valid models drawn at random (tests/fuzz/strategies.py) through eqsat: the optimized model
computes what the original computes, or eqsat refuses cleanly (tests/fuzz/valid_props.py).
A bounded, derandomized number of examples per property; `make fuzz` runs them long."""

from __future__ import annotations

import pytest

from .registry import make_test

pytestmark = pytest.mark.fuzz

test_optimize_keeps_outputs = make_test("optimize_keeps_outputs")
test_cli_keeps_outputs = make_test("cli_keeps_outputs")
test_opaque_ops_kept = make_test("opaque_ops_kept")
