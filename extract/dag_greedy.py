"""DAG greedy: like tree greedy, but a node's cost is the DAG cost of the term it roots,
the set of distinct nodes under it, so a value shared by two children is paid once
(extraction-gym's greedy-dag). Each e-class keeps the node whose set costs least; a node is
re-evaluated when one of its child classes improves. Not optimal: the sets of different
classes are chosen independently, so it cannot see that a value another root needs anyway
is free for this one (the ILP can); a local search afterwards (extract/reuse.py) switches
classes to such shared values where the whole program's DAG cost drops."""

from __future__ import annotations

import math
import time

from .base import Extraction, Extractor
from .check import ExtractionError, dag_cost, tree_cost
from .costs import CostModel
from .egraph import EGraph
from .reuse import reuse_shared


class DagGreedy(Extractor):
    name = "dag-greedy"
    optimal = False

    def extract(self, egraph: EGraph, cost: CostModel) -> Extraction:
        t0 = time.perf_counter()
        costs = cost.costs(egraph)
        ids = {nid: i for i, nid in enumerate(egraph.nodes)}
        node_cost = [costs[nid] for nid in egraph.nodes]
        class_members: dict[str, set[int]] = {}  # e-class -> its node indices
        for nid, n in egraph.nodes.items():
            class_members.setdefault(n.eclass, set()).add(ids[nid])
        best: dict[str, tuple[float, frozenset[int]]] = {}
        choice: dict[str, str] = {}
        parents = egraph.parents()
        pending = [nid for nid, n in egraph.nodes.items() if not n.children]
        while pending:
            nxt: list[str] = []
            for nid in pending:
                n = egraph.nodes[nid]
                if math.isinf(costs[nid]):
                    continue
                kids = [best.get(k) for k in dict.fromkeys(n.children)]
                if any(k is None for k in kids) or n.eclass in n.children:
                    continue
                members: set[int] = set()
                for _, s in kids:  # type: ignore[misc]
                    members |= s
                if not members.isdisjoint(class_members[n.eclass]):
                    continue  # the term would contain its own class: a cycle
                members.add(ids[nid])
                total = sum(map(node_cost.__getitem__, members))  # set operations in C: large DAGs
                old = best.get(n.eclass)
                if old is None or total < old[0] - 1e-12:
                    best[n.eclass] = (total, frozenset(members))
                    choice[n.eclass] = nid
                    nxt.extend(parents[n.eclass])
            pending = list(dict.fromkeys(nxt))
        for r in egraph.roots:
            if r not in choice:
                raise ExtractionError(f"root e-class {r} has no finite-cost term")
        choice, switches = reuse_shared(egraph, choice, costs)
        notes = ([f"reuse pass: {switches} e-class(es) switched to a value the program computes anyway"]
                 if switches else [])
        return Extraction(choice, self.name, tree_cost(egraph, choice, costs), dag_cost(egraph, choice, costs),
                          time.perf_counter() - t0, notes)
