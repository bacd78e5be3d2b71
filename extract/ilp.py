"""Exact DAG-cost extraction as an integer linear program (scipy.optimize.milp, HiGHS).

Variables: x_n in {0, 1} per e-node (chosen or not). Constraints: each root class chooses
one node; a class chooses at most one; a chosen node's child classes choose one each; and,
inside each strongly connected part of the class graph, order variables forbid cycles
(t_c - t_k >= 1 - M (1 - x_n) for each node n of class c with child class k in the same
part). Objective: the sum of the chosen nodes' costs, i.e. the DAG cost, each node paid
once however many parents share it.

Only term classes (sort Op and OpList) take part: value classes (integers, vectors, dtypes,
attributes) have a single node each and cost nothing to share; they are filled in
afterwards. A node that is its own child cannot be in an acyclic choice and is dropped.
With a time limit (default 60 s); when HiGHS does not prove optimality in time, the best
feasible solution it found is used if it beats the greedy answer, else the greedy answer,
and the extraction says so in its notes.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .base import Extraction, Extractor
from .check import ExtractionError, dag_cost, reachable, tree_cost
from .costs import CostModel
from .egraph import EGraph
from .tree_greedy import TreeGreedy

TERM_SORTS = ("Op", "OpList", "")


class ILP(Extractor):
    name = "ilp"
    optimal = True

    def __init__(self, time_limit: float = 60.0) -> None:
        self.time_limit = time_limit

    def extract(self, egraph: EGraph, cost: CostModel) -> Extraction:
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_matrix

        t0 = time.perf_counter()
        costs = cost.costs(egraph)
        greedy = TreeGreedy().extract(egraph, cost)
        full = TreeGreedy().choose_all(egraph, cost)
        notes: list[str] = []

        term = {c for c in egraph.classes if egraph.class_type(c) in TERM_SORTS}
        needed = self._needed(egraph, full, term)
        nodes = [n for c in needed for n in egraph.classes[c]
                 if not math.isinf(costs[n]) and egraph.nodes[n].eclass not in
                 {k for k in egraph.nodes[n].children}]
        nodes = self._prune(egraph, nodes, term)
        index = {n: i for i, n in enumerate(nodes)}
        by_class: dict[str, list[int]] = {}
        for n in nodes:
            by_class.setdefault(egraph.nodes[n].eclass, []).append(index[n])
        classes = sorted(by_class)
        if any(r not in by_class for r in egraph.roots):
            raise ExtractionError("a root e-class has no finite-cost acyclic term")

        rows, cols, vals, lo, hi = [], [], [], [], []

        def row(entries: list[tuple[int, float]], low: float, high: float) -> None:
            r = len(lo)
            for col, v in entries:
                rows.append(r)
                cols.append(col)
                vals.append(v)
            lo.append(low)
            hi.append(high)

        roots = set(egraph.roots)
        for c in classes:
            members = [(i, 1.0) for i in by_class[c]]
            row(members, 1.0 if c in roots else 0.0, 1.0)
        for n in nodes:
            i = index[n]
            for k in set(egraph.nodes[n].children):
                if k not in term:
                    continue
                row([(i, 1.0)] + [(j, -1.0) for j in by_class[k]], -np.inf, 0.0)

        n_x = len(nodes)
        n_vars = n_x
        order: dict[str, int] = {}
        for comp in self._cyclic_parts(egraph, by_class, nodes):
            big = float(len(comp))
            for c in comp:
                order[c] = n_vars
                n_vars += 1
            for c in comp:
                for i in by_class[c]:
                    for k in set(egraph.nodes[nodes[i]].children):
                        if k in comp:
                            # t_c - t_k - M x_n >= 1 - M
                            row([(order[c], 1.0), (order[k], -1.0), (i, -big)], 1.0 - big, np.inf)
        n_orders = n_vars - n_x
        c_vec = np.zeros(n_vars)
        for n, i in index.items():
            c_vec[i] = costs[n]
        integrality = np.concatenate([np.ones(n_x), np.zeros(n_orders)])
        upper = np.concatenate([np.ones(n_x), np.full(n_orders, float(max(1, n_orders)))])
        a = coo_matrix((vals, (rows, cols)), shape=(len(lo), n_vars)).tocsr()
        res = milp(
            c_vec,
            constraints=LinearConstraint(a, np.array(lo), np.array(hi)),
            integrality=integrality,
            bounds=Bounds(np.zeros(n_vars), upper),
            options={"time_limit": self.time_limit, "disp": False},
        )
        choice = dict(full)
        if res.x is None:
            notes.append(f"ILP: no solution within {self.time_limit:g} s ({res.message}); greedy answer used")
            return self._done(egraph, greedy.choice, costs, t0, notes, fallback=True)
        for c in classes:
            chosen = [i for i in by_class[c] if res.x[i] > 0.5]
            if chosen:
                choice[c] = nodes[chosen[0]]
        choice = {c: choice[c] for c in reachable(egraph, choice)}
        if res.status != 0:
            if dag_cost(egraph, choice, costs) >= greedy.dag_cost:
                notes.append(f"ILP: stopped at the time limit ({self.time_limit:g} s); greedy answer was better")
                return self._done(egraph, greedy.choice, costs, t0, notes, fallback=True)
            notes.append(f"ILP: stopped at the time limit ({self.time_limit:g} s); best solution found, not proven optimal")
        return self._done(egraph, choice, costs, t0, notes)

    def _done(self, egraph, choice, costs, t0, notes, fallback: bool = False) -> Extraction:
        return Extraction(choice, self.name + (" (greedy fallback)" if fallback else ""),
                          tree_cost(egraph, choice, costs), dag_cost(egraph, choice, costs),
                          time.perf_counter() - t0, notes)

    @staticmethod
    def _needed(egraph: EGraph, full: dict[str, str], term: set[str]) -> set[str]:
        """Term classes reachable from the roots through any node."""
        seen = set()
        stack = [r for r in egraph.roots]
        while stack:
            c = stack.pop()
            if c in seen or c not in term:
                continue
            seen.add(c)
            for n in egraph.classes.get(c, ()):
                stack.extend(egraph.nodes[n].children)
        return seen

    @staticmethod
    def _prune(egraph: EGraph, nodes: list[str], term: set[str]) -> list[str]:
        """Drop nodes with a child class that has no node left, until none is dropped."""
        alive = set(nodes)
        while True:
            has = {egraph.nodes[n].eclass for n in alive}
            dead = {n for n in alive if any(k in term and k not in has for k in egraph.nodes[n].children)}
            if not dead:
                return [n for n in nodes if n in alive]
            alive -= dead

    @staticmethod
    def _cyclic_parts(egraph: EGraph, by_class: dict[str, list[int]], nodes: list[str]) -> list[set[str]]:
        """Strongly connected parts of the class graph with more than one class (Tarjan)."""
        edges: dict[str, set[str]] = {
            c: {k for i in idx for k in egraph.nodes[nodes[i]].children if k in by_class} for c, idx in by_class.items()
        }
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        on: set[str] = set()
        st: list[str] = []
        parts: list[set[str]] = []
        counter = 0
        for start in edges:
            if start in index:
                continue
            work = [(start, iter(sorted(edges[start])))]
            index[start] = low[start] = counter
            counter += 1
            st.append(start)
            on.add(start)
            while work:
                v, it = work[-1]
                advanced = False
                for w in it:
                    if w not in index:
                        index[w] = low[w] = counter
                        counter += 1
                        st.append(w)
                        on.add(w)
                        work.append((w, iter(sorted(edges[w]))))
                        advanced = True
                        break
                    if w in on:
                        low[v] = min(low[v], index[w])
                if advanced:
                    continue
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = st.pop()
                        on.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        parts.append(comp)
        return parts
