"""Tree greedy (bottom-up): each e-class takes the node with the least tree cost, where a
node's tree cost is its own cost plus its children's. Optimal for tree cost, not for DAG
cost (a shared value is counted once per use). Worklist form of extraction-gym's
bottom-up extractor: a node is re-evaluated only when one of its child classes improves.
Tree costs saturate at check.TREE_COST_CAP (they would overflow on deep models)."""

from __future__ import annotations

import math
import time

from .base import Extraction, Extractor
from .check import TREE_COST_CAP, ExtractionError, dag_cost, reachable, tree_cost
from .costs import CostModel
from .egraph import EGraph


class TreeGreedy(Extractor):
    name = "tree-greedy"
    optimal = False

    def extract(self, egraph: EGraph, cost: CostModel) -> Extraction:
        t0 = time.perf_counter()
        costs = cost.costs(egraph)
        choice = self._choose(egraph, costs)
        for r in egraph.roots:
            if r not in choice:
                raise ExtractionError(f"root e-class {r} has no finite-cost term")
        choice = {c: choice[c] for c in reachable(egraph, choice)}
        return Extraction(
            choice,
            self.name,
            tree_cost(egraph, choice, costs),
            dag_cost(egraph, choice, costs),
            time.perf_counter() - t0,
        )

    def choose_all(self, egraph: EGraph, cost: CostModel) -> dict[str, str]:
        """The cheapest node of every e-class that has a finite-cost term."""
        return self._choose(egraph, cost.costs(egraph))

    @staticmethod
    def _choose(egraph: EGraph, costs: dict[str, float]) -> dict[str, str]:
        best: dict[str, float] = {}
        choice: dict[str, str] = {}
        parents = egraph.parents()
        pending = [nid for nid, n in egraph.nodes.items() if not n.children]
        while pending:
            nxt: list[str] = []
            for nid in pending:
                n = egraph.nodes[nid]
                c = costs[nid]
                if math.isinf(c):
                    continue
                total = c
                for k in n.children:
                    kc = best.get(k)
                    if kc is None:
                        break
                    total += kc
                else:
                    # saturate (check.TREE_COST_CAP): an overflow to inf would leave the
                    # class without a term; ties past the cap break by order
                    total = min(total, TREE_COST_CAP)
                    if total < best.get(n.eclass, math.inf):
                        best[n.eclass] = total
                        choice[n.eclass] = nid
                        nxt.extend(parents[n.eclass])
            pending = list(dict.fromkeys(nxt))
        return choice
