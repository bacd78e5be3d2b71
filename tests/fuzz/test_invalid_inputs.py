"""Invalid input through the `eqsat` command line (tests/fuzz/invalid_props.py): spoiled
model files, external data, rule files, saved e-graphs and choice files, environment
variables and arguments. Each gives exit 1 or 2, one error line, nothing left behind; or,
where the input was valid after all, exit 0 and a correct output. A bounded, derandomized
number of examples per property; `make fuzz` runs them long."""

from __future__ import annotations

import pytest

from .registry import make_test

pytestmark = pytest.mark.fuzz

test_model_file_is_clean = make_test("model_file_is_clean")
test_external_data_is_clean = make_test("external_data_is_clean")
test_rule_file_is_clean = make_test("rule_file_is_clean")
test_egraph_file_is_clean = make_test("egraph_file_is_clean")
test_environment_is_clean = make_test("environment_is_clean")
test_arguments_are_clean = make_test("arguments_are_clean")
