"""Valid programs of one e-graph, sampled for compare-costs without centring them on one
cost model.

A program is a choice (e-class -> e-node) closed over the classes reachable from the roots
and acyclic (`eqsat.extract.check`), kept only for the classes reachable from the roots, so
that two choices that differ only off the program are one program. Four kinds, taken in
turn until enough distinct ones are found:

- `uniform`: every class, reached from the roots depth first, picks a node at random among
  those whose children are not on the path being built (backtracking where a pick leads
  nowhere): each node that keeps the choice closed and acyclic is as likely as another;
- `walk`: a random walk from a cost model's optimum, one class's node changed a step
  (`mutate`), the walk restarting from the next optimum after WALK_STEPS steps;
- `mutation`: one to three classes of a program already sampled changed at random;
- `perturbed`: DAG greedy on the roofline's costs times lognormal noise (the old sampler:
  programs near what a sensible model picks).

A change is repaired by building the program again with every other class preferring its
node of before: children not chosen yet get nodes at random, and a node that would close a
cycle gives way to another. Only nodes every compared cost model prices finitely are
picked (`allowed`). All randomness comes from one `random.Random(seed)`.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from eqsat.extract import EGraph
from eqsat.extract.check import ExtractionError, check, reachable

KINDS = ("uniform", "walk", "mutation", "perturbed")
WALK_STEPS = 8
ENUMERATE_LIMIT = 20000  # steps of the exhaustive count, when sampling finds too few


def allowed(eg: EGraph, tables: list[dict[str, float]]) -> dict[str, list[str]]:
    """e-class -> the nodes a program may choose there: priced finitely by every table, and
    whose children each have such a term (a least fixpoint: a node that only cycles back is
    never completed)."""
    ok = {c: [n for n in ns if all(t.get(n, 1.0) < float("inf") for t in tables)] for c, ns in eg.classes.items()}
    built: set[str] = set()
    changed = True
    while changed:
        changed = False
        for c, ns in ok.items():
            if c not in built and any(all(k in built for k in eg.nodes[n].children) for n in ns):
                built.add(c)
                changed = True
    return {c: [n for n in ns if all(k in built for k in eg.nodes[n].children)] for c, ns in ok.items()}


def program(eg: EGraph, choice: dict[str, str]) -> dict[str, str]:
    """The choice on the classes reachable from the roots only."""
    return {c: choice[c] for c in reachable(eg, choice)}


def build(eg: EGraph, ok: dict[str, list[str]], rng: random.Random, prefer: dict[str, str] | None = None,
          force: dict[str, str] | None = None, budget: int | None = None) -> dict[str, str] | None:
    """A closed acyclic program, built depth first from the roots: each class tries its
    `force` node, then its `prefer` node, then the others in random order, and takes the
    first whose children all complete without reaching a class on the path. None when no
    program completes within `budget` steps."""
    prefer, force = prefer or {}, force or {}
    steps = budget or 50 * len(eg.classes) + 1000
    choice: dict[str, str] = {}
    path: set[str] = set()

    def frame(c: str) -> list:
        rest = ok.get(c, [])[:]
        rng.shuffle(rest)
        first = [n for n in (force.get(c), prefer.get(c)) if n is not None and n in rest]
        return [c, list(dict.fromkeys(first + rest)), 0, 0]  # class, candidates, which, next child

    for root in eg.roots:
        if root in choice:
            continue
        path.add(root)
        stack = [frame(root)]
        while stack:
            steps -= 1
            if steps < 0:
                return None
            f = stack[-1]
            c, cands, ci, ki = f
            if ci >= len(cands):  # no node of this class completes here: its parent tries another
                stack.pop()
                path.discard(c)
                if not stack:
                    return None
                stack[-1][2] += 1
                stack[-1][3] = 0
                continue
            kids = eg.nodes[cands[ci]].children
            if ki >= len(kids):
                choice[c] = cands[ci]
                stack.pop()
                path.discard(c)
                if stack:
                    stack[-1][3] += 1
            elif kids[ki] in choice:
                f[3] += 1
            elif kids[ki] in path:  # a cycle: the next candidate
                f[2], f[3] = ci + 1, 0
            else:
                path.add(kids[ki])
                stack.append(frame(kids[ki]))
    return program(eg, choice)


def mutate(eg: EGraph, ok: dict[str, list[str]], rng: random.Random, choice: dict[str, str],
           changes: int = 1) -> dict[str, str] | None:
    """`choice` with `changes` of its classes (those with another node to pick) given
    another node at random, repaired (`build`); None when nothing changed."""
    open_ = [c for c in choice if len(ok.get(c, ())) > 1]
    if not open_:
        return None
    force = {}
    for c in rng.sample(open_, min(changes, len(open_))):
        force[c] = rng.choice([n for n in ok[c] if n != choice[c]])
    new = build(eg, ok, rng, prefer=choice, force=force)
    return None if new is None or new == choice else new


def enumerate_all(eg: EGraph, ok: dict[str, list[str]], limit: int = ENUMERATE_LIMIT) -> list[dict[str, str]] | None:
    """Every distinct program, or None when there are too many to list within `limit` steps."""
    found: dict[frozenset, dict[str, str]] = {}
    steps = [limit]

    def rec(choice: dict[str, str], todo: list[str]) -> bool:
        steps[0] -= 1
        if steps[0] < 0:
            return False
        todo = [c for c in todo if c not in choice]
        if not todo:
            try:
                check(eg, choice)
            except ExtractionError:
                return True
            found.setdefault(frozenset(choice.items()), dict(choice))
            return True
        c = todo[0]
        for n in ok.get(c, []):
            choice[c] = n
            if not rec(choice, todo[1:] + list(eg.nodes[n].children)):
                return False
            del choice[c]
        return True

    try:
        return list(found.values()) if rec({}, list(eg.roots)) else None
    except RecursionError:
        return None


def sample(eg: EGraph, ok: dict[str, list[str]], n: int, seed: int, starts: list[dict[str, str]],
           perturbed: Callable[[int], dict[str, str]]) -> tuple[list[dict[str, str]], list[str], str]:
    """`starts` (the cost models' own programs, kind `chosen`) and at least `n` more distinct
    programs, the kinds in turn (KINDS; `perturbed(seed)` gives a perturbed one), with
    each one's kind and a note: empty, or how many distinct programs the e-graph has (or
    sampling found) when that is fewer."""
    rng = random.Random(seed)
    progs: list[dict[str, str]] = []
    kinds: list[str] = []
    seen: set[frozenset] = set()

    def add(p: dict[str, str] | None, kind: str) -> None:
        if p is not None and (key := frozenset(p.items())) not in seen:
            seen.add(key)
            progs.append(p)
            kinds.append(kind)

    for s in starts:
        add(program(eg, s), "chosen")
    want = len(progs) + n
    walker = {"at": dict(progs[0]) if progs else None, "start": 0, "steps": 0}
    tries = 0
    while len(progs) < want and tries < 20 * n + 100:
        kind = KINDS[tries % len(KINDS)]
        tries += 1
        add(_one(eg, ok, rng, kind, progs, starts, walker, perturbed), kind)
    if len(progs) >= want:
        return progs, kinds, ""
    every = enumerate_all(eg, ok)
    if every is None:
        return progs, kinds, f"only {len(progs)} distinct programs found in {tries} tries"
    for p in every:
        add(p, "uniform")
    return progs, kinds, f"the e-graph has only {len(every)} distinct programs"


def _one(eg: EGraph, ok: dict[str, list[str]], rng: random.Random, kind: str, progs: list[dict[str, str]],
         starts: list[dict[str, str]], walker: dict,
         perturbed: Callable[[int], dict[str, str]]) -> dict[str, str] | None:
    """One candidate program of `kind`."""
    if kind == "uniform":
        return build(eg, ok, rng)
    if kind == "perturbed":
        return program(eg, perturbed(rng.randrange(2 ** 31)))
    if kind == "mutation":
        return mutate(eg, ok, rng, rng.choice(progs), rng.randint(1, 3)) if progs else build(eg, ok, rng)
    if walker["at"] is None or walker["steps"] >= WALK_STEPS:  # a walk: restart from the next optimum
        walker["start"] += 1
        walker["at"] = program(eg, starts[walker["start"] % len(starts)]) if starts else build(eg, ok, rng)
        walker["steps"] = 0
    walker["steps"] += 1
    nxt = mutate(eg, ok, rng, walker["at"]) if walker["at"] is not None else None
    if nxt is not None:
        walker["at"] = nxt
    return nxt
