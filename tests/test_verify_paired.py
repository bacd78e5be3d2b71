"""eqsat.verification.paired: the optimized model run beside the original gives what running it after would."""

from __future__ import annotations

import threading

import pytest

from eqsat.verification.paired import RunAhead


class Recorder:
    def __init__(self, fail_on: object = None) -> None:
        self.calls: list[tuple[int, str]] = []
        self.fail_on = fail_on

    def __call__(self, feeds: dict) -> dict:
        self.calls.append((id(feeds), threading.current_thread().name))
        if feeds.get("x") == self.fail_on:
            raise RuntimeError(f"refused {feeds['x']}")
        return {"y": feeds["x"] * 2}


@pytest.mark.no_egglog
def test_take_returns_the_run_started_beside_on_the_same_feeds() -> None:
    rec = Recorder()
    ahead = RunAhead(rec, cores=2)
    f = {"x": 3}
    ahead.start(f)
    assert ahead.take(f) == {"y": 6}
    assert len(rec.calls) == 1 and rec.calls[0][1] == "eqsat-verify-optimized"


@pytest.mark.no_egglog
def test_other_feeds_are_run_afresh_not_answered_from_the_run_ahead() -> None:
    rec = Recorder()
    ahead = RunAhead(rec, cores=2)
    ahead.start({"x": 1})  # the original refused these: nobody takes them
    assert ahead.take({"x": 1}) == {"y": 2}  # equal but not the same object: run again
    assert len(rec.calls) == 2 and rec.calls[1][1] == threading.current_thread().name


@pytest.mark.no_egglog
def test_an_error_of_the_run_ahead_is_raised_by_take() -> None:
    ahead = RunAhead(Recorder(fail_on=5), cores=2)
    f = {"x": 5}
    ahead.start(f)
    with pytest.raises(RuntimeError, match="refused 5"):
        ahead.take(f)


@pytest.mark.no_egglog
def test_a_start_waits_for_the_untaken_run_before_it() -> None:
    rec = Recorder()
    ahead = RunAhead(rec, cores=2)
    first, second = {"x": 1}, {"x": 2}
    ahead.start(first)
    ahead.start(second)
    assert ahead.take(second) == {"y": 4}
    assert [c[0] for c in rec.calls] == [id(first), id(second)]


@pytest.mark.no_egglog
def test_one_core_runs_in_the_callers_thread() -> None:
    rec = Recorder()
    ahead = RunAhead(rec, cores=1)
    f = {"x": 4}
    ahead.start(f)
    assert rec.calls == []
    assert ahead.take(f) == {"y": 8}
    assert rec.calls == [(id(f), threading.current_thread().name)]


@pytest.mark.no_egglog
def test_the_originals_nudged_runs_start_no_optimized_run_beside(monkeypatch) -> None:
    # nudged_moves and eqsat.verification.ties run the original alone on inputs the optimized
    # model is never asked for: starting it beside them would spend a core for nothing
    import numpy as np

    from eqsat.verification import _runners, alone, nudged_moves
    from eqsat.verification.paired import RunAhead

    from .conftest import parse_model

    started: list[int] = []
    real_start = RunAhead.start
    monkeypatch.setattr(RunAhead, "start", lambda self, f: (started.append(id(f)), real_start(self, f))[1])
    m = parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[4] x) => (float[4] y) { y = Sin(x) }""")
    ref, opt, _ = _runners(m, m, (None, None), None)
    f = {"x": np.arange(4, dtype=np.float32)}
    expected = ref(f, {})
    assert started == [id(f)]
    assert opt(f, {})["y"].tolist() == expected["y"].tolist()
    alone(ref)({"x": f["x"] + 1}, {})
    moves = nudged_moves(ref, f, {}, expected, 0)
    assert started == [id(f)] and moves is not None and moves["y"].shape == (4,)
