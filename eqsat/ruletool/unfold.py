"""Normalizing a rule's query for instantiation: relations unfolded into the rules that
derive them, nested patterns flattened, equal variables merged.

Contract: `variants(rule, prog)` yields `Variant`s, each a conjunctive query without
relation atoms (every relation atom replaced by the body of one rule or fact that derives
it, variables renamed apart), depth first with deriving rules in file order. A
relation that nothing derives, or a derivation deeper than `MAX_DEPTH`, gives no variant.
A function that rules `set` (other than the shape and dtype analyses, which the checker
reads from the built graph) is unfolded the same way: `(= v (f a...))` becomes the query of
one rule that sets (f a...) to v.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from eqsat.ruletool.model import Program, Rule
from eqsat.ruletool.sexp import SList, Str, Sym

MAX_DEPTH = 14  # relation atoms replaced per variant
MAX_VARIANTS = 64
MAX_STEPS = 400  # partial unfoldings explored per rule


@dataclass
class Variant:
    atoms: list  # (= a b) and guard atoms, no relation atoms
    via: list[str] = field(default_factory=list)  # names of the deriving rules used


_counter = itertools.count()


def is_var(x) -> bool:
    return isinstance(x, Sym) and x not in ("true", "false")


def rename(x, mapping: dict):
    """Rename the variables of an expression (list heads are names of functions)."""
    if isinstance(x, SList):
        out = SList([x[0]] + [rename(y, mapping) for y in x[1:]]) if x else SList()
        out.line, out.col, out.end_line = x.line, x.col, x.end_line
        return out
    if is_var(x):
        if x not in mapping:
            s = Sym(f"{x}~{next(_counter)}")
            s.line, s.col = x.line, x.col
            mapping[x] = s
        return mapping[x]
    return x


ANALYSES = ("shape", "dtype")  # functions the checker reads from the built graph


def _producers(rel: str, prog: Program) -> list[tuple[str, list, list]]:
    """(name, query, args) for each way `rel` is derived: facts, then rules in file order
    (for a function, args end with the value set). A rule's `let`s before the insertion
    become equalities of its query."""
    out = []
    for name, args in prog.facts:
        if name == rel:
            out.append((f"fact ({rel} ...)", [], list(args)))
    for name, entries in prog.tables.items():
        if name == rel:
            out += [(f"fact (set ({rel} ...))", [], list(args) + [v]) for args, v in entries]
    for r in prog.rules:
        lets = []
        for a in r.actions:
            if not isinstance(a, SList) or not a:
                continue
            if a[0] == "let":
                lets.append(SList([Sym("="), a[1], a[2]]))
            elif a[0] == rel:
                out.append((r.label, list(r.query) + list(lets), list(a[1:])))
            elif a[0] == "set" and isinstance(a[1], SList) and a[1] and a[1][0] == rel:
                out.append((r.label, list(r.query) + list(lets), list(a[1][1:]) + [a[2]]))
    return out


def _set_by_rules(prog: Program) -> set[str]:
    """Functions that some rule's actions set (the shape and dtype analyses left out)."""
    out = set()
    for r in prog.rules:
        for a in r.actions:
            if isinstance(a, SList) and len(a) == 3 and a[0] == "set" and isinstance(a[1], SList) and a[1]:
                out.add(str(a[1][0]))
    return out - set(ANALYSES)


def _as_derived(atom, derived: set[str]):
    """A relation atom as is; `(= v (f a...))` for an unfolded function f as (f a... v)."""
    if not (isinstance(atom, SList) and atom):
        return None
    if atom[0] in derived:
        return atom
    if atom[0] == "=" and len(atom) == 3:
        for call, v in ((atom[2], atom[1]), (atom[1], atom[2])):
            if isinstance(call, SList) and call and call[0] in derived:
                return SList([call[0], *call[1:], v])
    return None


def _consistent(atoms: list) -> bool:
    """False when variables equal to each other are equated with different literals."""
    parent: dict = {}

    def find(x):
        while x in parent:
            x = parent[x]
        return x

    lits: dict = {}
    eqs = [a for a in atoms if isinstance(a, SList) and len(a) == 3 and a[0] == "="]
    for a in eqs:
        if is_var(a[1]) and is_var(a[2]) and find(a[1]) != find(a[2]):
            parent[find(a[2])] = find(a[1])
    lit = lambda c: isinstance(c, (int, float, Str)) and not isinstance(c, bool)  # noqa: E731
    for a in eqs:
        if lit(a[1]) and lit(a[2]) and a[1] != a[2]:
            return False
        for v, c in ((a[1], a[2]), (a[2], a[1])):
            if is_var(v) and lit(c):
                k = find(v)
                if k in lits and lits[k] != c:
                    return False
                lits[k] = c
    return True


def variants(rule: Rule, prog: Program) -> Iterator[Variant]:
    count = 0
    steps = 0
    derived = set(prog.relations) | _set_by_rules(prog)

    def go(atoms: list, via: list, depth: int) -> Iterator[Variant]:
        nonlocal count, steps
        steps += 1
        if steps > MAX_STEPS:
            return
        idx = next((i for i, a in enumerate(atoms) if _as_derived(a, derived) is not None), None)
        if idx is None:
            if _consistent(atoms):
                count += 1
                yield Variant(atoms, via)
            return
        if depth >= MAX_DEPTH:
            return
        atom = _as_derived(atoms[idx], derived)
        for name, query, args in _producers(str(atom[0]), prog):
            if count >= MAX_VARIANTS:
                return
            m: dict = {}
            q = [rename(a, m) for a in query]
            eqs = [SList([Sym("="), x, rename(y, m)]) for x, y in zip(atom[1:], args, strict=False)]
            yield from go(atoms[:idx] + q + eqs + atoms[idx + 1:], via + [name], depth + 1)

    yield from go(list(rule.query), [], 0)


__all__ = ["Variant", "variants", "is_var", "rename", "Str"]
