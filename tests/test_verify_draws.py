"""Verification's draws reach the values where a wrong program differs (eqsat/verification/feeds.py and
the edge cases of eqsat/verification/__init__.py): each test pairs a model with a program that is wrong
only on values the draws once never held, and checks that verification refuses it and passes the
original against itself."""

from __future__ import annotations

import pytest

from eqsat.verification import verify
from eqsat.verification.feeds import Feeds

from .conftest import parse_model

H18 = '<ir_version: 8, opset_import: ["" : 18]>\n'


def _refused_and_passed(right: str, wrong: str, why: str):
    m = parse_model(H18 + right)
    v = verify(m, parse_model(H18 + wrong))
    assert v.status == "failed" and why in v.detail, v.detail
    ok = verify(m, m)
    assert ok.status == "passed", ok.detail
    return v


@pytest.mark.parametrize("op", [
    ("float[4, 5] x, int64[4, 5] i", "float[4, 5] y", "y = GatherElements <axis = 1> (x, {i})"),
    ("float[4, 5] x, int64[1, 5] i, float[1, 5] u", "float[4, 5] y", "y = ScatterElements <axis = 0> (x, {i}, u)"),
    ("int64[6] i", "float[6, 4] y", """d = Constant <value = int64 {4}> ()
                                        v = Constant <value = float[2] {0.0, 1.0}> ()
                                        y = OneHot({i}, d, v)"""),
])
def test_an_index_takes_negative_values_where_its_op_allows_them(op):
    # GatherElements, ScatterElements and OneHot take indices in [-n, n); drawn in [0, n)
    # (OneHot's in [0, 2), its depth unread), |i| taken for i passed
    ins, outs, body = op
    right = f"g ({ins}) => ({outs}) {{ {body.replace('{i}', 'i')} }}"
    wrong = f"g ({ins}) => ({outs}) {{ a = Abs(i)\n {body.replace('{i}', 'a')} }}"
    v = _refused_and_passed(right, wrong, "")
    assert v.inputs.startswith("i an index in [-"), v.inputs  # |i| is out of range or another element


def test_a_one_hot_index_spans_the_depth():
    m = parse_model(H18 + """g (int64[6] i) => (float[6, 4] y) {
                                 d = Constant <value = int64 {4}> ()
                                 v = Constant <value = float[2] {0.0, 1.0}> ()
                                 y = OneHot(i, d, v) }""")
    assert "i an index in [-4, 4)" in Feeds(m).describe()
