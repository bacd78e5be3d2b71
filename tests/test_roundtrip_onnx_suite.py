"""Every model that ships with the onnx wheel round-trips through the e-graph with no rules:
same outputs (exactly), same names and dtypes, and the onnx checker accepts the result.

Models run under onnxruntime; where onnxruntime cannot run the original, under onnx's
reference evaluator; a case neither can run is skipped with both reasons.
"""

from __future__ import annotations

import pytest

from eqsat.core.pipeline import Options, optimize
from eqsat.verification.conformance import check_case, data_cases, node_cases

from .conftest import sample

_OPTS = Options(default_rules=False)


def _roundtrip(model):
    return optimize(model, _OPTS).model


def _run(case):
    outcome = check_case(case, _roundtrip)
    if outcome.status == "skipped":
        pytest.skip(outcome.reason)
    assert outcome.status == "passed", outcome.reason


# All of them; a deterministic sample of $EQSAT_ROUNDTRIP_SAMPLE where set (the second,
# egglog-14 pass of `make test` checks the bindings on a sample, the first pass runs all).
DATA = sample(list(data_cases()), "EQSAT_ROUNDTRIP_SAMPLE")
NODE = sample(list(node_cases()), "EQSAT_ROUNDTRIP_SAMPLE")


@pytest.mark.parametrize("case", DATA, ids=[c.name for c in DATA])
def test_backend_data_model_roundtrips(case):
    _run(case)


@pytest.mark.parametrize("case", NODE, ids=[c.name for c in NODE])
def test_node_case_roundtrips(case):
    _run(case)


def test_the_suites_are_all_there():
    data = list(data_cases())  # the whole suite, whatever the sample
    suites = {c.name.split("/")[0] for c in data}
    assert suites == {"light", "pytorch-converted", "pytorch-operator", "simple"}
    assert len(data) >= 140 and sum(1 for _ in node_cases()) >= 1500
