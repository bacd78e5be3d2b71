"""Memory-aware execution orders: topological orders that try to lower the peak of live bytes.

The model's own node order is topological and is always a candidate. The others are list
schedulers over the ready nodes (all producers already run), scoring each candidate node
by the bytes it allocates (its outputs, except views of intermediates) and the bytes it
frees (inputs whose last reader it is, graph outputs excepted):

- `greedy-net`: the node with the smallest net change (allocated - freed); ties by the
  model's order.
- `greedy-alloc`: the node that allocates least, then the smallest net change.
- `greedy-chain`: prefer a ready consumer of the node just run (finish one branch before
  starting the next), then the smallest net change.
- `reverse-net`: the same greedy run backwards from the graph outputs (a node is ready
  once all its consumers are placed; placing it makes its inputs live and its outputs
  dead), then reversed.

The planner evaluates every candidate exactly (lifetimes, in-place reuse, views, lower
bound) and keeps the one with the lowest lower bound, the model's order on ties: the
chosen order's lower bound is never above the model order's.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from eqsat.plan.graph import Graph
from eqsat.plan.inplace import VIEW_OPS
from eqsat.plan.lifetimes import align


def _producers(graph: Graph) -> list[set[int]]:
    return [{graph.tensors[x].producer for x in n.inputs if x in graph.tensors} for n in graph.nodes]


def _sizes(graph: Graph, alignment: int) -> dict[str, int]:
    return {t: align(info.size, alignment) for t, info in graph.tensors.items()}


def _alloc(graph: Graph, i: int, size: dict[str, int]) -> int:
    n = graph.nodes[i]
    slots = n.input_slots or n.inputs
    if n.domain == "" and n.op_type in VIEW_OPS and slots[:1] and slots[0] in graph.tensors:
        return sum(size[y] for y in n.outputs[1:])  # a view of an intermediate takes no memory
    return sum(size[y] for y in n.outputs)


class _Ready:
    """The nodes ready to schedule, best key first. A node whose key changed is pushed again;
    stale heap entries are skipped (each push bumps the node's version)."""

    def __init__(self, key: Callable[[int], tuple], n: int) -> None:
        self.key, self.version, self.heap, self.nodes = key, [0] * n, [], set()

    def __bool__(self) -> bool:
        return bool(self.nodes)

    def __contains__(self, i: int) -> bool:
        return i in self.nodes

    def add(self, i: int) -> None:
        self.nodes.add(i)
        self.rescore(i)

    def rescore(self, i: int) -> None:
        self.version[i] += 1
        heapq.heappush(self.heap, (self.key(i), self.version[i], i))

    def take(self, i: int) -> int:
        self.nodes.discard(i)
        self.version[i] += 1  # drop its heap entry
        return i

    def pop(self) -> int:
        while True:
            _, v, j = heapq.heappop(self.heap)
            if v == self.version[j] and j in self.nodes:
                return self.take(j)


def _successors(preds: list[set[int]]) -> list[set[int]]:
    succs: list[set[int]] = [set() for _ in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].add(i)
    return succs


def forward(graph: Graph, alignment: int, mode: str) -> list[int]:
    """A list schedule from the inputs: mode `net`, `alloc` or `chain`."""
    size = _sizes(graph, alignment)
    outs = set(graph.outputs)
    n = len(graph.nodes)
    preds = _producers(graph)
    succs = _successors(preds)
    waiting = [len(ps) for ps in preds]
    remaining = {t: len(set(cs)) for t, cs in graph.consumers.items()}
    alloc = [_alloc(graph, i, size) for i in range(n)]

    def freed(i: int) -> int:
        return sum(size[x] for x in graph.nodes[i].inputs
                   if x in remaining and remaining[x] == 1 and x not in outs)

    def key(i: int) -> tuple:
        net = alloc[i] - freed(i)
        return (alloc[i], net, i) if mode == "alloc" else (net, i)

    ready = _Ready(key, n)
    for i in range(n):
        if waiting[i] == 0:
            ready.add(i)
    order: list[int] = []
    last = -1
    while ready:
        cands = [j for j in succs[last] if j in ready] if mode == "chain" and last >= 0 else []
        pick = ready.take(min(cands, key=key)) if cands else ready.pop()
        order.append(pick)
        last = pick
        for x in graph.nodes[pick].inputs:
            if x in remaining:
                remaining[x] -= 1
                if remaining[x] == 1:  # its last reader now frees it: rescore that reader
                    for c in graph.consumers[x]:
                        if c in ready:
                            ready.rescore(c)
        for j in succs[pick]:
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.add(j)
    return order


def reverse(graph: Graph, alignment: int) -> list[int]:
    """The greedy list schedule built backwards from the graph outputs, then reversed."""
    size = _sizes(graph, alignment)
    outs = set(graph.outputs)
    n = len(graph.nodes)
    preds = _producers(graph)
    waiting = [len(s) for s in _successors(preds)]
    live: set[str] = set(t for t in graph.tensors if t in outs)

    def key(i: int) -> tuple:
        node = graph.nodes[i]
        view = node.domain == "" and node.op_type in VIEW_OPS
        newly = sum(size[x] for x in node.inputs if x in size and x not in live)
        dead = sum(size[y] for y in node.outputs if y in live)
        if view:
            newly = 0
        return (newly - dead, -i)

    ready = _Ready(key, n)
    for i in range(n):
        if waiting[i] == 0:
            ready.add(i)
    rev: list[int] = []
    while ready:
        j = ready.pop()
        rev.append(j)
        node = graph.nodes[j]
        for y in node.outputs:
            live.discard(y)
        for x in node.inputs:
            if x in size and x not in live:
                live.add(x)
                for c in graph.consumers[x]:  # readers still waiting see x as live now
                    if c in ready:
                        ready.rescore(c)
        for p in preds[j]:
            waiting[p] -= 1
            if waiting[p] == 0:
                ready.add(p)
    rev.reverse()
    return rev


ORDERS: dict[str, Callable[[Graph, int], list[int]]] = {
    "model": lambda g, a: list(range(len(g.nodes))),
    "greedy-net": lambda g, a: forward(g, a, "net"),
    "greedy-alloc": lambda g, a: forward(g, a, "alloc"),
    "greedy-chain": lambda g, a: forward(g, a, "chain"),
    "reverse-net": reverse,
}


def candidate_orders(graph: Graph, alignment: int, names: list[str] | None = None) -> dict[str, list[int]]:
    return {name: ORDERS[name](graph, alignment) for name in (names or list(ORDERS))}
