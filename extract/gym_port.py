"""A Python port of extraction-gym's checker and two of its extractors, to check that the
files `eqsat export-egraph --format gym` writes are ones gym accepts, where gym's Rust
cannot be built (its crates come from crates.io).

Ported from extraction-gym (github.com/egraphs-good/extraction-gym, commit 903ba0f):
`ExtractionResult::check`, `find_cycles`, `dag_cost` and `tree_cost` (src/extract/mod.rs),
`BottomUpExtractor` (src/extract/bottom_up.rs: the `bottom-up` of its main.rs) and
`GreedyDagExtractor` (src/extract/greedy_dag.rs), and the reading of a file as the
egraph-serialize version gym pins does it: nodes in file order, e-classes in the order of
their first node, a node's `cost` 1.0 when absent, `subsumed` and other fields ignored.
Where gym panics (an `assert!`, a map lookup of a missing key, a NaN cost) the port raises
GymError with what failed. Iteration orders and the strict `<` of every update are gym's,
so ties break as gym breaks them. This is a port for checking, not eqsat's extractors:
those are in extract/ilp.py, dag_greedy.py and tree_greedy.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

INFINITY = math.inf


class GymError(AssertionError):
    """What would make extraction-gym panic on this file or result."""


@dataclass(frozen=True)
class GymNode:
    op: str
    children: tuple[str, ...]  # node ids, as in the file
    eclass: str
    cost: float


class GymEGraph:
    """egraph-serialize's EGraph as gym reads it: `nodes` (id -> GymNode, file order),
    `classes` (e-class -> node ids, in the order of the nodes), `root_eclasses`."""

    def __init__(self, data: dict) -> None:
        self.nodes: dict[str, GymNode] = {}
        for nid, n in data["nodes"].items():
            cost = float(n.get("cost", 1.0))
            if math.isnan(cost):  # NotNan<f64>
                raise GymError(f"node {nid}: cost is NaN")
            self.nodes[nid] = GymNode(n["op"], tuple(n.get("children", ())), n["eclass"], cost)
        self.root_eclasses: list[str] = list(data.get("root_eclasses", ()))
        self.classes: dict[str, list[str]] = {}
        for nid, n in self.nodes.items():
            self.classes.setdefault(n.eclass, []).append(nid)

    def node(self, nid: str) -> GymNode:
        """`egraph[nid]`: panics in gym when the id names no node."""
        try:
            return self.nodes[nid]
        except KeyError:
            raise GymError(f"node id {nid} is not a node of the e-graph") from None

    def nid_to_cid(self, nid: str) -> str:
        return self.node(nid).eclass


def _choice(choices: dict[str, str], cid: str) -> str:
    """`self.choices[cid]`: panics in gym when the class has no choice."""
    try:
        return choices[cid]
    except KeyError:
        raise GymError(f"e-class {cid} has no chosen node") from None


def find_cycles(egraph: GymEGraph, choices: dict[str, str], roots: list[str]) -> list[str]:
    """The e-classes at which the chosen graph's depth-first search from the roots meets a
    class still in progress (gym's recursive `cycle_dfs`, here with an explicit stack)."""
    status: dict[str, str] = {}
    cycles: list[str] = []
    stack: list[tuple[str, int]] = []  # (class in progress, its next child); empty between roots

    def enter(cid: str) -> None:
        s = status.get(cid)
        if s == "done":
            return
        if s == "doing":
            cycles.append(cid)
            return
        status[cid] = "doing"
        stack.append((cid, 0))

    for root in roots:
        enter(root)
        while stack:
            cid, i = stack.pop()
            kids = egraph.node(_choice(choices, cid)).children
            if i < len(kids):
                stack.append((cid, i + 1))
                enter(egraph.nid_to_cid(kids[i]))
            else:
                status[cid] = "done"
    return cycles


def check(egraph: GymEGraph, choices: dict[str, str]) -> None:
    """`ExtractionResult::check`: its assertions in its order; GymError names the first to fail."""
    if not egraph.root_eclasses:
        raise GymError("the e-graph has no root e-class")
    for cid in egraph.root_eclasses:
        if cid not in choices:
            raise GymError(f"root e-class {cid} is not chosen")
    cycles = find_cycles(egraph, choices, egraph.root_eclasses)
    if cycles:
        raise GymError(f"the choice has cycles, at e-classes {cycles[:5]}")
    for cid, nid in choices.items():
        if egraph.node(nid).eclass != cid:
            raise GymError(f"e-class {cid}: chosen node {nid} belongs to {egraph.node(nid).eclass}")
    todo = list(egraph.root_eclasses)
    visited: set[str] = set()
    while todo:
        cid = todo.pop()
        if cid in visited:
            continue
        visited.add(cid)
        if cid not in choices:
            raise GymError(f"e-class {cid}, which the roots depend on, is not chosen")
        for child in egraph.node(choices[cid]).children:
            todo.append(egraph.nid_to_cid(child))


def node_sum_cost(egraph: GymEGraph, node: GymNode, costs: dict[str, float]) -> float:
    """A node's cost plus its child classes' current costs (infinite where not known yet)."""
    return node.cost + sum(costs.get(egraph.nid_to_cid(n), INFINITY) for n in node.children)


def bottom_up(egraph: GymEGraph) -> dict[str, str]:
    """gym's `bottom-up`: pass over every class's nodes, take a node whose tree cost is
    strictly below the class's, until a pass changes nothing."""
    choices: dict[str, str] = {}
    costs: dict[str, float] = {}
    did_something = True
    while did_something:
        did_something = False
        for cid, members in egraph.classes.items():
            for nid in members:
                cost = node_sum_cost(egraph, egraph.nodes[nid], costs)
                if cost < costs.get(cid, INFINITY):
                    choices[cid] = nid
                    costs[cid] = cost
                    did_something = True
    return choices


def greedy_dag(egraph: GymEGraph) -> dict[str, str]:
    """gym's `greedy_dag.rs`: each class keeps the node whose set of classes under it (each
    paid once) costs least; a node whose child class's set holds its own class is skipped
    (a cycle); passes over every node until none improves."""
    best: dict[str, tuple[dict[str, float], float, str]] = {}  # class -> (its set, total, node)
    keep_going = True
    while keep_going:
        keep_going = False
        for nid, node in egraph.nodes.items():
            cid = node.eclass
            merged: dict[str, float] = {}
            for child in node.children:
                entry = best.get(egraph.nid_to_cid(child))
                if entry is None or cid in entry[0]:
                    break
                merged.update(entry[0])
            else:
                merged[cid] = node.cost
                total = sum(merged.values())
                old = best.get(cid)
                if old is None or total < old[1]:
                    best[cid] = (merged, total, nid)
                    keep_going = True
    return {cid: entry[2] for cid, entry in best.items()}


def dag_cost(egraph: GymEGraph, choices: dict[str, str], roots: list[str] | None = None) -> float:
    """gym's `dag_cost`: each chosen class the roots reach, paid once."""
    costs: dict[str, float] = {}
    todo = list(egraph.root_eclasses if roots is None else roots)
    while todo:
        cid = todo.pop()
        node = egraph.node(_choice(choices, cid))
        if cid in costs:
            continue
        costs[cid] = node.cost
        todo.extend(egraph.nid_to_cid(c) for c in node.children)
    return sum(costs.values())


def tree_cost(egraph: GymEGraph, choices: dict[str, str], roots: list[str] | None = None) -> float:
    """gym's `tree_cost`: each chosen node paid once per use, memoized by child node id (gym
    recurses; here an explicit stack, as deep models pass Python's recursion limit). Like
    gym's, it does not end on a cyclic choice: `check` first."""
    memo: dict[str, float] = {}
    top = [_choice(choices, c) for c in (egraph.root_eclasses if roots is None else roots)]
    stack: list[tuple[str, bool]] = [(nid, False) for nid in reversed(top)]
    while stack:
        nid, ready = stack.pop()
        if nid in memo:
            continue
        node = egraph.node(_choice(choices, egraph.nid_to_cid(nid)))
        if ready:
            memo[nid] = node.cost + sum(memo[k] for k in node.children)
        else:
            stack.append((nid, True))
            stack.extend((k, False) for k in node.children if k not in memo)
    return sum(memo[nid] for nid in top)


EXTRACTORS = {"bottom-up": bottom_up, "greedy-dag": greedy_dag}
