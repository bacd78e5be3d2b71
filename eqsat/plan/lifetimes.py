"""Lifetimes of intermediate tensors in an execution order, buffers, and the lower bound.

Steps are positions in the execution order: the node at step s runs at time s. A tensor
is live from the step of the node that produces it (`first_use`) to the step of its last
consumer (`last_use`), both inclusive: a node's inputs and outputs are live at its step,
so they can never share memory unless the planner decides so (in-place reuse, views). A
tensor nothing reads is live at its producer's step only. A graph output is live to step
`len(order)`, one past the last node: the caller reads it after the run, and no node may
overwrite it (not even the last one, in place).

A *buffer* is what the arena places: one tensor with its own memory plus the tensors that
share it (views and in-place outputs, see eqsat.plan.inplace). Its size is the owner's size
rounded up to the alignment; its lifetime is the union of its members' lifetimes.

The lower bound of an order is the largest sum of the (aligned) sizes of the buffers live
at one step: buffers live at the same step must be disjoint, so no arena for that order
and those buffers can be smaller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from eqsat.plan.errors import PlanError
from eqsat.plan.graph import Graph


def align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def check_order(graph: Graph, order: list[int]) -> None:
    """`order` must be a permutation of the nodes in which producers run before consumers."""
    n = len(graph.nodes)
    if sorted(order) != list(range(n)):
        raise PlanError(f"the order is not a permutation of the {n} nodes")
    pos = [0] * n
    for s, i in enumerate(order):
        pos[i] = s
    for t, info in graph.tensors.items():
        for c in graph.consumers[t]:
            if pos[c] <= pos[info.producer]:
                raise PlanError(
                    f"the order is not topological: node '{graph.nodes[c].name}' reads '{t}' before "
                    f"node '{graph.nodes[info.producer].name}' produces it"
                )


def lifetimes(graph: Graph, order: list[int]) -> dict[str, tuple[int, int]]:
    """(first_use, last_use) of every intermediate in `order` (node indices)."""
    pos = [0] * len(graph.nodes)
    for s, i in enumerate(order):
        pos[i] = s
    end = len(order)
    outs = set(graph.outputs)
    life: dict[str, tuple[int, int]] = {}
    for t, info in graph.tensors.items():
        first = pos[info.producer]
        last = max((pos[c] for c in graph.consumers[t]), default=first)
        life[t] = (first, end if t in outs else last)
    return life


@dataclass
class Buffer:
    owner: str  # the tensor that owns the memory
    members: list[str]  # owner first, then the tensors that share it
    size: int  # aligned bytes
    start: int
    end: int


def lower_bound(buffers: list[Buffer]) -> int:
    """The largest sum of sizes of buffers live at one step."""
    if not buffers:
        return 0
    starts = np.array([b.start for b in buffers], np.int64)
    ends = np.array([b.end for b in buffers], np.int64)
    sizes = np.array([b.size for b in buffers], np.int64)
    delta = np.zeros(int(ends.max()) + 2, np.int64)
    np.add.at(delta, starts, sizes)
    np.add.at(delta, ends + 1, -sizes)
    return int(np.cumsum(delta).max())


def live_bytes(buffers: list[Buffer]) -> np.ndarray:
    """Bytes live at each step."""
    if not buffers:
        return np.zeros(0, np.int64)
    end = max(b.end for b in buffers)
    delta = np.zeros(end + 2, np.int64)
    for b in buffers:
        delta[b.start] += b.size
        delta[b.end + 1] -= b.size
    return np.cumsum(delta)[: end + 1]
