"""The checker every extraction passes, and its tree and DAG costs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .egraph import EGraph

# Tree costs grow exponentially with reuse on deep models (10k nodes overflow a float):
# they saturate here instead of becoming infinite, which means "no term".
TREE_COST_CAP = 1e300


class ExtractionError(Exception):
    pass


def check(egraph: EGraph, choice: Mapping[str, str]) -> None:
    """Raise ExtractionError unless every root is chosen, every chosen node belongs to its
    e-class and has all its child classes chosen (closed), and the chosen graph reachable
    from the roots has no cycle (acyclic)."""
    for r in egraph.roots:
        if r not in choice:
            raise ExtractionError(f"root e-class {r} has no chosen node")
    for c, nid in choice.items():
        node = egraph.nodes.get(nid)
        if node is None:
            raise ExtractionError(f"e-class {c}: chosen node {nid} is not an extractable node")
        if node.eclass != c:
            where = "" if c in egraph.classes else " (the e-graph has no e-class of that name)"
            raise ExtractionError(f"e-class {c}{where}: chosen node {nid} belongs to {node.eclass}")
    state: dict[str, int] = {}  # 1 on the DFS path, 2 finished
    for r in egraph.roots:
        if state.get(r) == 2:
            continue
        stack: list[tuple[str, int]] = [(r, 0)]
        state[r] = 1
        while stack:
            c, i = stack.pop()
            kids = egraph.nodes[choice[c]].children
            if i < len(kids):
                stack.append((c, i + 1))
                k = kids[i]
                if k not in choice:
                    raise ExtractionError(f"not closed: child e-class {k} of {choice[c]} has no chosen node")
                s = state.get(k)
                if s == 1:
                    path = [x for x, _ in stack]
                    loop = path[path.index(k):]
                    raise ExtractionError(f"cycle: e-class {k} is its own descendant: "
                                          + " -> ".join(f"{x} ({egraph.nodes[choice[x]].op})" for x in loop + [k]))
                if s is None:
                    state[k] = 1
                    stack.append((k, 0))
            else:
                state[c] = 2


def reachable(egraph: EGraph, choice: Mapping[str, str], roots: Iterable[str] | None = None) -> list[str]:
    """Chosen e-classes reachable from the roots (the e-graph's, unless given), children
    before parents."""
    order: list[str] = []
    seen: set[str] = set()
    for r in egraph.roots if roots is None else roots:
        if r in seen:
            continue
        stack: list[tuple[str, int]] = [(r, 0)]
        seen.add(r)
        while stack:
            c, i = stack.pop()
            try:  # indexing, not `in`: a choice may be a mapping with defaults (eqsat/backends/ort/measure.py)
                kids = egraph.nodes[choice[c]].children
            except KeyError:
                what = f"root e-class {c}" if c == r else f"e-class {c}"
                raise ExtractionError(f"not closed: {what} has no chosen node (extract.check says more)") from None
            if i < len(kids):
                stack.append((c, i + 1))
                k = kids[i]
                if k not in seen:
                    seen.add(k)
                    stack.append((k, 0))
            else:
                order.append(c)
    return order


def dag_cost(egraph: EGraph, choice: Mapping[str, str], costs: Mapping[str, float]) -> float:
    """Each chosen node reachable from the roots paid once."""
    return sum(costs[choice[c]] for c in reachable(egraph, choice))


def tree_cost(egraph: EGraph, choice: Mapping[str, str], costs: Mapping[str, float]) -> float:
    """Each node paid once per use, as if shared values were recomputed (sum over roots).
    Saturates at 1e300: on deep models with reuse it grows exponentially."""
    memo: dict[str, float] = {}
    for c in reachable(egraph, choice):
        n = egraph.nodes[choice[c]]
        memo[c] = min(costs[n.id] + sum(memo[k] for k in n.children), TREE_COST_CAP)
    return min(sum(memo[r] for r in egraph.roots), TREE_COST_CAP)
