"""Shared helpers: building models from ONNX text, optimizing, comparing under onnxruntime."""

from __future__ import annotations

import os
import random

import numpy as np
import onnx
import onnx.parser
import pytest

from eqsat.pipeline import Options, optimize
from eqsat.verify import compare, random_inputs, run


def parse_model(text: str) -> onnx.ModelProto:
    m = onnx.parser.parse_model(text)
    onnx.checker.check_model(m)
    return m


def roundtrip(model: onnx.ModelProto, **opts) -> onnx.ModelProto:
    """Optimize with no rules at all: the e-graph round trip alone."""
    return optimize(model, Options(default_rules=False, **opts)).model


def assert_same_outputs(a: onnx.ModelProto, b: onnx.ModelProto, feeds=None, dims=None, rtol=0.0, atol=0.0):
    onnx.checker.check_model(b)
    feeds = feeds if feeds is not None else random_inputs(a, dims)
    bad = compare(run(a, feeds), run(b, feeds), rtol, atol)
    assert not bad, "; ".join(map(str, bad))


def ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def sample(items: list, env: str = "EQSAT_SAMPLE") -> list:
    """All items, or a deterministic sample of $EQSAT_SAMPLE of them (CI bounds slow tests)."""
    n = int(os.environ.get(env, "0") or 0)
    if n <= 0 or n >= len(items):
        return items
    return random.Random(0).sample(items, n)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
