"""Property tests of the memory planner on random lifetimes and random DAGs (hypothesis,
bounded example counts so the suite stays fast)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eqsat.plan import Graph, Node, PlanError, TensorInfo, check_plan, check_tensors, plan_graph
from eqsat.plan.arena import HEURISTICS, place_intervals
from eqsat.plan.lifetimes import Buffer, lower_bound

pytestmark = pytest.mark.no_egglog  # calls no egglog (tests/conftest.py's guard)

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DAG_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ALIGN = 64


@st.composite
def intervals(draw):
    n = draw(st.integers(1, 40))
    horizon = draw(st.integers(1, 30))
    out = []
    for _ in range(n):
        s = draw(st.integers(0, horizon))
        e = draw(st.integers(s, horizon))
        size = draw(st.sampled_from([0, 1, 64, 100, 128, 500, 1000, 4096, 10000]))
        out.append((size, s, e))
    return out


def aligned(z: int) -> int:
    return -(-z // ALIGN) * ALIGN


def as_tensors(items, offsets) -> list[dict]:
    return [{"name": f"t{i}", "offset": o, "size": z, "first_use": s, "last_use": e}
            for i, ((z, s, e), o) in enumerate(zip(items, offsets, strict=True))]


@SETTINGS
@given(intervals(), st.sampled_from(sorted(HEURISTICS)))
def test_every_placement_passes_the_checker_and_is_bracketed(items, heuristic):
    sizes = [aligned(z) for z, _, _ in items]
    offs, arena = place_intervals(sizes, [s for _, s, _ in items], [e for _, _, e in items], heuristic)
    check_tensors(as_tensors(items, offs), arena, ALIGN)
    lb = lower_bound([Buffer(str(i), [str(i)], z, s, e) for i,
                      (z, (_, s, e)) in enumerate(zip(sizes, items, strict=True))])
    assert lb <= arena <= sum(sizes)


@SETTINGS
@given(intervals(), st.data())
def test_checker_rejects_a_deliberate_overlap(items, data):
    sizes = [aligned(z) for z, _, _ in items]
    offs, arena = place_intervals(sizes, [s for _, s, _ in items], [e for _, _, e in items])
    pairs = [(i, j) for i in range(len(items)) for j in range(i + 1, len(items))
             if items[i][0] and items[j][0] and items[i][1] <= items[j][2] and items[j][1] <= items[i][2]]
    if not pairs:
        return
    i, j = data.draw(st.sampled_from(pairs))
    tensors = as_tensors(items, offs)
    tensors[j]["offset"] = tensors[i]["offset"]
    with pytest.raises(PlanError) as e:
        check_tensors(tensors, max(arena, max(t["offset"] + t["size"] for t in tensors)), ALIGN)
    msg = str(e.value)
    assert "overlap" in msg
    # the two tensors named overlap each other in time and in bytes
    named = [t for t in tensors if f"'{t['name']}'" in msg]
    assert len(named) == 2


OPS = ["Relu", "Add", "Mul", "Reshape", "MatMul", "Concat", "Sigmoid", "Identity"]


@st.composite
def dags(draw):
    n = draw(st.integers(1, 20))
    sizes = [0, 64, 100, 256, 1000, 4096]
    nodes: list[Node] = []
    tensors: dict[str, TensorInfo] = {}
    avail = ["x"]  # the graph input
    for i in range(n):
        op = draw(st.sampled_from(OPS))
        k = draw(st.integers(1, min(3, len(avail))))
        ins = tuple(dict.fromkeys(draw(st.lists(st.sampled_from(avail), min_size=k, max_size=k))))
        n_out = draw(st.integers(1, 2))
        outs = tuple(f"v{i}_{j}" for j in range(n_out))
        if op in ("Reshape", "Identity") and ins[0] in tensors:
            size0 = tensors[ins[0]].size  # a view keeps its input's size
        else:
            size0 = draw(st.sampled_from(sizes))
        for j, y in enumerate(outs):
            tensors[y] = TensorInfo(y, size0 if j == 0 else draw(st.sampled_from(sizes)), i)
        nodes.append(Node(f"n{i}", op, "", ins, outs))
        avail.extend(outs)
    produced = [t for t in tensors]
    outputs = tuple(draw(st.lists(st.sampled_from(produced), max_size=3, unique=True)))
    return Graph(nodes, tensors, outputs)


@DAG_SETTINGS
@given(dags(), st.booleans())
def test_plans_of_random_dags_hold(graph, inplace):
    p = plan_graph(graph, ALIGN, inplace=inplace)
    check_plan(p, graph)  # offsets, overlaps, in-place contents, and agreement with the graph
    assert p.lower_bound_bytes <= p.arena_bytes <= p.no_reuse_bytes
    assert p.lower_bound_bytes <= p.model_order_lower_bound_bytes
    assert min(p.orders.values()) == p.lower_bound_bytes
    assert p.inplace_saved_bytes >= 0


@DAG_SETTINGS
@given(dags())
def test_memory_aware_order_never_above_the_model_order(graph):
    from eqsat.plan.inplace import aliases, buffers
    from eqsat.plan.lifetimes import check_order, lifetimes
    from eqsat.plan.order import candidate_orders

    p = plan_graph(graph, ALIGN)
    assert p.lower_bound_bytes <= p.model_order_lower_bound_bytes
    index = graph.index()
    chosen = [index[n] for n in p.order]
    check_order(graph, chosen)
    # every candidate is a topological order, and the chosen one has the least lower bound
    for name, order in candidate_orders(graph, ALIGN).items():
        check_order(graph, order)
        life = lifetimes(graph, order)
        lb = lower_bound(buffers(graph, life, aliases(graph, order, life), ALIGN))
        assert lb == p.orders[name]
        assert p.lower_bound_bytes <= lb


@SETTINGS
@given(intervals())
def test_repack_never_worse_and_still_valid(items):
    from eqsat.plan.arena import repack

    sizes = [aligned(z) for z, _, _ in items]
    bufs = [Buffer(str(i), [str(i)], z, s, e) for i, (z, (_, s, e)) in enumerate(zip(sizes, items, strict=True))]
    lb = lower_bound(bufs)
    for h in HEURISTICS:
        offs, arena = place_intervals(sizes, [s for _, s, _ in items], [e for _, _, e in items], h)
        offs2, arena2 = repack(bufs, offs, lb)
        check_tensors(as_tensors(items, offs2), arena2, ALIGN)
        assert lb <= arena2 <= arena
