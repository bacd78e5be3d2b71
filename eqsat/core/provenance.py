"""Instrumented rules: each rule also records which e-nodes it built, for `--explain`.

`Instrumenter()(cmds)` rewrites the parsed commands of a rule file so that every
rule, besides its own actions, inserts one row `(eqsat-explain-F a1 ... ak "RULE")` into a
relation per constructor F for each term `(F a1 ... ak)` that its actions build (the
second argument of a union, nested terms included, and `let`-bound terms: rules are
written `(union OLD NEW)`, as a rewrite desugars to; a term built in the first argument is
not recorded, since it usually names an e-node the rule matched). egglog keeps
relation rows canonical as e-classes merge, so after saturation a row names one e-node of
the serialized e-graph exactly: its constructor and its children's e-classes. A rule whose
union only merges existing classes (`(rewrite (Identity x) x)`) records the e-node it
matched instead (the `Identity` it eliminated). A rule that asserts a relation fact about
a computed value (`(tf-layernorm n x eps)`: the first argument, an Op that is not a
constant, input or Absent) records `(eqsat-fact-explain n "RULE")`, keyed by the e-class.

Contracts and limits:
- Rewrites become the rules egglog would desugar them to (same name, ruleset, conditions
  and `:subsume`), so the rule names in the run report do not change; a birewrite becomes
  two rules, the reverse one named `NAME-reverse`.
- Rows only say "rule R built (or eliminated) this e-node"; a row is written even when the
  e-node already existed (the rule re-derived it). The folding oracle's unions are not
  rules and record nothing.
- Instrumentation roughly doubles the work of each rule's actions; it is loaded only when
  an explanation is asked for (a separate cached e-graph), never on the default path.
"""

from __future__ import annotations

from collections import defaultdict

from egglog import bindings as b

from eqsat.lang.ops import LITERAL_CTORS

PREFIX = "eqsat-explain-"
FACT = "eqsat-fact-explain"  # (FACT e "RULE"): RULE asserted a relation about e-class e
LEAVES = LITERAL_CTORS + ("Input", "Absent")  # the Op constructors with no Op children
SPAN = b.PanicSpan()


def relation_name(ctor: str) -> str:
    return PREFIX + ctor


def rule_label(name: str, span) -> str:
    """A rule's name, or FILE:LINE for an unnamed rule."""
    if name:
        return name
    try:
        src = span.file
        line = src.contents[: span.i].count("\n") + 1
        return f"{src.name or '<text>'}:{line}"
    except AttributeError:
        return "<unnamed rule>"


class Instrumenter:
    """Rewrites rule commands; remembers which explain relations it has declared (one
    instance per e-graph, across all the rule files loaded into it)."""

    def __init__(self) -> None:
        self.declared: set[str] = set()
        self.constructors: dict[str, list[str]] = {}  # name -> argument sorts
        self.relations: dict[str, list[str]] = {}  # name -> argument sorts
        self.reads: dict[str, set[str]] = {}  # rule label -> relations its query reads
        self.asserts: dict[str, set[str]] = defaultdict(set)  # relation -> rules that assert it

    def fact_uses(self) -> dict[str, set[str]]:
        """For each rule, the fact rules whose relations its query reads, directly or through
        the queries of those fact rules: the recognizers a rewrite depended on."""
        direct = {r: set().union(*(self.asserts.get(rel, set()) for rel in rels)) for r, rels in self.reads.items()}
        closed: dict[str, set[str]] = {}
        for r in direct:
            seen, todo = set(), list(direct[r])
            while todo:
                f = todo.pop()
                if f not in seen:
                    seen.add(f)
                    todo.extend(direct.get(f, ()))
            closed[r] = seen
        return closed

    def __call__(self, cmds: list) -> list:
        for c in cmds:  # constructors this file declares, before its rules use them
            if isinstance(c, b.Datatype):
                for v in c.variants:
                    self.constructors[v.name] = list(v.types)
            elif isinstance(c, b.Datatypes):
                for _span, _sort, sub in c.datatypes:
                    for v in getattr(sub, "variants", []):
                        self.constructors[v.name] = list(v.types)
            elif isinstance(c, b.Constructor):
                self.constructors[c.name] = list(c.schema.input)
            elif isinstance(c, b.Relation):
                self.relations[c.name] = list(c.inputs)
        out: list = []
        for c in cmds:
            if isinstance(c, b.RewriteCommand):
                out.extend(self._rule(_rewrite_rule(c.rewrite, c.name, c.subsume), out))
            elif isinstance(c, b.BiRewriteCommand):
                rw = c.rewrite
                back = b.Rewrite(rw.span, rw.rhs, rw.lhs, rw.conditions, f"{rw.name}-reverse" if rw.name else "")
                out.extend(self._rule(_rewrite_rule(rw, c.name, False), out))
                out.extend(self._rule(_rewrite_rule(back, c.name, False), out))
            elif isinstance(c, b.RuleCommand):
                out.extend(self._rule(c.rule, out))
            else:
                out.append(c)
        return out

    def _rule(self, rule, out: list) -> list:
        label = rule_label(rule.name, rule.span)
        read: set = set()
        for f in rule.body:
            for side in (f.left, f.right) if isinstance(f, b.Eq) else (f.expr,) if isinstance(f, b.Fact) else ():
                _call_names(side, read)
        self.reads[label] = read & set(self.relations)
        bound = set()
        for f in rule.body:
            _vars(f.left if isinstance(f, b.Eq) else None, bound)
            _vars(f.right if isinstance(f, b.Eq) else None, bound)
            _vars(f.expr if isinstance(f, b.Fact) else None, bound)
        built: list = []
        facts: list = []  # e-classes a relation fact is about (its first argument)
        for a in rule.head:
            if isinstance(a, b.Let):
                _ctor_calls(a.rhs, self.constructors, built)
                bound.add(a.lhs)
            elif isinstance(a, b.Union):  # (union OLD NEW), as a rewrite desugars
                before = len(built)
                _ctor_calls(a.rhs, self.constructors, built)
                if len(built) == before:  # NEW exists already: record the e-node OLD names
                    for side in (a.lhs, a.rhs):
                        m = _matched(side, rule.body) if isinstance(side, b.Var) else side
                        if isinstance(m, b.Call) and m.name in self.constructors:
                            built.append(m)
                            break
            elif isinstance(a, b.Expr_) and isinstance(a.expr, b.Call) and self._about(a.expr, rule.body):
                facts.append(a.expr.args[0])
                self.asserts[a.expr.name].add(label)
        extra: list = []
        seen: set[str] = set()
        for call in built:
            if not _vars_in(call, bound):
                continue  # refers to something the action cannot see (a wildcard)
            key = repr(call)
            if key in seen:
                continue
            seen.add(key)
            rel = relation_name(call.name)
            if rel not in self.declared:
                self.declared.add(rel)
                out.append(b.Relation(SPAN, rel, self.constructors[call.name] + ["String"]))
            extra.append(b.Expr_(SPAN, b.Call(SPAN, rel, list(call.args) + [b.Lit(SPAN, b.String(label))])))
        for e in facts:
            if not _vars_in(e, bound) or repr(e) in seen:
                continue
            seen.add(repr(e))
            if FACT not in self.declared:
                self.declared.add(FACT)
                out.append(b.Relation(SPAN, FACT, ["Op", "String"]))
            extra.append(b.Expr_(SPAN, b.Call(SPAN, FACT, [e, b.Lit(SPAN, b.String(label))])))
        if not extra:
            return [b.RuleCommand(rule)]
        return [b.RuleCommand(b.Rule(rule.span, list(rule.head) + extra, list(rule.body), rule.name, rule.ruleset))]


    def _about(self, call, body: list) -> bool:
        """A relation fact whose first argument is an Op that is not a leaf (a constant,
        input or Absent): a fact about a computed value, worth recording."""
        sorts = self.relations.get(call.name)
        if not sorts or sorts[0] != "Op" or not call.args:
            return False
        first = call.args[0]
        m = _matched(first, body) if isinstance(first, b.Var) else first
        return not (isinstance(m, b.Call) and m.name in LEAVES)


def _rewrite_rule(rw, ruleset: str, subsume: bool):
    """A rewrite as the rule egglog desugars it to: ((= v LHS) COND...) ((union v RHS))."""
    v = b.Var(SPAN, "__eqsat_lhs")
    head = [b.Union(SPAN, v, rw.rhs)]
    if subsume and isinstance(rw.lhs, b.Call):
        head.append(b.Change(SPAN, b.Subsume(), rw.lhs.name, list(rw.lhs.args)))
    body = [b.Eq(SPAN, v, rw.lhs)] + list(rw.conditions)
    return b.Rule(rw.span, head, body, rw.name, ruleset)


def _vars(e, out: set) -> None:
    if isinstance(e, b.Var):
        out.add(e.name)
    elif isinstance(e, b.Call):
        for a in e.args:
            _vars(a, out)


def _vars_in(e, bound: set) -> bool:
    found: set = set()
    _vars(e, found)
    return found <= bound


def _call_names(e, out: set) -> None:
    if isinstance(e, b.Call):
        out.add(e.name)
        for a in e.args:
            _call_names(a, out)


def _ctor_calls(e, ctors: dict, out: list) -> None:
    """Every constructor call in expression e, outermost first."""
    if isinstance(e, b.Call):
        if e.name in ctors:
            out.append(e)
        for a in e.args:
            _ctor_calls(a, ctors, out)


def _matched(var, body: list):
    """The constructor term a query binds `var` to, `(= var (F ...))`, or None."""
    for f in body:
        if isinstance(f, b.Eq):
            if isinstance(f.left, b.Var) and f.left.name == var.name and isinstance(f.right, b.Call):
                return f.right
            if isinstance(f.right, b.Var) and f.right.name == var.name and isinstance(f.left, b.Call):
                return f.left
    return None
