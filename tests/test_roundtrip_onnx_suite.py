"""Every model that ships with the onnx wheel round-trips through the e-graph with no rules:
same outputs (exactly), same names and dtypes, and the onnx checker accepts the result.

Models run under onnxruntime; where onnxruntime cannot run the original, under onnx's
reference evaluator; a case neither can run is skipped with both reasons.
"""

from __future__ import annotations

import os

import pytest

from eqsat.core.pipeline import Options, optimize
from eqsat.verification.conformance import check_case, collect_node_cases, data_cases, node_cases

from .conftest import sample

_OPTS = Options(default_rules=False)


def _roundtrip(model):
    return optimize(model, _OPTS).model


def _run(case):
    outcome = check_case(case, _roundtrip)
    if outcome.status == "skipped":
        pytest.skip(outcome.reason)
    assert outcome.status == "passed", outcome.reason


def _collected() -> list:
    """conformance.collect_node_cases(), generated once for every process of a test run with
    this version of onnx (each pytest-xdist worker collects this module, and both passes of
    `make test` do): kept pickled in .pytest_cache/eqsat/, the first process to come
    generating them under a lock while the others wait. The cases' data are inputs here (a
    round trip is compared with its original, not with the outputs onnx computed), so a
    pass on another numpy or Python reads them too."""
    import fcntl
    import pickle
    from pathlib import Path

    import numpy as np
    import onnx

    folder = Path(__file__).resolve().parents[1] / ".pytest_cache" / "eqsat"
    folder.mkdir(parents=True, exist_ok=True)
    tag = f"onnx{onnx.__version__}-numpy{np.__version__.split('.')[0]}"
    path = folder / f"node-cases-{tag}.pickle"
    with open(folder / f"node-cases-{tag}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            with open(path, "rb") as f:
                return pickle.load(f)
        cases = collect_node_cases()
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(cases, protocol=pickle.HIGHEST_PROTOCOL))
        tmp.replace(path)
        return cases


# All of them; a deterministic sample of $EQSAT_ROUNDTRIP_SAMPLE where set (the second,
# egglog-14 pass of `make test` checks the bindings on a sample, the first pass runs all).
COLLECTED = _collected()
DATA = sample(list(data_cases()), "EQSAT_ROUNDTRIP_SAMPLE")
NODE = sample(list(node_cases(COLLECTED)), "EQSAT_ROUNDTRIP_SAMPLE")


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
    assert len(data) >= 140 and sum(1 for _ in node_cases(COLLECTED)) >= 1500
