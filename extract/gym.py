"""extraction-gym's file format: an eqsat e-graph written so that gym's unmodified
extractors and its `result.check` accept it, and gym's files read back.

extraction-gym (github.com/egraphs-good/extraction-gym) reads egraph-serialize JSON
through the egraph-serialize version it pins, which knows `nodes` (op, children, eclass,
cost), `root_eclasses` and `class_data` (type), and nothing of eqsat's metadata. So the
export (`to_gym`) offers only what eqsat's extractors may choose:

- term nodes only: constructors and primitives (EGraph.from_json already leaves out the
  analysis tables: shape, dtype, the `Value` handles, relation facts; the forbidden
  constructors; the subsumed nodes, a field that gym's egraph-serialize does not read);
- no node the cost model prices at math.inf (never to choose; JSON has no infinity);
- every kept node's child classes non-empty: a node one of whose child classes lost all its
  nodes is dropped too, to a fixpoint, and each child id names a kept node of that class
  (gym looks only at a child's e-class, through the node it names);
- `cost` the cost model's, `root_eclasses` eqsat's roots (each once), `class_data` the
  kept classes' types.

Node ids and e-class names are eqsat's, so a choice made on the export is a choice on the
saved e-graph. Reading gym's files needs nothing here: EGraph.from_json reads a file
without eqsat's metadata as all terms, and the `file-costs` model prices its `cost`s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .egraph import EGraph


class GymExportError(ValueError):
    """The e-graph has nothing gym could extract (a root lost every node)."""


def kept_nodes(egraph: EGraph, costs: Mapping[str, float]) -> dict[str, list[str]]:
    """e-class -> its nodes that the export offers, in the e-graph's order: finite cost, and
    every child class keeping at least one node (to a fixpoint)."""
    alive = {c: [n for n in ids if math.isfinite(costs[n])] for c, ids in egraph.classes.items()}
    parents = egraph.parents()
    dead = [c for c, ids in alive.items() if not ids]
    gone: set[str] = set()
    while dead:
        c = dead.pop()
        for pid in parents.get(c, ()):
            p = egraph.nodes[pid]
            if pid in gone:
                continue
            gone.add(pid)
            members = alive[p.eclass]
            if pid in members:
                members.remove(pid)
                if not members:
                    dead.append(p.eclass)
    return {c: ids for c, ids in alive.items() if ids}


def to_gym(egraph: EGraph, costs: Mapping[str, float]) -> dict:
    """The egraph-serialize JSON that extraction-gym reads, with `costs` (node id -> cost)
    in each node's `cost`; GymExportError if a root keeps no node."""
    keep = kept_nodes(egraph, costs)
    roots = list(dict.fromkeys(egraph.roots))
    lost = [r for r in roots if r not in keep]
    if lost:
        raise GymExportError(f"root e-class {lost[0]} has no node left to offer (every one is a table, forbidden, "
                             "subsumed, priced at infinity or has a child class with none)")
    if not roots:
        raise GymExportError("the e-graph names no roots; extraction-gym's check needs at least one")
    nodes: dict[str, dict] = {}
    for nid, n in egraph.nodes.items():  # the e-graph's order: gym's classes() follow it
        if nid not in keep.get(n.eclass, ()):
            continue
        nodes[nid] = {"op": n.op, "children": [keep[k][0] for k in n.children], "eclass": n.eclass,
                      "cost": float(costs[nid])}
    class_data = {c: {"type": t} for c in keep if (t := egraph.class_type(c))}
    return {"nodes": nodes, "root_eclasses": roots, "class_data": class_data}
