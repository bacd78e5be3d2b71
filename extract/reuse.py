"""A local search after DAG greedy: switch an e-class to another of its nodes where the
program's DAG cost drops.

DAG greedy chooses each class's term by that term's own cost, so it cannot see that a value
another root needs anyway is free for this one. An MLP whose hidden activation is also a
graph output: the padded chain of rules/contraction.egg looks cheaper for the MLP's output
alone, and the program computed both chains (the ILP, which sees the whole program, keeps
one). This pass tries, for each chosen class (children first), its other nodes, each with
greedy's terms for its children; it takes a switch when the DAG cost of the whole program
drops, and starts over; it stops when no switch helps or its time budget is spent. The
result stays closed and acyclic."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping

from .check import reachable
from .egraph import EGraph

BUDGET_S = 2.0  # at most this long (DAG greedy with the pass: 0.17 s on BERT-base's e-graph)


def reuse_shared(egraph: EGraph, choice: Mapping[str, str], costs: Mapping[str, float],
                 budget_s: float = BUDGET_S) -> tuple[dict[str, str], int]:
    """(the improved choice of the classes reachable from the roots, the switches made).
    `choice` may hold classes the roots do not reach (a greedy pass's every answer): a switch
    may bring them in."""
    deadline = time.perf_counter() + budget_s
    full = dict(choice)
    order = reachable(egraph, full)
    current = sum(costs[full[c]] for c in order)
    switches = 0
    changed = True
    while changed and time.perf_counter() < deadline:
        changed = False
        for c in order:
            for nid in egraph.classes.get(c, ()):
                if nid == full[c] or not math.isfinite(costs[nid]):
                    continue
                kids = egraph.nodes[nid].children
                if c in kids or any(k not in full for k in kids):
                    continue
                old, full[c] = full[c], nid
                if c in reachable(egraph, full, kids):  # the switch would close a cycle
                    full[c] = old
                    continue
                trial = reachable(egraph, full)
                cost = sum(costs[full[k]] for k in trial)
                if cost < current - 1e-9:
                    current, order, changed = cost, trial, True
                    switches += 1
                    break
                full[c] = old
            if changed or time.perf_counter() >= deadline:
                break
    return {c: full[c] for c in order}, switches
