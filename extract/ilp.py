"""Exact DAG-cost extraction as an integer linear program (scipy.optimize.milp, HiGHS).

Variables: x_n in {0, 1} per e-node (chosen or not). Constraints: each root class chooses
one node; a class chooses at most one; a chosen node's child classes choose one each.
Objective: the sum of the chosen nodes' costs, i.e. the DAG cost, each node paid once
however many parents share it.

Acyclicity. Cuts first: each cycle among the chosen nodes of a solution becomes a cut over
the e-classes on it (not all of them may choose a node that leads around the cycle), short
cycles (a node whose child class holds a node back to it) are cut before the first solve,
and the program is solved again until the solution is acyclic. Order variables with big-M
constraints, the textbook encoding, are slow on e-graphs dense with commutativity cycles,
so they are added only to the strongly connected components where `lazy_rounds` rounds of
cuts did not converge. Nodes that are their own child, and nodes dominated by a cheaper
node of the same class with a subset of its children, are dropped before the program is
built; neither changes the optimum.

Only term classes (sort Op and OpList) are decisions: value classes (integers, vectors,
dtypes, attributes) have a single node each, filled in afterwards; each is a variable only so
that the objective pays its cost once when some chosen node needs it (the DAG cost counts
every node of the choice).

Result. Every extraction carries a status and a lower bound: `optimal` (proven),
`gap` (the time limit, default 60 s over all rounds, stopped HiGHS with a solution of its
own, better than the greedy answers; the lower bound is HiGHS's dual bound) or `fallback`
(no acyclic solution in time, or none better than the greedy answers, tree and DAG, the DAG
one only up to DAG_GREEDY_MAX_NODES e-nodes; the bound is the best one proven, the LP
relaxation's where no solve finished). The notes say which.

Layouts. Where the e-graph holds a value both in NCHW and in onnxruntime's channel-blocked
layout (rules/layout.egg), the ILP chooses the layouts with everything else (_joint): it
solves the program with each value's layout fixed from the greedy answer first (fast: its
LP relaxation is tight), then the program over every layout in the time left, and returns
the latter's answer where it is proven optimal, else the better of the two with status
`gap` and the bound over every layout. `ILP(fix_layouts=True)` (the extractor
ilp-fixed-layouts, extract/ilp_fixed_layouts.py) solves only the first: optimal for that
layout choice, and its notes say so.

Need rows. Every program has them (_need_rows): where every node of a class needs a value,
directly or through its descendants (in one layout or another), the value's classes choose
at least as much as the class. Without them the LP relaxation spreads a class over
alternatives with different children that all lead back to one value, and pays that value
only at the fraction each alternative is chosen, compounding layer by layer. A value's forms
(FORMS: its layouts, Transposes, Q and DQ, between which Q(DQ(x)) = x and
Transpose(Transpose(x)) = x cycle) are one group, with a variable that says the value is
computed. The bounds they gave are in benchmarks/results/extraction.md.

Work. Where the e-graph records the input program (eqsat.input_nodes), one more row bounds
the chosen contractions (convolutions, products, attention) by the input's
(extract/work.py): no program computes a shared convolution twice to save an Add, whatever
the cost model prices. Where the layouts fixed from the greedy answer leave no program
within the bound, the fixed stage solves over every layout; where no program at all meets
it, it is solved without, and the notes say so; `ILP(bound_work=False)` never adds it.
"""

from __future__ import annotations

import math
import os
import time

from .base import Extraction, Extractor
from .check import ExtractionError, dag_cost, reachable, tree_cost
from .costs import CostModel
from .dag_greedy import DagGreedy
from .egraph import EGraph
from .nchwc import NCHWC_OPS, REORDER_INPUT, REORDERS
from .tree_greedy import TreeGreedy
from .work import contraction_bound, contractions

TERM_SORTS = ("Op", "OpList", "")
# Ops that give their first child's value in another form, computing nothing new: the need rows
# group each value with its forms (_value_groups): layout reorders (NCHWc), Transposes
# (channels last, rules/qdq_nhwc.egg) and Q / DQ.
FORMS = REORDERS | {"Transpose", "QuantizeLinear", "DequantizeLinear"}
# DAG greedy's sets of nodes grow with the depth of the model: its time is quadratic (50 s on
# a 10k-node transformer's 47k e-nodes, where the ILP takes 16 s); above this it is no fallback.
DAG_GREEDY_MAX_NODES = 20_000


def solver_log() -> bool:
    """EQSAT_ILP_DISP: 1 prints HiGHS's log (for studying hard e-graphs); 0, unset or blank
    does not. Any other value is a ValueError naming the variable (eqsat's commands check it
    before any work: eqsat.environment)."""
    raw = os.environ.get("EQSAT_ILP_DISP", "")
    v = raw.strip()
    if v not in ("", "0", "1"):
        raise ValueError(f"EQSAT_ILP_DISP is {raw!r}; expected 0 or 1 (unset: the default, 0)")
    return v == "1"


class ILP(Extractor):
    name = "ilp"
    optimal = True

    def __init__(self, time_limit: float = 60.0, fix_layouts: bool = False, bound_work: bool = True) -> None:
        self.time_limit = time_limit
        self.bound_work = bound_work  # no more contractions than the input program, where the e-graph records it
        # False (the ilp extractor): the program with the layouts fixed from the greedy answer
        # first, then the program over every layout (_joint); True: only the first
        # (fix_layouts(); the extractor ilp-fixed-layouts)
        self.fix_layouts = fix_layouts
        self.lazy_rounds = 20  # rounds of lazy cycle cuts before order variables on the cyclic part

    def extract(self, egraph: EGraph, cost: CostModel) -> Extraction:
        if not self.fix_layouts and any(n.op in NCHWC_OPS for n in egraph.nodes.values()):
            return self._joint(egraph, cost)
        return self._extract(egraph, cost)

    def _joint(self, egraph: EGraph, cost: CostModel) -> Extraction:
        """Layouts chosen with everything else. The program with each value's layout fixed
        from the greedy answer is solved first (fast: its LP relaxation is tight), then the
        program over every layout in the time left. The answer is the joint program's where
        it is proven; else the better of the two, with the joint program's lower bound (a
        bound over every layout choice) and its gap."""
        t0 = time.perf_counter()
        fixed = ILP(self.time_limit, fix_layouts=True, bound_work=self.bound_work)._extract(egraph, cost)
        second = ILP(max(self.time_limit - (time.perf_counter() - t0), 1.0), fix_layouts=False,
                     bound_work=self.bound_work)
        joint = second._extract(egraph, cost, incumbent=fixed)
        elapsed = time.perf_counter() - t0
        if joint.status == "optimal":
            joint.time_s, joint.extractor = elapsed, self.name
            joint.notes.append("ILP: layouts chosen with the rest, proven optimal over every layout choice")
            return joint
        # the joint stage's fallback is the fixed answer (its incumbent), not a greedy one
        best = joint if joint.status == "gap" and joint.dag_cost < fixed.dag_cost else fixed
        bound = joint.lower_bound
        notes = [n for n in best.notes if not n.startswith("ILP: lower bound")]
        notes.append(f"ILP: the program over every layout choice not proven within {self.time_limit:g} s; "
                     f"answer {'its own' if best is joint else 'with the layouts fixed from the greedy answer'}")
        ex = Extraction(best.choice, self.name, best.tree_cost, best.dag_cost, elapsed, notes,
                        lower_bound=None if bound is None else min(bound, best.dag_cost), status="gap")
        notes.append(f"ILP: lower bound {ex.lower_bound:.6g}, gap {ex.gap:.2%}" if bound is not None
                     else "ILP: no lower bound over every layout choice (no relaxation solved in time)")
        return ex

    def _extract(self, egraph: EGraph, cost: CostModel, incumbent: Extraction | None = None) -> Extraction:
        """One solve: with the layouts fixed from the greedy answer (fix_layouts) or over
        every layout. `incumbent` (the fixed solve's answer, for the solve over every layout)
        stands in for the greedy answers where one is needed."""
        t0 = time.perf_counter()
        costs = cost.costs(egraph)
        notes: list[str] = []
        if not egraph.roots:  # nothing to compute: the empty choice (and no program for HiGHS)
            return self._done(egraph, {}, costs, t0, notes)
        memo: list[Extraction] = [incumbent] if incumbent is not None else []

        def greedy() -> Extraction:
            """The better of the two greedy answers (DAG greedy pays shared values once, but
            its time grows with the square of the e-graph: skipped on large ones), computed
            only when needed: to fix layouts, or when the optimum is not proven."""
            if not memo:
                fallbacks = [TreeGreedy().extract(egraph, cost)]
                if len(egraph.nodes) <= DAG_GREEDY_MAX_NODES:
                    fallbacks.append(DagGreedy().extract(egraph, cost))
                else:
                    notes.append(f"DAG greedy skipped ({len(egraph.nodes)} e-nodes > {DAG_GREEDY_MAX_NODES})")
                memo.append(min(fallbacks, key=lambda e: e.dag_cost))
            return memo[0]

        full = TreeGreedy().choose_all(egraph, cost)
        if any(r not in full for r in egraph.roots):
            missing = next(r for r in egraph.roots if r not in full)
            raise ExtractionError(f"root e-class {missing} has no finite-cost acyclic term "
                                  "(every term is infinite or holds a cycle)")
        term = {c for c in egraph.classes if egraph.class_type(c) in TERM_SORTS}
        nodes, layout_note = self._candidates(egraph, full, term, costs), ""
        if self.fix_layouts and any(egraph.nodes[n].op in NCHWC_OPS for n in nodes):
            fixed = fix_layouts(egraph, nodes, greedy().choice)
            if fixed is not None:
                nodes, layout_note = fixed
                notes.append(layout_note)
        nodes = reduce_nodes(egraph, self._prune(egraph, nodes, term), term, costs, self.bound_work)
        if any(r not in {egraph.nodes[n].eclass for n in nodes} for r in egraph.roots):
            raise ExtractionError("no acyclic choice: every term of a root e-class holds a cycle")
        prog = _Program(egraph, nodes, term, full, costs, contraction_bound(egraph) if self.bound_work else None)
        prog.fixed_layouts = bool(layout_note)
        deadline = t0 + self.time_limit
        res, cuts = self._solve(egraph, prog, deadline, notes)
        if res == "layouts":  # the fixed layouts exclude every program within the bound
            joint = ILP(time_limit=max(deadline - time.perf_counter(), 1.0), fix_layouts=False,
                        bound_work=self.bound_work)
            ex = joint._extract(egraph, cost)
            ex.notes[:0] = [f"ILP: the layouts fixed from the greedy answer need more than the input's {prog.bound} "
                            "contractions; layouts chosen by the ILP"]
            ex.time_s = time.perf_counter() - t0
            return ex
        if cuts:
            notes.append(f"ILP: {len(cuts)} cycle cuts")
        if prog.lower_bound is None:  # no solve finished: the LP relaxation's optimum, which is fast
            prog.note_bound(prog.solve(list(cuts.items()), max(1.0, 0.1 * self.time_limit), integral=False))
        if res is None or res.x is None or self._cycles(egraph, prog.chosen(res.x), prog.index):
            why = "no solution" if res is None or res.x is None else "cycles remained"
            notes.append(f"ILP: {why} within {self.time_limit:g} s; greedy answer used")
            return self._done(egraph, greedy().choice, costs, t0, notes, "fallback", prog.lower_bound)
        choice = {**full, **prog.chosen(res.x)}
        choice = {c: choice[c] for c in reachable(egraph, choice)}
        status = "optimal"
        if res.status != 0:
            best, status = greedy(), "gap"
            if dag_cost(egraph, choice, costs) >= best.dag_cost:
                notes.append(f"ILP: stopped at the time limit ({self.time_limit:g} s); greedy answer was better")
                return self._done(egraph, best.choice, costs, t0, notes, "fallback", prog.lower_bound)
            notes.append(f"ILP: stopped at the time limit ({self.time_limit:g} s); "
                         "best solution found, not proven optimal")
        elif layout_note:
            notes.append("ILP: proven optimal for the fixed layouts, not over every layout choice")
        if memo and memo[0].dag_cost < dag_cost(egraph, choice, costs):
            notes.append(self._why_greedy_cheaper(egraph, memo[0], prog.bound))
        return self._done(egraph, choice, costs, t0, notes, status, prog.lower_bound)

    @staticmethod
    def _why_greedy_cheaper(egraph: EGraph, best: Extraction, bound: int | None) -> str:
        """Why a greedy answer costs less than the ILP's: the work bound excludes it (more
        contractions than the input), or else the layouts fixed before solving do."""
        done = sum(contractions(egraph, egraph.nodes[best.choice[c]]) for c in reachable(egraph, best.choice))
        if bound is not None and done > bound:
            return (f"ILP: the greedy answer costs less ({best.dag_cost:.6g}) but computes {done} contractions, "
                    f"more than the input's {bound} (the work bound)")
        return f"ILP: the greedy answer costs less ({best.dag_cost:.6g}) under layouts the fixed ones exclude"

    def _candidates(self, egraph: EGraph, full: dict[str, str], term: set[str], costs: dict[str, float]) -> list[str]:
        """The finite-cost nodes of the term classes the roots reach, in a fixed order (ties
        break the same way every run), less those that are their own child."""
        needed = sorted(self._needed(egraph, full, term))
        return [n for c in needed for n in egraph.classes[c]
                if not math.isinf(costs[n]) and egraph.nodes[n].eclass not in set(egraph.nodes[n].children)]

    def _solve(self, egraph: EGraph, prog: _Program, deadline: float, notes: list[str]):
        """HiGHS on `prog` with lazy acyclicity: solve with the cuts of the short cycles
        among classes (prog.short_cycles), then forbid each cycle the solution holds and
        solve again, until the solution is acyclic. A cut forbids a cycle of classes, not
        only of the nodes chosen: of the nodes of each class of the cycle that lead to the
        next class, at most one class fewer than the cycle's length is chosen, so one cut
        forbids every way round. Each solve's dual bound is a lower bound on the acyclic
        optimum (it has fewer constraints): prog.lower_bound keeps the best. Returns
        (scipy's result or None, the cuts), or ("layouts", cuts) where the layouts fixed
        before solving leave no program within the work bound. Where the bound cannot hold
        at all, it is dropped and the notes say so."""
        cuts: dict[tuple[int, ...], float] = {tuple(i): r for i, r in prog.short_cycles(egraph)}
        res, rounds, start = None, 0, time.perf_counter()
        while (remaining := deadline - time.perf_counter()) > 0:
            rounds += 1
            if not prog.ordered and (rounds > self.lazy_rounds or time.perf_counter() - start > remaining / 3):
                notes.append(f"ILP: order variables on {prog.add_order()} e-classes in cycles "
                             f"(lazy cuts did not converge in {rounds - 1} rounds)")
            res = prog.solve(list(cuts.items()), remaining)
            if res.x is None and res.status == 2 and prog.guard is not None and prog.fixed_layouts:
                return "layouts", cuts
            if res.x is None and res.status == 2 and prog.guard is not None:  # infeasible: the bound cannot hold
                prog.drop_bound()
                notes.append(f"ILP: no program within the input's {prog.bound} contractions; solved without the bound")
                continue
            if res.x is None and res.status == 2:
                raise ExtractionError("no acyclic choice: every choice for the roots holds a cycle")
            prog.note_bound(res)
            if res.x is None:
                break
            found = self._cycles(egraph, prog.chosen(res.x), prog.index)
            if not found:
                break
            for cyc in found:
                idx, rhs = prog.cycle_cut(egraph, cyc)
                cuts[tuple(idx)] = min(rhs, cuts.get(tuple(idx), rhs))
        return res, cuts

    @staticmethod
    def _cycles(egraph: EGraph, chosen: dict[str, str], index: dict[str, int]) -> list[list[str]]:
        """Cycles among the chosen nodes reachable from the roots, as lists of e-classes (each
        class's chosen node has the next class as a child, the last the first)."""
        out: list[list[str]] = []
        state: dict[str, int] = {}
        for r in egraph.roots:
            if r in state or r not in chosen:
                continue
            path: list[str] = []
            stack: list[tuple[str, int]] = [(r, 0)]
            state[r] = 1
            path.append(r)
            while stack:
                c, i = stack.pop()
                kids = [k for k in egraph.nodes[chosen[c]].children if k in chosen]
                if i < len(kids):
                    stack.append((c, i + 1))
                    k = kids[i]
                    if state.get(k) == 1:
                        out.append(path[path.index(k):])
                    elif k not in state:
                        state[k] = 1
                        path.append(k)
                        stack.append((k, 0))
                else:
                    state[c] = 2
                    path.pop()
        return out

    def _done(self, egraph, choice, costs, t0, notes, status: str = "optimal",
              bound: float | None = None) -> Extraction:
        """The extraction, with the proven lower bound (for the problem solved: fixed layouts and
        the work bound included) and its gap in the notes."""
        dag = dag_cost(egraph, choice, costs)
        if status == "optimal" and bound is None:
            bound = dag  # nothing to choose (no roots)
        ex = Extraction(choice, self.name + (" (greedy fallback)" if status == "fallback" else ""),
                        tree_cost(egraph, choice, costs), dag, time.perf_counter() - t0, notes,
                        lower_bound=None if bound is None else min(bound, dag), status=status)
        if status != "optimal":
            notes.append(f"ILP: lower bound {bound:.6g}, gap {ex.gap:.2%}" if bound is not None
                         else "ILP: no lower bound (no relaxation solved in time)")
        return ex

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
    def _values(egraph: EGraph, nodes: list[str], term: set[str], full: dict[str, str]) -> list[str]:
        """Value classes (not term classes) that the candidate nodes reach, through the value
        nodes `full` chose for them, in a fixed order."""
        seen: set[str] = set()
        stack = [k for n in nodes for k in egraph.nodes[n].children if k not in term]
        while stack:
            c = stack.pop()
            if c in seen or c in term or c not in full:
                continue
            seen.add(c)
            stack.extend(egraph.nodes[full[c]].children)
        return sorted(seen)

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


class _Program:
    """The integer program of one extraction: x_n per candidate node and y_c per value class
    the candidates reach; rows: each class chooses at most one node (a root exactly one); a
    chosen node's child classes choose one each; a chosen class's needed values are chosen
    (_need_rows); a value class is paid once when a chosen node needs it; and, where the
    e-graph records the input program, no more contractions than the input's
    (extract/work.py)."""

    def __init__(self, egraph: EGraph, nodes: list[str], term: set[str], full: dict[str, str],
                 costs: dict[str, float], bound: int | None) -> None:
        import numpy as np

        self.nodes, self.index = nodes, {n: i for i, n in enumerate(nodes)}
        self.fixed_layouts = False
        self.lower_bound: float | None = None  # the best dual bound of a solve so far
        self.kids = [set(egraph.nodes[n].children) & term for n in nodes]
        self.nodes_class = [egraph.nodes[n].eclass for n in nodes]
        self.ops = [egraph.nodes[n].op for n in nodes]
        self.by_class: dict[str, list[int]] = {}
        for n in nodes:
            self.by_class.setdefault(egraph.nodes[n].eclass, []).append(self.index[n])
        self.classes = sorted(self.by_class)
        if any(r not in self.by_class for r in egraph.roots):
            raise ExtractionError("a root e-class has no finite-cost acyclic term")
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        roots = set(egraph.roots)
        for c in self.classes:
            self.row([(i, 1.0) for i in self.by_class[c]], 1.0 if c in roots else 0.0, 1.0)
        # A chosen node's child classes choose one each, one row per class and child class:
        # the nodes of c that need k, summed, at most k's (a class chooses at most one node,
        # so this holds for every integer answer). Stronger in the LP relaxation than a row
        # per node, where the relaxation spread a class over alternatives with different
        # children and halved what each child class had to pay at every layer.
        needs: dict[tuple[str, str], list[int]] = {}
        for n in nodes:
            for k in set(egraph.nodes[n].children):
                if k in term:
                    needs.setdefault((egraph.nodes[n].eclass, k), []).append(self.index[n])
        for (_c, k), parents in sorted(needs.items()):
            self.row([(i, 1.0) for i in parents] + [(j, -1.0) for j in self.by_class[k]], -np.inf, 0.0)
        # Value classes (integers, vectors, attributes) hold one node each: y_c = 1 when some
        # chosen node needs c. They are not decisions, but the DAG cost pays each once, so
        # they are in the objective (a model may charge them, as the CostModel contract allows).
        values = ILP._values(egraph, nodes, term, full)
        vindex = {c: len(nodes) + j for j, c in enumerate(values)}
        for n in nodes:  # children in argument order, not a set's: the rows' order is HiGHS's tie-break
            for k in dict.fromkeys(egraph.nodes[n].children):
                if k in vindex:
                    self.row([(self.index[n], 1.0), (vindex[k], -1.0)], -np.inf, 0.0)
        for c in values:
            for k in dict.fromkeys(egraph.nodes[full[c]].children):
                if k in vindex:
                    self.row([(vindex[c], 1.0), (vindex[k], -1.0)], -np.inf, 0.0)
        # No more contractions than the input program: a shared convolution or product is
        # never computed twice to save other ops, whatever the cost model says.
        self.bound = bound
        self.guard = len(self.lo) if bound is not None else None
        if self.guard is not None:
            self.row([(self.index[n], float(k)) for n in nodes if (k := contractions(egraph, egraph.nodes[n]))],
                     -np.inf, float(bound))
        self.n_x = len(nodes) + len(values)
        self.c_vec = np.array([costs[n] for n in nodes] + [costs[full[c]] for c in values])
        self.upper = np.ones(self.n_x)
        self.integral = np.ones(self.n_x)
        self.ordered = 0  # classes given an order variable (add_order)
        self._need_rows(egraph)  # after the other columns: it adds the groups' variables

    def _need_rows(self, egraph: EGraph) -> None:
        """Rows a chosen class must pay for its whole subtree. The classes are grouped: a value
        and its other forms (classes joined by a FORMS node among the candidates: a layout
        reorder, so none where fix_layouts dropped it, a Transpose, a Q or a DQ), any other
        class alone. Where every node of class c needs, directly or through its descendants,
        a class of group g, g is chosen at least as much as c; a group of several classes
        has a variable v_g in [0, 1], at least each of its classes, at most its nodes that
        are not a FORMS node of a class of g (`made`), and at least what the group needs (the
        groups every class of it needs). Valid for every acyclic answer, whatever the
        grouping, v_g being 1 where a class of g is chosen: a chosen node's child classes are
        chosen, and each of them needs what it needs; from a chosen class of g, following
        chosen FORMS nodes within g ends, the answer being acyclic, at a class of g that
        chooses another node.

        Without them the LP relaxation spread each value over alternatives with different
        children (its layouts, a fused and an unfused form, a Q before or after a Reshape)
        and paid each layer's subtree at a fraction of the layer above's share, layer by
        layer; and without `made` it took a value's forms round their cycles (Q(DQ(x)) = x,
        Transpose(Transpose(x)) = x) each at a fraction, the value computed nowhere. Only
        the nearest groups are rows, of a class or of a group: those no other needed group
        needs (the rest follow through the group's rows), and none that the child-class rows
        already give, so the rows grow linearly with the classes."""
        import numpy as np

        group = _value_groups(egraph, {c: [self.nodes[i] for i in self.by_class[c]] for c in self.classes})
        gid = {g: i for i, g in enumerate(sorted(set(group.values())))}
        members: dict[int, list[str]] = {}
        for c in self.classes:
            members.setdefault(gid[group[c]], []).append(c)
        bit = {c: 1 << gid[group[c]] for c in self.classes}
        full = (1 << len(gid)) - 1
        need = self._needs(bit, full)
        group_need = {}  # what every class of a group needs
        for g, cls in members.items():
            m = full
            for k in cls:
                m &= need[k]
            group_need[g] = m & ~(1 << g)
        # a variable per group of several classes, after the other columns
        var = {g: self.n_x + j for j, g in enumerate(g for g in sorted(members) if len(members[g]) > 1)}
        self.n_x += len(var)
        self.c_vec = np.concatenate([self.c_vec, np.zeros(len(var))])
        self.upper = np.concatenate([self.upper, np.ones(len(var))])
        self.integral = np.concatenate([self.integral, np.zeros(len(var))])

        def share(g: int) -> list[tuple[int, float]]:
            """How much group g is chosen: its variable, or its one class's nodes."""
            return [(var[g], 1.0)] if g in var else [(i, 1.0) for i in self.by_class[members[g][0]]]

        def nearest(mask: int) -> int:
            """The groups of mask that no other group of mask needs in full."""
            implied = 0
            for h in _bits(mask):
                implied |= group_need[h]
            return mask & ~implied

        for g, v in var.items():
            made = [i for k in members[g] for i in self.by_class[k] if not self._moves(i, group, group[k])]
            self.row([(i, 1.0) for i in made] + [(v, -1.0)], 0.0, np.inf)
            for k in members[g]:
                self.row([(v, 1.0)] + [(i, -1.0) for i in self.by_class[k]], 0.0, np.inf)
            for h in _bits(nearest(group_need[g])):
                self.row(share(h) + [(v, -1.0)], 0.0, np.inf)
        for c in self.classes:
            kids = self.kids[self.by_class[c][0]]
            if len(self.by_class[c]) == 1 and all(len(members[gid[group[k]]]) == 1 for k in kids):
                # one node, its child classes each a group of one: what it needs beyond them,
                # they need (implied), and the child-class rows give them
                continue
            own = gid[group[c]]
            # what c's own group needs follows from v_own >= c
            for g in _bits(nearest(need[c] & ~(1 << own)) & ~(group_need[own] if own in var else 0)):
                cls = members[g]
                if len(cls) == 1 and all(cls[0] in self.kids[j] for j in self.by_class[c]):
                    continue  # the child-class row says it
                self.row(share(g) + [(i, -1.0) for i in self.by_class[c]], 0.0, np.inf)

    def _needs(self, bit: dict[str, int], full: int) -> dict[str, int]:
        """For each class, the groups (bits of `bit`'s masks) that every node of it needs,
        directly or through its descendants: the greatest fixpoint of need(c) = AND over c's
        nodes of OR over their child classes k of bit(k) | need(k)."""
        need = {c: full for c in self.classes}
        parents: dict[str, set[str]] = {}
        for j, ks in enumerate(self.kids):
            for k in ks:
                parents.setdefault(k, set()).add(self.nodes_class[j])
        # children before parents (Tarjan's components come out children first), so that
        # outside cycles each class is computed once, from its children's final sets
        edges: dict[str, set[str]] = {c: set() for c in self.classes}
        for j, ks in enumerate(self.kids):
            edges[self.nodes_class[j]].update(k for k in ks if k in edges)
        work = [c for comp in _sccs(edges) for c in comp][::-1]  # popped from the end
        queued = set(work)
        while work:  # the greatest fixpoint of need(c) = AND over c's nodes of OR over their children
            c = work.pop()
            queued.discard(c)
            new = full
            for j in self.by_class[c]:
                got = 0
                for k in self.kids[j]:
                    got |= bit.get(k, 0) | need.get(k, 0)
                new &= got
            if new != need[c]:
                need[c] = new
                for p in parents.get(c, ()):
                    if p not in queued:
                        queued.add(p)
                        work.append(p)
        return need

    def _moves(self, i: int, group: dict[str, str], own: str) -> bool:
        """Whether candidate i gives a value of its own group in another form (a layout change,
        a Transpose, a Q or a DQ)."""
        return self.ops[i] in FORMS and any(group.get(k) == own for k in self.kids[i])

    def row(self, entries: list[tuple[int, float]], low: float, high: float) -> None:
        r = len(self.lo)
        for col, v in entries:
            self.rows.append(r)
            self.cols.append(col)
            self.vals.append(v)
        self.lo.append(low)
        self.hi.append(high)

    def drop_bound(self) -> None:
        import numpy as np

        self.hi[self.guard] = np.inf
        self.guard = None

    def solve(self, cuts: list[tuple[tuple[int, ...], float]], time_limit: float, integral: bool = True):
        """scipy's milp on the rows and one row per cut (at most rhs of its nodes chosen)."""
        import numpy as np  # here: `eqsat --help` imports this module and no numpy
        from scipy.optimize import Bounds, LinearConstraint, milp
        from scipy.sparse import coo_matrix

        n = len(self.lo)
        rows = self.rows + [n + k for k, (idx, _) in enumerate(cuts) for _ in idx]
        cols = self.cols + [i for idx, _ in cuts for i in idx]
        vals = self.vals + [1.0] * (len(rows) - len(self.rows))
        lo = np.array(self.lo + [-np.inf] * len(cuts))
        hi = np.array(self.hi + [rhs for _, rhs in cuts])
        a = coo_matrix((vals, (rows, cols)), shape=(len(lo), self.n_x)).tocsr()
        self.integral_solve = integral
        return milp(self.c_vec, constraints=LinearConstraint(a, lo, hi),
                    integrality=self.integral if integral else np.zeros(self.n_x),
                    bounds=Bounds(np.zeros(self.n_x), self.upper),
                    options={"time_limit": time_limit, "disp": solver_log()})

    def add_order(self) -> int:
        """Acyclicity in full on the cyclic part, where lazy cuts do not converge (long cycles
        of zero-cost nodes, as in Tensat's e-graphs): an order variable t_c in [0, |S| - 1]
        per class c of each strongly connected component S of the class graph (of more than
        one class), and per edge c -> k inside S, t_k - t_c + |S| * (the nodes of c with
        child k) <= |S| - 1: a chosen edge puts k below c. Classes outside every cycle get no
        variable. Returns the number of order variables."""
        import numpy as np

        edges: dict[str, set[str]] = {c: set() for c in self.classes}
        for j, ks in enumerate(self.kids):
            edges[self.nodes_class[j]].update(k for k in ks if k in edges)
        comps = [comp for comp in _sccs(edges) if len(comp) > 1]
        col = {c: self.n_x + i for i, c in enumerate(c for comp in comps for c in comp)}
        for comp in comps:
            size, members = float(len(comp)), set(comp)
            for c in comp:
                for k in sorted(edges[c] & members):
                    via = [j for j in self.by_class[c] if k in self.kids[j]]
                    self.row([(col[k], 1.0), (col[c], -1.0)] + [(j, size) for j in via], -np.inf, size - 1.0)
        upper = [float(len(comp) - 1) for comp in comps for _ in comp]
        self.n_x += len(col)
        self.c_vec = np.concatenate([self.c_vec, np.zeros(len(col))])
        self.upper = np.concatenate([self.upper, np.array(upper)])
        self.integral = np.concatenate([self.integral, np.zeros(len(col))])
        self.ordered = len(col)
        return len(col)

    def note_bound(self, res) -> None:
        """Keep the solve's dual bound (HiGHS's, or its optimum where scipy gives none) where it
        beats the best so far: every solve relaxes the acyclic program, so each is a bound."""
        dual = getattr(res, "mip_dual_bound", None) if self.integral_solve else None
        if (dual is None or not math.isfinite(dual)) and res.status == 0:
            dual = res.fun
        if dual is not None and math.isfinite(dual):
            self.lower_bound = dual if self.lower_bound is None else max(self.lower_bound, dual)

    def cycle_cut(self, egraph: EGraph, cycle: list[str]) -> tuple[list[int], float]:
        """The cut of a cycle of classes c0 -> c1 -> ... -> c0: of the nodes of each c_i with
        c_i+1 as a child, at most len(cycle) - 1 chosen (each class chooses one node at most,
        and all of them round the cycle is the cycle)."""
        idx = {j for i, c in enumerate(cycle) for j in self.by_class.get(c, ())
               if cycle[(i + 1) % len(cycle)] in self.kids[j]}
        return sorted(idx), len(cycle) - 1.0

    def short_cycles(self, egraph: EGraph, max_len: int = 4, cap: int = 20_000) -> list[tuple[list[int], float]]:
        """The cuts of the cycles among classes of at most max_len classes (at most cap of
        them), added before the first solve: equal forms make many short cycles (a value is
        Split0 of the Split of a Concat of itself), and each would otherwise cost a round.
        Each cycle is found once, from its first class in sorted order."""
        edges: dict[str, set[str]] = {}
        for j, ks in enumerate(self.kids):
            edges.setdefault(self.nodes_class[j], set()).update(ks)
        out: list[tuple[list[int], float]] = []
        for s in sorted(edges):
            stack = [[s]]
            while stack and len(out) < cap:
                path = stack.pop()
                for w in sorted(edges.get(path[-1], ())):
                    if w == s:
                        out.append(self.cycle_cut(egraph, path))
                    elif w > s and w not in path and len(path) < max_len:
                        stack.append(path + [w])
        return out

    def chosen(self, x) -> dict[str, str]:
        """e-class -> its node chosen in the solution x."""
        return {c: self.nodes[i] for c in self.classes for i in self.by_class[c] if x[i] > 0.5}


def _bits(mask: int):
    """The positions of the set bits of mask, lowest first (read off its binary digits: the
    usual `mask & -mask` loop costs a pass over the whole integer per bit)."""
    digits = bin(mask)[:1:-1]  # least significant first, without "0b"
    i = digits.find("1")
    while i >= 0:
        yield i
        i = digits.find("1", i + 1)


def _value_groups(egraph: EGraph, classes: dict[str, list[str]]) -> dict[str, str]:
    """Each class -> its group's representative: classes joined by a FORMS node among their
    nodes `classes[c]` (a value and its first child in another form: layout, transposed,
    quantized or not) share one; any other class is its own."""
    rep = {c: c for c in classes}

    def find(c: str) -> str:
        while rep[c] != c:
            rep[c] = rep[rep[c]]
            c = rep[c]
        return c

    for c, members in classes.items():
        for nid in members:
            n = egraph.nodes[nid]
            if n.op in FORMS and n.children and n.children[0] in rep:
                a, b = find(c), find(n.children[0])
                if a != b:
                    rep[max(a, b)] = min(a, b)
    return {c: find(c) for c in classes}


def _sccs(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of a graph (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for s in edges:
        if s in index:
            continue
        index[s] = low[s] = len(index)
        stack.append(s)
        on.add(s)
        work = [(s, iter(sorted(edges[s])))]
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(comp)
    return out


def reduce_nodes(egraph: EGraph, nodes: list[str], term: set[str], costs: dict[str, float],
                 bound_work: bool = True) -> list[str]:
    """The candidates less those no optimal acyclic choice needs, to a fixpoint:

    - dominated: another node of its class needs no child class it does not need, costs no
      more (and computes no more contractions, where the work bound applies); of equals, the
      first is kept. Swapping it in keeps a choice complete and acyclic, at no higher cost;
    - forced into a cycle: a node of class c with a child class every node of which has c as a
      child (the node and any choice for that child make a 2-cycle);
    - then those with a child class left without nodes (ILP._prune)."""
    alive = list(nodes)
    while True:
        by_class: dict[str, list[str]] = {}
        for n in alive:
            by_class.setdefault(egraph.nodes[n].eclass, []).append(n)
        drop = _dominated(egraph, by_class, costs, bound_work)
        for n in alive:
            c = egraph.nodes[n].eclass
            if any(k in by_class and all(c in egraph.nodes[m].children for m in by_class[k])
                   for k in set(egraph.nodes[n].children) if k != c):
                drop.add(n)
        if not drop:
            return alive
        alive = ILP._prune(egraph, [n for n in alive if n not in drop], term)


def _dominated(egraph: EGraph, by_class: dict[str, list[str]], costs: dict[str, float], bound_work: bool,
               max_class: int = 64) -> set[str]:
    """The nodes another node of their class dominates (reduce_nodes); classes of more than
    max_class nodes are left alone (pairs of nodes: quadratic)."""
    drop: set[str] = set()
    for members in by_class.values():
        if len(members) < 2 or len(members) > max_class:
            continue
        info = [(set(egraph.nodes[n].children), costs[n],
                 contractions(egraph, egraph.nodes[n]) if bound_work else 0) for n in members]
        for i, (kids, cost, work) in enumerate(info):
            for j, (k2, c2, w2) in enumerate(info):
                if i != j and members[j] not in drop and k2 <= kids and c2 <= cost and w2 <= work \
                        and (k2 != kids or c2 != cost or w2 != work or j < i):
                    drop.add(members[i])
                    break
    return drop


def fix_layouts(egraph: EGraph, nodes: list[str], choice: dict[str, str]) -> tuple[list[str], str] | None:
    """Decide the data layout of every e-class that holds both layouts before the ILP sees it.

    An e-class whose value is computed both in NCHW (Conv, FusedConv, pooling, ...) and as
    the ReorderOutput of a channel-blocked value (rules/layout.egg) keeps only the nodes of
    one layout: the blocked ones where `choice` (the greedy answer) computes it blocked, the
    NCHW ones elsewhere (also where the greedy answer does not use the class). Classes that
    hold only blocked values keep all their nodes. With both layouts in one class, the LP
    relaxation mixes them (half a blocked region, half an NCHW one) and its bound stays far
    below every integer answer, so HiGHS does not close the gap; with the layout fixed the
    e-graph has the structure of an NCHW one and is solved as fast. `choice` stays a
    solution of the pruned e-graph, so the ILP answer is never worse than the greedy one;
    it is optimal for this layout choice, not over every layout choice. A ReorderInput of a
    class the greedy answer does not use is dropped too: it would switch a value's layout
    where the greedy answer did not.

    Returns the kept nodes and a note for the report, or None where no class holds both
    layouts (the e-graph is returned unchanged)."""
    by_class: dict[str, list[str]] = {}
    for n in nodes:
        by_class.setdefault(egraph.nodes[n].eclass, []).append(n)
    drop: set[str] = set()
    blocked = plain = 0
    for c, members in by_class.items():
        nchwc = [n for n in members if egraph.nodes[n].op in NCHWC_OPS]
        if not nchwc or len(nchwc) == len(members):
            continue
        chosen = choice.get(c)
        if chosen is not None and egraph.nodes[chosen].op in NCHWC_OPS:
            drop.update(n for n in members if n not in nchwc)
            blocked += 1
        else:
            drop.update(nchwc)
            plain += 1
    if not blocked and not plain:
        return None
    # A ReorderInput of a value the greedy answer does not compute is a layout change it did
    # not make: kept, it doubles every blocked reader's alternatives (the same convolution on
    # the reordered NCHW value), and the LP relaxation spreads over them layer by layer.
    drop.update(n for n in nodes if egraph.nodes[n].op == REORDER_INPUT
                and any(k not in choice for k in egraph.nodes[n].children if k in by_class))
    note = f"ILP: layouts fixed from the greedy answer before solving ({blocked} e-classes NCHWc, {plain} NCHW)"
    return [n for n in nodes if n not in drop], note
