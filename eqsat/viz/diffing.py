"""What changed between two models: nodes matched by structure, and one drawing of both.

A node is *unchanged* when the other model has one of the same op (domain and type), the
same input and output names, in order, and the same attributes (subgraph bodies included,
their node names aside). Failing that, a node of the same op and the same output names is
the same node *changed*: it reads other values (an Identity removed before it, or an input
rewired) or its attributes differ. Node names are not compared. A node of the first model
with no match is *removed*, one of the second with no match is *added*; matching is one to
one (a node that appears twice must appear twice on the other side). eqsat keeps a value's
name wherever the optimized graph still computes that value, so an unchanged node keeps its
inputs' and outputs' names and matches itself. Initializers are compared by name and
content (`initializer_diff`).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field

from onnx import AttributeProto, GraphProto, ModelProto, NodeProto

from eqsat.core.scopes import subgraphs
from eqsat.viz.graph import Box, Drawing, node_box, reads
from eqsat.viz.histogram import op_name


def _without_node_names(g: GraphProto) -> GraphProto:
    g = GraphProto.FromString(g.SerializeToString())
    stack = [g]
    while stack:
        for n in stack.pop().node:
            n.name = ""
            for a in n.attribute:
                stack.extend(subgraphs(a))
    return g


def attributes_digest(n: NodeProto) -> str:
    """A digest of the node's attributes, subgraph bodies included, node names left out."""
    h = hashlib.sha256()
    for a in sorted(n.attribute, key=lambda a: a.name):
        if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
            a = AttributeProto.FromString(a.SerializeToString())
            if a.type == AttributeProto.GRAPH:
                a.g.CopyFrom(_without_node_names(a.g))
            for k, sub in enumerate(a.graphs):
                a.graphs[k].CopyFrom(_without_node_names(sub))
        h.update(a.SerializeToString(deterministic=True))
    return h.hexdigest()


def node_key(n: NodeProto) -> tuple:
    return (op_name(n), tuple(n.input), tuple(n.output), attributes_digest(n))


@dataclass
class NodeDiff:
    same: list[tuple[int, int]]  # (index in before, index in after)
    removed: list[int]  # indices in before
    added: list[int]  # indices in after
    changed: list[tuple[int, int]] = field(default_factory=list)  # same op and outputs, other inputs or attributes


def match_nodes(before: ModelProto, after: ModelProto) -> NodeDiff:
    found: list[list[tuple[int, int]]] = [[], []]  # unchanged, changed
    left = list(range(len(after.graph.node)))
    matched: set[int] = set()
    keys = (node_key, lambda n: (op_name(n), tuple(n.output)) if any(n.output) else None)
    for same, key in zip(found, keys, strict=True):
        waiting: dict[tuple, list[int]] = defaultdict(list)
        for k, n in enumerate(before.graph.node):
            if k not in matched and (kk := key(n)) is not None:
                waiting[kk].append(k)
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
    for pairs in found:
        pairs.sort(key=lambda p: p[1])
    removed = [k for k in range(len(before.graph.node)) if k not in matched]
    return NodeDiff(found[0], removed, left, found[1])


@dataclass
class InitializerDiff:
    same: int
    changed: list[str]  # the same name, another dtype, shape or content
    removed: list[str]
    added: list[str]


def _content(t) -> tuple:
    """What an initializer holds, its name aside: raw bytes hashed as they are (no copy of a
    model's weights), typed fields through a copy without the name."""
    if t.raw_data:
        data = hashlib.sha256(t.raw_data).digest()
    else:
        t2 = type(t).FromString(t.SerializeToString())
        t2.name = ""
        data = hashlib.sha256(t2.SerializeToString(deterministic=True)).digest()
    return (t.data_type, tuple(t.dims), t.data_location, tuple((e.key, e.value) for e in t.external_data), data)


def initializer_diff(before: ModelProto, after: ModelProto) -> InitializerDiff:
    """Initializers by name: those of both models with equal dtype, shape and bytes are the
    same (a tensor stored as raw bytes in one and as typed fields in the other counts as
    changed; eqsat writes raw bytes); external data is compared by its reference."""
    b = {t.name: t for t in before.graph.initializer}
    a = {t.name: t for t in after.graph.initializer}
    both = [n for n in b if n in a]
    changed = [n for n in both if _content(b[n]) != _content(a[n])]
    return InitializerDiff(len(both) - len(changed), changed, [n for n in b if n not in a],
                           [n for n in a if n not in b])


def diff_drawing(before: ModelProto, after: ModelProto, nd: NodeDiff, context: int | None = 1) -> Drawing:
    """Both models in one drawing: unchanged nodes once, changed nodes once (as `after` has
    them), removed nodes (from `before`) and added nodes (from `after`) coloured. An edge
    into a node of one model comes from that model's producer of the value. `context`: keep only changed nodes and
    what lies within
    that many edges of them (None: everything)."""
    d = Drawing()
    gb, ga = before.graph, after.graph
    inits = {t.name for t in gb.initializer} | {t.name for t in ga.initializer}
    same_after = {a: b for b, a in nd.same}
    changed_after = {a: b for b, a in nd.changed}
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
        if k in changed_after:
            old = gb.node[changed_after[k]]
            d.boxes[bid] = node_box(bid, n, inits, "changed")
            d.boxes[bid].title += (f"\nbefore: inputs {', '.join(v for v in old.input if v) or '-'}"
                                   + ("" if attributes_digest(old) == attributes_digest(n) else "; attributes differ"))
        else:
            d.boxes[bid] = node_box(bid, n, inits, "same" if k in same_after else "added")
        for o in n.output:
            if o:
                prod_a[o] = bid
    same_before = {b: f"a{a}" for b, a in [*nd.same, *nd.changed]}
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
        for v in reads(n):
            if v in prod_b:
                edges.add((prod_b[v], f"b{k}", v))
    for k, n in enumerate(ga.node):
        for v in reads(n):
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
    near = {b for b, box in d.boxes.items() if box.state in ("added", "removed", "changed")}
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
