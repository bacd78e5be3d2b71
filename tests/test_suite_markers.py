"""The `no_egglog` marker's guard (tests/conftest.py): while a marked test runs, every public
name of `egglog.bindings` raises, so a marked test that comes to use egglog fails in the
egglog-13 pass (the egglog-14 pass of `make test` leaves marked tests out)."""

from __future__ import annotations

import pytest

from .conftest import parse_model, refuse_egglog, roundtrip

MODEL = """<ir_version: 8, opset_import: ["": 17]>
g (float[2, 8] x) => (float[2, 8] y) { y = Relu(x) }"""


def _chain(e: BaseException | None) -> str:
    out = []
    while e is not None:
        out.append(str(e))
        e = e.__cause__ or e.__context__
    return " / ".join(out)


def test_the_guard_makes_an_e_graph_round_trip_fail():
    m = parse_model(MODEL)
    roundtrip(m)  # runs without the guard
    with pytest.MonkeyPatch.context() as mp:
        refuse_egglog(mp)
        with pytest.raises(BaseException) as info:  # noqa: B017 - eqsat may wrap what egglog's stand-in raised
            roundtrip(m)
    assert "marked no_egglog called egglog" in _chain(info.value), _chain(info.value)
    roundtrip(m)  # and the bindings are back


@pytest.mark.no_egglog
def test_a_marked_test_runs_under_the_guard():
    import egglog.bindings as b

    with pytest.raises(AssertionError, match="marked no_egglog called egglog"):
        b.EGraph()
