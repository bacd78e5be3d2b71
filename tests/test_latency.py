"""eqsat.backends.ort.latency.compare and eqsat.backends.ort.rounds.round_orders: the side-by-side sampler. No timing
is asserted, only what each run returns and in which order the sessions ran."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import eqsat.backends.ort.latency as latency
from eqsat.backends.ort.rounds import round_orders

pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("n", [1, 2, 3, 10])
def test_round_orders_balanced(n):
    """Each round is a permutation; no session runs twice in a row across a round boundary;
    with 3 or more sessions, every one starts a round about equally often and follows each
    other one sometimes (two sessions simply alternate)."""
    rounds = list(round_orders(n, 600))
    assert all(sorted(p) == list(range(n)) for p in rounds)
    flat = [j for p in rounds for j in p]
    if n > 1:
        assert all(a != b for a, b in zip(flat, flat[1:], strict=False))
    if n > 2:
        firsts = np.bincount([p[0] for p in rounds], minlength=n)
        assert firsts.min() > 0.5 * 600 / n
        pairs = {(a, b) for a, b in zip(flat, flat[1:], strict=False)}
        assert len(pairs) == n * (n - 1)


def _model(k: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["h0"])]
    nodes += [helper.make_node("Relu", [f"h{i}"], [f"h{i + 1}"]) for i in range(k)]
    g = helper.make_graph(nodes, "relus", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
                          [helper.make_tensor_value_info(f"h{k}", TensorProto.FLOAT, [4, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_compare_runs_each_model_once_per_round_in_the_sampled_order(monkeypatch):
    orders = []

    def recording(n, rounds, seed=0):
        for perm in round_orders(n, rounds, seed):
            orders.append(perm)
            yield perm

    monkeypatch.setattr(latency, "round_orders", recording)
    ms = latency.compare([_model(1), _model(2), _model(3)], {"x": np.ones((4, 4), np.float32)}, runs=7, warmup=1)
    assert len(ms) == 3 and all(t > 0 for t in ms)
    assert len(orders) == 7 and all(sorted(p) == [0, 1, 2] for p in orders)


def test_compare_to_first_times_groups_beside_the_first_in_children_with_huge_pages(monkeypatch, tmp_path):
    """Six models beside the first, in groups of three: two children, each running the first
    and its group (the second group created in reverse order), with glibc's huge pages asked
    for; every model gets a figure."""
    calls = []
    real = latency.subprocess.run

    def recording(cmd, **kw):
        import json

        calls.append((json.loads(kw["input"])["models"], kw["env"].get("GLIBC_TUNABLES")))
        return real(cmd, **kw)

    monkeypatch.setattr(latency.subprocess, "run", recording)
    models = [_model(k) for k in range(7)]
    paths = []
    for k, m in enumerate(models):
        onnx.save(m, tmp_path / f"r{k}.onnx")
        paths.append(str(tmp_path / f"r{k}.onnx"))
    ms = latency.compare_to_first(paths, {"x": np.ones((4, 4), np.float32)}, runs=5, group=4)
    assert len(ms) == 7 and all(t > 0 for t in ms)
    assert [len(m) for m, _ in calls] == [4, 4] and all(env == latency.CHILD_ENV["GLIBC_TUNABLES"] for _, env in calls)
    assert "hugetlb" in latency.CHILD_ENV["GLIBC_TUNABLES"] or "GLIBC_TUNABLES" in __import__("os").environ
    assert calls[0][0][0] == paths[0] and calls[1][0][-1] == paths[0]  # the first in each, order reversed
    assert sorted(p for m, _ in calls for p in m if p != paths[0]) == sorted(paths[1:])


@pytest.mark.parametrize("clock, slept", [("wall", True), ("cpu", False)])
def test_the_cpu_clock_leaves_out_time_the_process_does_not_run(monkeypatch, clock, slept):
    """A run that waits 50 ms (as for a core other work holds) takes 50 ms by the wall clock
    and next to nothing by the CPU clock."""
    import time

    class Waiting:
        def run(self, outputs, feeds):
            time.sleep(0.05)

    monkeypatch.setattr(latency, "session", lambda *a, **k: Waiting())
    (t,) = latency.compare(["a.onnx"], {}, runs=3, warmup=0, clock=clock)
    assert (t >= 50) is slept and (clock == "wall" or t < 10)
