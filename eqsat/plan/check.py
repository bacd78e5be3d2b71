"""The plan checker: raises PlanError, naming the tensors concerned, unless

- every offset is a multiple of the alignment and every tensor lies inside the arena;
- no two buffers live at the same step overlap in the arena. A buffer is an alias group:
  a tensor with its own memory (`alias_of` absent) and every tensor that shares it through
  `alias_of` chains; its bytes are its owner's and its lifetime the union of its members'.
  Members lie inside their owner's bytes;
- inside a buffer, in-place writes are legal: a tensor written in place (`alias_kind`
  `inplace`) starts a new content; the content before it (the tensor it overwrites and
  the views that share that tensor's data) must not be live after the step of the write
  (an in-place op must be the last use of its input), and no two contents are written at
  the same step.

Given the graph as well (`check_plan(plan, graph)`), it also checks that the plan matches
it: the order is a topological order of its nodes, the tensors are its intermediates with
their sizes, their lifetimes are the ones the order gives, and each alias is made by a node
that reads the tensor it aliases (a view op for views).
"""

from __future__ import annotations

import numpy as np

from eqsat.plan.errors import PlanError
from eqsat.plan.graph import Graph
from eqsat.plan.inplace import VIEW_OPS, inplace_inputs
from eqsat.plan.lifetimes import check_order, lifetimes


def _span(t: dict) -> str:
    return (f"'{t['name']}' (bytes [{t['offset']}, {t['offset'] + t['size']}), "
            f"live at steps {t['first_use']}..{t['last_use']})")


def check_tensors(tensors: list[dict], arena_bytes: int, alignment: int) -> None:
    """Check planned tensors (dicts with name, offset, size, first_use, last_use and
    optionally alias_of/alias_kind) against one arena."""
    by_name: dict[str, dict] = {}
    for t in tensors:
        name = t["name"]
        if name in by_name:
            raise PlanError(f"tensor '{name}' is planned twice")
        by_name[name] = t
        off, size = int(t["offset"]), int(t["size"])
        if size < 0 or off < 0:
            raise PlanError(f"tensor '{name}' has a negative offset or size")
        if off % alignment:
            raise PlanError(f"tensor '{name}': offset {off} is not a multiple of the alignment {alignment}")
        if off + size > arena_bytes:
            raise PlanError(f"tensor {_span(t)} runs past the end of the arena ({arena_bytes} bytes)")
        if int(t["first_use"]) > int(t["last_use"]):
            raise PlanError(f"tensor '{name}': first_use {t['first_use']} is after last_use {t['last_use']}")

    # alias groups
    owner: dict[str, str] = {}

    def find(name: str) -> str:
        path = []
        cur = name
        while True:
            if cur in owner:
                r = owner[cur]
                break
            t = by_name[cur]
            parent = t.get("alias_of")
            if parent is None:
                r = cur
                break
            if parent not in by_name:
                raise PlanError(f"tensor '{cur}' is an alias of '{parent}', which is not in the plan")
            if t.get("alias_kind") not in ("view", "inplace"):
                raise PlanError(f"tensor '{cur}': alias_kind must be 'view' or 'inplace', not {t.get('alias_kind')!r}")
            if cur in path:
                raise PlanError(f"alias cycle through tensor '{cur}'")
            path.append(cur)
            cur = parent
        for p in path:
            owner[p] = r
        owner[r] = r
        return r

    groups: dict[str, list[dict]] = {}
    for name in by_name:
        groups.setdefault(find(name), []).append(by_name[name])
    for r, members in groups.items():
        o = by_name[r]
        for t in members:
            if t is o:
                continue
            if not (o["offset"] <= t["offset"] and t["offset"] + t["size"] <= o["offset"] + o["size"]):
                raise PlanError(f"tensor {_span(t)} shares the buffer of {_span(o)} but lies outside it")
        if len(members) > 1:
            _check_contents(members, by_name)

    # buffers live at the same step must not overlap
    roots = [r for r in groups if by_name[r]["size"] > 0]
    if not roots:
        return
    start = np.array([min(t["first_use"] for t in groups[r]) for r in roots], np.int64)
    end = np.array([max(t["last_use"] for t in groups[r]) for r in roots], np.int64)
    lo = np.array([by_name[r]["offset"] for r in roots], np.int64)
    hi = lo + np.array([by_name[r]["size"] for r in roots], np.int64)
    srt = np.argsort(lo, kind="stable")
    for a in range(len(roots)):
        i = srt[a]
        rest = srt[a + 1:]
        rest = rest[lo[rest] < hi[i]]  # later in offset order, starting below my end
        clash = rest[(start[rest] <= end[i]) & (end[rest] >= start[i])]
        if len(clash):
            j = int(clash[0])
            ta, tb = _witnesses(groups[roots[i]], groups[roots[j]])
            raise PlanError(f"tensors {_span(ta)} and {_span(tb)} overlap in the arena while both are live")


def _witnesses(ga: list[dict], gb: list[dict]) -> tuple[dict, dict]:
    """A member of each group whose lifetimes overlap (the owners if none do)."""
    for a in ga:
        for b in gb:
            if a["first_use"] <= b["last_use"] and b["first_use"] <= a["last_use"]:
                return a, b
    return ga[0], gb[0]


def _check_contents(members: list[dict], by_name: dict[str, dict]) -> None:
    """In one buffer: contents (a written tensor and its views) in the order they are
    written; each must be dead by the step the next one is written."""
    content: dict[str, str] = {}

    def head(name: str) -> str:
        t = by_name[name]
        if t.get("alias_kind") == "view":
            return head(t["alias_of"])
        return name

    for t in members:
        content[t["name"]] = head(t["name"])
    spans: dict[str, list[int]] = {}
    for t in members:
        h = content[t["name"]]
        s = spans.setdefault(h, [by_name[h]["first_use"], t["last_use"], 0])
        s[1] = max(s[1], t["last_use"])
    seq = sorted(spans.items(), key=lambda kv: kv[1][0])
    for (ha, (wa, la, _)), (hb, (wb, _, _)) in zip(seq, seq[1:], strict=False):
        if wb == wa:
            raise PlanError(f"tensors '{ha}' and '{hb}' are written into the same buffer at the same step {wb}")
        if la > wb:
            user = max((t for t in members if content[t["name"]] == ha), key=lambda t: t["last_use"])
            raise PlanError(
                f"tensor '{hb}' overwrites the buffer of '{ha}' in place at step {wb}, but "
                f"'{user['name']}' still needs its data at step {la}"
            )


def check_plan(plan, graph: Graph | None = None) -> None:
    """Check a Plan (or its dict form). Raises PlanError; returns None when the plan holds."""
    from eqsat.plan.planner import Plan

    if isinstance(plan, Plan):
        graph = graph if graph is not None else plan.graph
        d = plan.to_dict()
    else:
        d = plan
    try:
        tensors, arena, alignment = d["tensors"], int(d["arena_bytes"]), int(d["alignment"])
    except (KeyError, TypeError, ValueError) as e:
        raise PlanError(f"not a memory plan: {e}") from None
    if alignment <= 0:
        raise PlanError(f"alignment must be positive, not {alignment}")
    check_tensors(tensors, arena, alignment)
    if graph is not None:
        _check_graph(d, graph)


def _check_graph(d: dict, graph: Graph) -> None:
    index = graph.index()
    missing = [n for n in d["order"] if n not in index]
    if missing:
        raise PlanError(f"the order names node '{missing[0]}', which the model does not have")
    order = [index[n] for n in d["order"]]
    check_order(graph, order)
    life = lifetimes(graph, order)
    planned = {t["name"]: t for t in d["tensors"]}
    for name in graph.tensors:
        if name not in planned:
            raise PlanError(f"intermediate tensor '{name}' is not in the plan")
    for name, t in planned.items():
        info = graph.tensors.get(name)
        if info is None:
            raise PlanError(f"the plan places '{name}', which no node produces")
        if int(t["size"]) != info.size:
            raise PlanError(f"tensor '{name}': planned size {t['size']}, but it holds {info.size} bytes")
        if (int(t["first_use"]), int(t["last_use"])) != life[name]:
            raise PlanError(f"tensor '{name}': planned lifetime {t['first_use']}..{t['last_use']}, but in this "
                            f"order it is live at steps {life[name][0]}..{life[name][1]}")
        parent = t.get("alias_of")
        if parent is None:
            continue
        node = graph.nodes[info.producer]
        kind = t.get("alias_kind")
        if kind == "view":
            slots = node.input_slots or node.inputs
            if not (node.domain == "" and node.op_type in VIEW_OPS and slots[:1] == (parent,)):
                raise PlanError(f"tensor '{name}' is planned as a view of '{parent}', but its producer "
                                f"'{node.name}' ({node.op_type}) is not a view of it")
        elif parent not in inplace_inputs(node) or node.outputs[:1] != (name,):
            raise PlanError(f"tensor '{name}' is planned in place of '{parent}', but its producer "
                            f"'{node.name}' ({node.op_type}) may not overwrite that input")
