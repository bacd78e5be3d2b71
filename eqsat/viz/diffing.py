"""What changed between two models: nodes matched by structure, and one drawing of both.

Two nodes match when they have the same op (domain and type), the same input names and the
same output names, in order; failing that, when they have the same op and the same output
names (a node whose input was renamed by a change upstream, e.g. an Identity removed before
it). Names of nodes and attributes are not compared. A node of the
first model with no match is *removed*, one of the second with no match is *added*; matching
is one to one (a node that appears twice must appear twice on the other side). eqsat keeps a
value's name wherever the optimized graph still computes that value, so an unchanged node
keeps its inputs' and outputs' names and matches itself.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from onnx import ModelProto, NodeProto

from .graph import Box, Drawing, node_box
from .histogram import op_name


def node_key(n: NodeProto) -> tuple:
    return (op_name(n), tuple(n.input), tuple(n.output))


@dataclass
class NodeDiff:
    same: list[tuple[int, int]]  # (index in before, index in after)
    removed: list[int]  # indices in before
    added: list[int]  # indices in after


def match_nodes(before: ModelProto, after: ModelProto) -> NodeDiff:
    same: list[tuple[int, int]] = []
    left = list(range(len(after.graph.node)))
    matched: set[int] = set()
    for key in (node_key, lambda n: (op_name(n), tuple(n.output)) if any(n.output) else None):
        waiting: dict[tuple, list[int]] = defaultdict(list)
        for k, n in enumerate(before.graph.node):
            if k not in matched and key(n) is not None:
                waiting[key(n)].append(k)
        for q in waiting.values():
            q.reverse()
        rest = []
        for k in left:
            q = waiting.get(key(after.graph.node[k]))
            if q:
                b = q.pop()
                same.append((b, k))
                matched.add(b)
            else:
                rest.append(k)
        left = rest
    added = left
    same.sort(key=lambda p: p[1])
    removed = [k for k in range(len(before.graph.node)) if k not in matched]
    return NodeDiff(same, removed, added)


def diff_drawing(before: ModelProto, after: ModelProto, nd: NodeDiff, context: int | None = 1) -> Drawing:
    """Both models in one drawing: unchanged nodes once, removed nodes (from `before`) and
    added nodes (from `after`) coloured. An edge into a node of one model comes from that
    model's producer of the value. `context`: keep only changed nodes and what lies within
    that many edges of them (None: everything)."""
    d = Drawing()
    gb, ga = before.graph, after.graph
    inits = {t.name for t in gb.initializer} | {t.name for t in ga.initializer}
    same_after = {a: b for b, a in nd.same}
    prod_b: dict[str, str] = {}
    prod_a: dict[str, str] = {}
    for g, prod in ((gb, prod_b), (ga, prod_a)):
        for i in g.input:
            if i.name not in inits:
                d.boxes.setdefault(f"in:{i.name}", Box(f"in:{i.name}", i.name, "input", "io",
                                                       f"graph input {i.name}", "ellipse"))
                prod[i.name] = f"in:{i.name}"
    for k, n in enumerate(ga.node):
        bid = f"a{k}"
        d.boxes[bid] = node_box(bid, n, inits, "same" if k in same_after else "added")
        for o in n.output:
            if o:
                prod_a[o] = bid
    same_before = {b: f"a{a}" for b, a in nd.same}
    for k, n in enumerate(gb.node):
        bid = same_before.get(k, f"b{k}")
        if k not in same_before:
            d.boxes[bid] = node_box(bid, n, inits, "removed")
        for o in n.output:
            if o:
                prod_b[o] = bid
    edges = set()
    for k, n in enumerate(gb.node):
        if k in same_before:
            continue
        for v in n.input:
            if v in prod_b:
                edges.add((prod_b[v], f"b{k}", v))
    for k, n in enumerate(ga.node):
        for v in n.input:
            if v in prod_a:
                edges.add((prod_a[v], f"a{k}", v))
    for g, prod in ((gb, prod_b), (ga, prod_a)):
        for o in g.output:
            d.boxes.setdefault(f"out:{o.name}", Box(f"out:{o.name}", o.name, "output", "io",
                                                    f"graph output {o.name}", "ellipse"))
            if o.name in prod:
                edges.add((prod[o.name], f"out:{o.name}", o.name))
    d.edges = sorted(edges, key=lambda e: (e[1], e[0], e[2]))
    if context is not None:
        _keep_near_changes(d, context)
    return d


def _keep_near_changes(d: Drawing, hops: int) -> None:
    near = {b for b, box in d.boxes.items() if box.state in ("added", "removed")}
    nbrs: dict[str, set[str]] = defaultdict(set)
    for a, b, _ in d.edges:
        nbrs[a].add(b)
        nbrs[b].add(a)
    frontier = set(near)
    for _ in range(hops):
        frontier = {m for v in frontier for m in nbrs[v]} - near
        near |= frontier
    d.boxes = {b: box for b, box in d.boxes.items() if b in near}
    d.edges = [e for e in d.edges if e[0] in near and e[1] in near]
