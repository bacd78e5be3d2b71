"""Instantiating one unfolded rule query as a concrete ONNX graph, and its actions on it.

Contract: `Instance(variant, actions, prog, rng, trial, other_dtype).build()` chooses concrete values for the
query's variables (shapes and dtypes of the tensors it leaves free, attributes, literal
values), builds the matched terms as ONNX nodes, evaluates the query's guards in Python,
then builds the terms the actions create. It raises `Reject` when this try does not
satisfy the query (the caller tries other random choices) and `Unsupported` when the
query cannot be instantiated at all (the rule is reported unchecked with that reason).
After `build()`, `checks` lists (what, lhs value, rhs value) pairs to compare and
`claims` (what, value, expected shape or dtype) facts to verify against the run.
"""

from __future__ import annotations

import re

import numpy as np

from eqsat.backends.ort.target import NCHWC_DOMAIN, nchwc_block
from eqsat.lang.dtypes import CODE_TO_CTOR, np_dtype
from eqsat.lang.ops import BY_CTOR, LITERAL_CTORS
from eqsat.ruletool.build import OPSET, BuildError, GraphBuilder, dtype_code
from eqsat.ruletool.leafshape import (
    ELEMENTWISE,
    DimGuards,
    context_rank,
    context_shape,
    elementwise_shape,
)
from eqsat.ruletool.model import Program
from eqsat.ruletool.prims import DV, PREDICATES, PRIMS, NoMatch
from eqsat.ruletool.sexp import SList, Str, Sym, show
from eqsat.ruletool.unfold import Variant, is_var

# The leaves a rule's terms are built from: the literals, and (Input name), a graph input.
# Input joins them because, like a literal, its arguments are plain values, not Op terms:
# in a query it becomes a leaf of the test graph, and an action may not create it (nor Const).
LEAF_CTORS = LITERAL_CTORS + ("Input",)
BOOL_OPS = ("Not", "And", "Or", "Xor")  # their inputs are booleans
FLOATS = ("F32", "F16", "F64", "BF16")
INTS = ("I64", "I32")  # drawn only for a rule that names them (a guard (= (I64) (dtype x)), say)
# 0/1 attributes drawn at random from the third try on, like transA and transB: a rule that
# takes them for their defaults (ReduceSum(x, axes, keepdims) -> ReduceSum(x, axes, 1)) was
# tried at the default alone
FLAG_ATTRS = frozenset({"keepdims", "noop_with_empty_axes", "ceil_mode", "count_include_pad", "upper"})
# trial -> the element type of a rule that names none: egglog matches a rule's ops whatever the
# types of their tensors, unless a guard asks (= (F32) (dtype x)), so a rule right for float32
# alone (Mul(Div(a, b), b) -> a: an integer division truncates; an overflow of float16 at 65504)
# is wrong on the models that have those types
# (int64 too, whose extremes lie beyond float64's integers, and, for a rule that names types
# only as a Cast's target, float32: Cast(Cast(x, F64), dtype(x)) -> x is right for every type
# but int64, Cast(Cast(x, I32), dtype(x)) -> x for int32 x alone)
OTHER_DTYPES = {2: "I32", 4: "F16", 7: "U8", 1: "I64", 0: "F32"}  # trial numbers for their tries (check.py)
CAST_ONLY_DTYPES = frozenset({"F32"})  # tried only for a rule that names types only as a Cast's target
# ...but not where the query matches a literal of other types: a float literal is no integer's,
# an integer literal no float's (the op language's ScalarF and ScalarI)
_FLOAT_LITERALS = frozenset({"ScalarF"})
_INT_LITERALS = frozenset({"ScalarI"})
OTHER_DTYPES_NOT = {"I32": _FLOAT_LITERALS, "I64": _FLOAT_LITERALS, "U8": _FLOAT_LITERALS, "F16": _INT_LITERALS,
                    "F32": _INT_LITERALS}
# trial -> the value of every float literal variable the guards leave free ((ScalarF c t s)'s c):
# a constant of a model may be 0, huge, tiny or an attention mask's -inf, where a rule right for
# standard normal constants is wrong ((x * c) / c -> x at c = 0, Softmax(x + c) -> Softmax(x) at
# c = -inf or 1e30); 1e30 and 1e-30 are no float16 values (inf and 0 there)
SPECIAL_F64 = {3: 0.0, 5: 1e30, 6: -np.inf, 7: 1e-30}
# trial -> what a matched constant tensor ((Const k)) holds besides standard normal values:
# a quarter of its elements 0 (at least one), or one -inf (a mask's)
SPECIAL_CONST = {3: "zeros", 6: "-inf"}
# the kernels that sum products with weights: an inf among those weights (a constant folded into
# them, or one that overflows there: 1e30 times a weight of 2e15) becomes NaN in the first sum of
# products with weights of both signs or a padded zero, and the channel-blocked ones treat inf and
# NaN their own way (docs/semantics.md: what inf and NaN give). A rule whose actions create one
# draws no inf and no 1e30 among its constants
CONTRACTIONS = frozenset({"MatMul", "Gemm", "Conv", "QLinearConv", "QLinearConvMs", "QLinearMatMul", "FusedConv",
                          "FusedGemm", "FusedMatMul", "QGemm", "MatMulNBits", "NchwcConv", "NchwcConvPlain"})


def action_ctors(actions: list) -> list[str]:
    """The constructors a rule's actions write, in order of first appearance."""
    found: list[str] = []

    def walk(x) -> None:
        if isinstance(x, list) and x:
            found.append(str(x[0]))
            for y in x[1:]:
                walk(y)

    for a in actions:
        walk(a)
    return list(dict.fromkeys(found))


class Reject(Exception):
    """This try does not satisfy the query."""


class Unsupported(Exception):
    """The query cannot be instantiated (reason in the message)."""


class Inconsistent(Unsupported):
    """This unfolding joins derivations that cannot hold of one value (a Conv that is a
    FusedConv): other unfoldings of the rule cover it."""


class Unbound(Exception):
    pass


def _sorted_ctor(prog: Program, head) -> tuple[str, list[str]] | None:
    return prog.ctors.get(str(head)) if isinstance(head, str) and not isinstance(head, Str) else None


class Instance:
    def __init__(self, variant: Variant, actions: list, prog: Program, rng: np.random.Generator, trial: int,
                 other_dtype: str | None = None):
        self.prog = prog
        self.rng = rng
        self.trial = trial
        self.actions = actions
        self.parent: dict[str, str] = {}
        self.defs: dict[str, tuple[str, list]] = {}  # Op or OpList var -> (ctor, args)
        self.guards: list = []
        self.env: dict[str, object] = {}  # value variables
        self.val: dict[str, object] = {}  # Op var -> ONNX value name ('' Absent, tuple outputs)
        self.gb = GraphBuilder()
        self.checks: list[tuple[str, str, str]] = []
        self.claims: list[tuple[str, str, str, object]] = []
        self.leaves: list[tuple[str, str]] = []  # (var, value name)
        self.hints: dict[str, list] = {}
        self.rank_hint: dict[str, int] = {}
        self.len_hint: dict[str, int] = {}
        self.elem_hint: dict[str, dict[int, object]] = {}
        self.shape_of: dict[str, str] = {}  # value var -> Op var it is the shape of
        self.folded: set[str] = set()  # Op vars matched as a Const and as a computation
        self._consumer: dict[str, str] = {}  # Op var -> a node var that reads it
        self._building: str | None = None  # the node var whose inputs are being made
        self.term_of: dict[str, SList] = {}  # a variable the checker names (_tN, the rewrite's root) -> its term
        self.dtype = self._trial_dtype(variant, other_dtype)
        # inf and 1e30 among the constants (SPECIAL_F64, SPECIAL_CONST), but where the rewrite writes a contraction
        self.wide_consts = not CONTRACTIONS & set(action_ctors(actions))
        self.D = [3, 2, 4, 3, 2][trial % 5]
        self.p_one = 0.0 if trial < 2 else 0.25
        self._normalize(variant.atoms)

    # ---- union-find over variables
    def find(self, v: str) -> str:
        while v in self.parent:
            v = self.parent[v]
        return v

    def _sub(self, x):
        if isinstance(x, SList):
            out = SList([x[0]] + [self._sub(y) for y in x[1:]]) if x else SList()
            out.line, out.col = x.line, x.col
            return out
        if is_var(x):
            r = Sym(self.find(x))
            r.line, r.col = x.line, x.col
            return r
        return x

    def _is_struct(self, x) -> bool:
        """A constructor term of sort Op or OpList."""
        c = _sorted_ctor(self.prog, x[0]) if isinstance(x, SList) and x else None
        return c is not None and c[0] in ("Op", "OpList")

    def _flatten(self, x) -> str:
        """Name a structural term with a variable (nested ones too); returns the variable."""
        self._nflat = getattr(self, "_nflat", 0) + 1
        v = Sym(f"_t{self._nflat}")
        self.term_of[v] = x
        self._define(v, x)
        return v

    def display(self, x) -> str:
        """An expression as the rule writes it: a variable the checker made up (`_tN`, a
        rewrite's root) shown as its term, a variable of an unfolded rule without its `~N`."""
        def expand(y, depth: int):
            if is_var(y):
                t = self.term_of.get(str(y))
                if t is None:
                    t = self.term_of.get(self.find(y)) if str(y).startswith("_") else None
                return expand(t, depth + 1) if t is not None and depth < 32 else y
            if isinstance(y, SList) and y:
                return SList([y[0]] + [expand(z, depth + 1) for z in y[1:]])
            return y

        return re.sub(r"~\d+", "", show(expand(x, 0)))

    def _define(self, v: str, x) -> None:
        v = self.find(v)
        ctor, sorts = _sorted_ctor(self.prog, x[0])
        args = []
        for a, s in zip(x[1:], sorts, strict=False):
            if s in ("Op", "OpList") and isinstance(a, SList) and self._is_struct(a):
                args.append(self._flatten(a))
            elif s in ("Op", "OpList") and is_var(a):
                args.append(Sym(self.find(a)))
            else:
                args.append(a)
        new = (str(x[0]), args)
        old = self.defs.get(v)
        if old is not None and old != new and "Const" in (old[0], new[0]) and old[0] != new[0]:
            # a computed value that the folding oracle made a constant (Concat(w1, w2) =
            # Const k): build the computation, which must then read constants only
            self.folded.add(v)
            if old[0] == "Const":
                self.defs[v] = new
            return
        if old is not None and old != new:
            if old[0] != new[0] or len(old[1]) != len(new[1]):
                raise Inconsistent(f"the query matches one value computed two ways ({old[0]} and {new[0]})")
            for p, q in zip(old[1], new[1], strict=True):  # same op: unify the arguments
                if is_var(p) and is_var(q) and (p in self.defs or q in self.defs or p != q):
                    self._alias(p, q)
                elif p != q:
                    self.guards.append(SList([Sym("="), p, q]))
            return
        self.defs[v] = new

    def _alias(self, a: str, b: str) -> None:
        a, b = self.find(a), self.find(b)
        if a == b:
            return
        if a.startswith("_") and not b.startswith("_"):  # the rule's own name represents both
            a, b = b, a
        self.parent[b] = a
        if b in self.defs:
            d = self.defs.pop(b)
            self._define(a, SList([Sym(d[0])] + d[1]))

    def _normalize(self, atoms: list) -> None:
        # first: variable aliases; then: structural definitions; the rest are guards
        for a in atoms:
            if isinstance(a, SList) and len(a) == 3 and a[0] == "=" and is_var(a[1]) and is_var(a[2]):
                self._alias(a[1], a[2])
        for a in atoms:
            if not (isinstance(a, SList) and a):
                raise Unsupported(f"cannot read the query atom {show(a)}")
            if a[0] == "=" and len(a) == 3:
                x, y = a[1], a[2]
                if is_var(x) and is_var(y):
                    continue
                if self._is_struct(y) and is_var(x):
                    if str(x).startswith("_"):  # a rewrite's root: shown as its left side
                        self.term_of.setdefault(str(x), y)
                    self._define(x, self._sub(y))
                    continue
                if self._is_struct(x) and is_var(y):
                    if str(y).startswith("_"):
                        self.term_of.setdefault(str(y), x)
                    self._define(y, self._sub(x))
                    continue
                if self._is_struct(x) and self._is_struct(y):
                    v = self._flatten(self._sub(x))
                    self._define(v, self._sub(y))
                    continue
            if isinstance(a[0], Sym) and a[0] in self.prog.relations:
                raise Unsupported(f"nothing derives the relation {a[0]}")
            self.guards.append(a)
        self.guards = [self._sub(g) for g in self.guards]
        self.defs = {self.find(k): (c, [Sym(self.find(x)) if is_var(x) else self._sub(x) for x in args])
                     for k, (c, args) in self.defs.items()}
        self._collect_hints()
        self._struct_hints()
        self._soft_hints()
        self.dimg = DimGuards(self.guards, self.shape_of, self.find, self._closed)
        sizes = self.dimg.sizes()
        if not sizes and any(c.startswith("Nchwc") for c, _ in self.defs.values()) and nchwc_block():
            sizes = [nchwc_block()]  # blocked tensors: channels a multiple of the block
        if sizes:  # a size the guards ask for, everywhere
            self.D = int(sizes[self.trial % len(sizes)])

    def _closed(self, x):
        """The value of an expression without variables, or of a variable that a guard sets
        to one ((= blk (layout-block "nchwc"))); None otherwise."""
        def free(e) -> bool:
            return is_var(e) or (isinstance(e, SList) and any(free(y) for y in e[1:]))

        if is_var(x):
            for g in self.guards:
                if isinstance(g, SList) and len(g) == 3 and g[0] == "=":
                    for a, b in ((g[1], g[2]), (g[2], g[1])):
                        if is_var(a) and self.find(a) == self.find(x) and not free(b):
                            return self._closed(b)
            return None
        if free(x):
            return None
        try:
            return self.eval(x)
        except Exception:  # noqa: BLE001 - not a constant after all
            return None

    def _trial_dtype(self, variant: Variant, other: str | None) -> str:
        """The element type of this try's tensors: one the rule names, else float32; `other`
        (OTHER_DTYPES) for a rule that names none, where its query matches no literal of
        another type (Reject otherwise)."""
        mentioned = set()
        targets = set()  # named as a Cast's target type
        heads = set()

        def walk(x, into: set):
            if isinstance(x, SList):
                if len(x) == 1 and isinstance(x[0], Sym) and str(x[0]) in FLOATS + INTS:
                    into.add(str(x[0]))
                if x:
                    heads.add(str(x[0]))
                cast = len(x) == 5 and isinstance(x[0], Sym) and str(x[0]) == "Cast"
                for y in x[:4] if cast else x:
                    walk(y, into)
                if cast:
                    walk(x[4], targets)

        for a in variant.atoms:
            walk(a, mentioned)
        if other is not None:
            # a type named only as a Cast's target says nothing of the tensors cast
            # (Cast(Cast(x, I32), dtype(x)) -> x is right for int32 x alone)
            if mentioned or heads & OTHER_DTYPES_NOT[other] or (other in CAST_ONLY_DTYPES and not targets):
                raise Reject(f"the rule does not match {other} tensors")
            return other
        mentioned |= targets
        ints = sorted(mentioned & set(INTS))
        if ints and (self.trial % 2 == 1 or not mentioned & set(FLOATS)):
            return ints[self.trial // 2 % len(ints)]
        if "F32" in mentioned or not mentioned & set(FLOATS):
            return "F32"
        return sorted(mentioned & set(FLOATS))[0]

    # ---- hints from the guards
    def _collect_hints(self) -> None:
        for g in self.guards:
            if not (isinstance(g, SList) and len(g) == 3):
                continue
            op, x, y = g[0], g[1], g[2]
            if op == "=" and is_var(x) and isinstance(y, SList) and y and y[0] == "shape" and is_var(y[1]):
                self.shape_of[str(x)] = str(y[1])
            if op == "=" and is_var(y) and isinstance(x, SList) and x and x[0] == "shape" and is_var(x[1]):
                self.shape_of[str(y)] = str(x[1])
        for g in self.guards:
            if not (isinstance(g, SList) and len(g) == 3):
                continue
            op, x, y = g[0], g[1], g[2]
            for a, c in ((x, y), (y, x)):
                if not isinstance(c, (int, float, Str)) and not (isinstance(c, SList) and c and c[0] == "vec-of"):
                    continue
                if is_var(a) and op == "=":
                    self.hints.setdefault(str(a), []).append(self._lit(c))
                if isinstance(a, SList) and len(a) == 2 and a[0] == "vec-length" and isinstance(c, int):
                    tgt = a[1]
                    if isinstance(tgt, SList) and tgt and tgt[0] == "shape" and is_var(tgt[1]):
                        tgt = Sym(str(tgt[1]))
                        self._rank(str(tgt), c, op, a is x)
                    elif is_var(tgt) and str(tgt) in self.shape_of:
                        self._rank(self.shape_of[str(tgt)], c, op, a is x)
                    elif is_var(tgt) and op == "=":
                        self.len_hint[str(tgt)] = c
                if (isinstance(a, SList) and len(a) == 3 and a[0] == "vec-get" and is_var(a[1])
                        and isinstance(a[2], int)):
                    if op == "=":
                        self.elem_hint.setdefault(str(a[1]), {})[a[2]] = c
                if isinstance(a, SList) and len(a) == 2 and a[0] == "shape" and is_var(a[1]) and op == "=":
                    if isinstance(c, SList):
                        self.rank_hint[str(a[1])] = len(c) - 1
            if (op in ("=",) and is_var(x) and isinstance(y, SList) and y and y[0] == "vec-of"
                    and str(x) in self.shape_of):
                self.rank_hint[self.shape_of[str(x)]] = len(y) - 1

    def _vec_len(self, x) -> int | None:
        """The length of an IVec: a literal's, or a variable's from a guard."""
        if isinstance(x, SList) and x and x[0] == "vec-of":
            return len(x) - 1
        if is_var(x):
            return self.len_hint.get(str(self.find(x)), self.len_hint.get(str(x)))
        return None

    def _struct_hints(self) -> None:
        """Ranks that an op's attributes fix: Pad's pads (2 per axis), Transpose's perm; the
        values a guard (vec-contains (vec-of ...) v) allows for v."""
        for ctor, args in self.defs.values():
            x = args[0] if args and is_var(args[0]) else None
            if x is None or self.find(x) in self.rank_hint:
                continue
            n = None
            if ctor == "Pad" and len(args) > 1 and is_var(args[1]) and self.find(args[1]) in self.defs:
                pc, pa = self.defs[self.find(args[1])]
                n = self._vec_len(pa[0]) if pc == "Ints" and pa else None
                n = n // 2 if n and n % 2 == 0 else None
            elif ctor == "Transpose" and len(args) > 1:
                n = self._vec_len(args[1])
            if n:
                self.rank_hint[str(self.find(x))] = n
        for g in self.guards:
            if isinstance(g, SList) and len(g) == 3 and g[0] == "vec-contains" and is_var(g[2]) \
                    and isinstance(g[1], SList) and g[1] and g[1][0] == "vec-of":
                self.hints.setdefault(str(g[2]), []).extend(self._lit(c) for c in g[1][1:])

    def _soft_hints(self) -> None:
        """Float literals of a guard are likely values for the f64 variables it reads
        (a tolerance guard like (< (abs (- c 0.7071)) 1e-5))."""
        self.soft: dict[str, list] = {}

        def walk(x, vs, fs):
            if isinstance(x, SList):
                for y in x[1:]:
                    walk(y, vs, fs)
            elif is_var(x):
                vs.append(str(x))
            elif isinstance(x, float) and abs(x) > 1e-4:
                fs.append(x)

        for g in self.guards:
            vs, fs = [], []
            walk(g, vs, fs)
            for v in vs:
                self.soft.setdefault(v, []).extend(fs)

    def _rank(self, var: str, n: int, op: str, left: bool) -> None:
        # (op (vec-length s) n) with the length on the left when `left`
        if op == "=":
            self.rank_hint[var] = n
        elif (op == ">" and left) or (op == "<" and not left):
            self.rank_hint.setdefault(var, n + 1)
        elif (op == ">=" and left) or (op == "<=" and not left):
            self.rank_hint.setdefault(var, n)

    def _lit(self, c):
        if isinstance(c, SList):
            return tuple(self._lit(x) for x in c[1:])
        return str(c) if isinstance(c, Str) else c

    # ---- evaluation
    def eval(self, x):
        if isinstance(x, bool):
            return x
        if isinstance(x, (int, float)):
            return x
        if isinstance(x, Str):
            return str(x)
        if is_var(x):
            v = self.find(x)
            if v in self.env:
                return self.env[v]
            if v in self.val:
                return ("op", v)
            raise Unbound(v)
        if isinstance(x, Sym):
            return x == "true"
        if not (isinstance(x, SList) and x):
            raise Unsupported(f"cannot evaluate {show(x)}")
        head = str(x[0])
        if head in ("shape", "dtype"):
            ref = self.eval(x[1])
            if not (isinstance(ref, tuple) and len(ref) == 2 and ref[0] == "op"):
                raise Unsupported(f"({head} ...) of a term the checker cannot name")
            name = self.val[ref[1]]
            if not isinstance(name, str) or name == "":
                raise NoMatch(f"{head} of an absent value")
            t = self.gb.types.get(name) or self.gb.type_by_running(name)
            if t is None:
                raise Reject(f"no static {head} for {ref[1]}")
            return tuple(t[1]) if head == "shape" else DV(CODE_TO_CTOR.get(t[0], "DTypeCode"),
                                                          () if t[0] in CODE_TO_CTOR else (t[0],))
        if head == "opset":
            dom = self.eval(x[1])
            if dom == "":
                return OPSET
            if dom == "com.microsoft":
                return 1
            if dom == NCHWC_DOMAIN and nchwc_block():
                return 1
            raise NoMatch(f"no opset {dom}")
        if head == "hardware-pays":  # a rule must be sound whatever the profile says pays
            return 1
        if head == "layout-block":  # the block of this machine's onnxruntime, which runs the check
            if self.eval(x[1]) == "nchwc" and nchwc_block():
                return nchwc_block()
            raise NoMatch("this machine's onnxruntime has no channel-blocked kernels")
        args = [self.eval(a) for a in x[1:]]
        if head in PRIMS:
            try:
                return PRIMS[head](*args)
            except NoMatch:
                raise
            except Exception as e:  # noqa: BLE001 - a primitive failing stops the match
                raise NoMatch(f"{head} failed: {e}") from None
        if head in PREDICATES:
            if not PREDICATES[head](*args):
                raise NoMatch(f"{show(x)} is false")
            return True
        if head in self.prog.tables:
            for targs, tv in self.prog.tables[head]:
                if [self.eval(t) for t in targs] == args:
                    return self.eval(tv)
            raise NoMatch(f"no entry ({head} {' '.join(map(str, args))})")
        if head in self.prog.functions:
            raise Unsupported(f"the guard reads the function {head}, which rules compute")
        c = _sorted_ctor(self.prog, head)
        if c is not None:
            return DV(head, tuple(args))
        raise Unsupported(f"unknown function {head} in a guard")

    def _guard(self, g) -> bool:
        """True when decided (holds), False when it needs unbound values. Raises NoMatch."""
        try:
            if isinstance(g, SList) and len(g) == 3 and g[0] == "=":
                x, y = g[1], g[2]
                for a, b in ((x, y), (y, x)):
                    if is_var(a) and self.find(a) not in self.env and self.find(a) not in self.val:
                        self.env[self.find(a)] = self.eval(b)
                        return True
                if self.eval(x) != self.eval(y):
                    raise NoMatch(f"{show(g)} is false")
                return True
            self.eval(g)
            return True
        except Unbound:
            return False

    def _guards_fixpoint(self, pending: list, final: bool) -> list:
        while True:
            left = [g for g in pending if not self._guard(g)]
            if len(left) == len(pending):
                break
            pending = left
        if final and pending:
            raise Unsupported(f"cannot evaluate the guard {show(pending[0])}")
        return pending

    # ---- choosing values
    def choose_value(self, var: str, sort: str, ctor: str, pos: int, op_args: list):
        """A value for a variable in argument `pos` of `ctor` (a node's attribute or a
        literal's argument)."""
        rng = self.rng
        hints = self.hints.get(var, [])
        if not hints and sort == "f64" and self.soft.get(var) and self.rng.random() < 0.8:
            hints = self.soft[var]
        if hints and (self.trial % 3 != 2 or sort != "f64"):
            return hints[int(rng.integers(len(hints)))]
        spec = BY_CTOR.get(ctor)
        in_rank = self._input_rank(op_args)
        if spec is not None and pos >= len(spec.inputs) and pos - len(spec.inputs) < len(spec.attrs):
            a = spec.attrs[pos - len(spec.inputs)]
            return self._attr_value(a, ctor, in_rank, op_args)
        if spec is not None and pos >= len(spec.inputs):
            return 2  # number of outputs
        if ctor in ("ScalarF", "ScalarI") and pos == 2:  # a one-element constant's shape
            return [(), (1,), (1, 1), (1, 1, 1, 1)][0 if self.trial == 0 else int(self.rng.integers(4))]
        return self._by_sort(var, sort, in_rank)

    def _input_rank(self, op_args: list) -> int | None:
        for a in op_args:
            if is_var(a) and a in self.val:
                name = self.val[a]
                t = ((self.gb.types.get(name) or self.gb.type_by_running(name))
                     if isinstance(name, str) and name else None)
                if t is not None:
                    return len(t[1])
        return None

    def _attr_value(self, a, ctor: str, rank: int | None, op_args: list):
        rng, k = self.rng, a.kind
        sp = rank - 2 if rank and rank >= 3 and ctor in WINDOWED else 0
        if sp and a.name == "kernel_shape" and ctor in POOLS:  # which a pool must have (a conv's weight gives it)
            return tuple(int(rng.integers(1, 4)) for _ in range(sp))
        if sp and self.trial > 1 and a.name in ("strides", "dilations", "pads"):
            # varied from the third try on: a rule that drops or moves them must show
            n = 2 * sp if a.name == "pads" else sp
            lo, hi = (0, 2) if a.name == "pads" else (1, 3)
            return tuple(int(rng.integers(lo, hi)) for _ in range(n))
        if ctor == "Cast" and a.name == "to" and self.trial > 1:
            return DV(str(rng.choice(["F32", "F64", "F16", "I64"])))
        if a.name == "perm":
            r = rank if rank is not None else 3
            return tuple(int(i) for i in (rng.permutation(r) if self.trial > 0 else range(r)[::-1]))
        if a.name == "axis" and rank:
            return int(rng.integers(-rank, rank)) if (a.default is None or self.trial > 1) else a.default
        if ctor == "NchwcReorderOutput" and a.name == "channels" and op_args:
            t = self.gb.types.get(self.val.get(self.find(op_args[0]), ""))
            if t is not None and len(t[1]) == 4:  # a blocked tensor's channels, none cropped
                return int(t[1][1])
        if a.name == "activation" and k == "str":  # a fused activation that takes no parameters
            return ("Relu", "Sigmoid", "Tanh")[self.trial % 3]
        if a.name in ("transA", "transB") or (k == "int" and a.name in FLAG_ATTRS):
            return int(rng.integers(2)) if self.trial > 1 else a.default or 0
        if k == "int?":
            return DV("NoInt")
        if k == "float?":
            return DV("NoFloat")
        if k == "dtype":
            return DV(self.dtype)
        if a.default is not None:
            if k == "float" and a.name in ("alpha", "beta") and self.trial > 1:
                return float(np.round(rng.uniform(0.1, 0.9), 3))
            return a.default
        if k in ("ints", "floats"):
            return ()
        if k == "str":
            return ""
        if k == "int":
            return 0
        raise Unsupported(f"no value for the attribute {ctor}.{a.name}")

    def _by_sort(self, var: str, sort: str, rank: int | None):
        rng = self.rng
        if sort == "i64":
            return int(rng.choice([0, 1, 2, -1]))
        if sort == "f64":
            special = SPECIAL_F64.get(self.trial)
            if special is not None and (self.wide_consts or abs(special) < 1e30):
                return special
            return float(np.round(rng.normal(), 3))
        if sort == "String":
            return var.split("~")[0]
        if sort == "DType":
            return DV(self.dtype)
        if sort == "IVec":
            n = self.len_hint.get(var)
            el = self.elem_hint.get(var, {})
            if n is None:
                n = max(el) + 1 if el else 0
            return tuple(el.get(i, int(rng.integers(0, 3))) for i in range(n))
        if sort == "OptInt":
            return DV("NoInt")
        if sort == "OptFloat":
            return DV("NoFloat")
        raise Unsupported(f"cannot choose a value of sort {sort} for {var}")

    # ---- leaves
    def _leaf_shape(self, var: str, ctx: tuple[str, int] | None) -> tuple:
        rng, D = self.rng, self.D
        r = self.rank_hint.get(var)
        if r is None and ctx is not None:
            r = context_rank(*ctx)
        if r is None:
            r = 3 if self.trial % 2 == 0 else int(rng.integers(1, 5))
        dims = [D if rng.random() >= self.p_one else 1 for _ in range(r)]
        return self.dimg.fix(var, tuple(dims), rng)

    def _const_values(self, shape: tuple) -> np.ndarray:
        """A matched constant tensor's values: random, with SPECIAL_CONST's on its trials."""
        a = self._random(shape, self.dtype)
        special = SPECIAL_CONST.get(self.trial)
        flat = a.reshape(-1)
        if special == "zeros" and flat.size:
            flat[self.rng.random(flat.size) < 0.25] = 0
            flat[self.rng.integers(flat.size)] = 0
        elif special == "-inf" and flat.size and a.dtype.kind == "f" and self.wide_consts:
            flat[self.rng.integers(flat.size)] = -np.inf
        return a

    def _random(self, shape: tuple, code_ctor: str) -> np.ndarray:
        dt = np.dtype(np_dtype(dtype_code(DV(code_ctor))))
        if dt.kind in "iu":  # small, never 0 (an integer division by zero is undefined)
            a = self.rng.integers(1, 8, shape) * (self.rng.choice([-1, 1], shape) if dt.kind == "i" else 1)
            return a.astype(dt)
        a = self.rng.standard_normal(shape)
        if self.trial % 3 == 1:
            a = np.abs(a) + 0.5
        return a.astype(np_dtype(dtype_code(DV(code_ctor))))

    # ---- building
    def build(self) -> None:
        contexts: dict[str, tuple[str, int]] = {}
        for v, (ctor, args) in self.defs.items():
            for i, a in enumerate(args):
                if is_var(a):
                    contexts.setdefault(a, (ctor, i))
                    self._consumer.setdefault(a, v)
        order: list[str] = []
        seen: set[str] = set()

        def visit(v: str, stack: tuple = ()) -> None:
            if v in seen:
                return
            if v in stack:
                raise Unsupported("the query's terms form a cycle")
            d = self.defs.get(v)
            if d is not None:  # computed inputs first: a constant's shape may follow theirs
                deps = [self.find(a) for a in d[1] if is_var(a) and self.find(a) in self.defs]
                for a in sorted(deps, key=lambda a: self.defs[a][0] == "Const"):
                    visit(a, stack + (v,))
            seen.add(v)
            order.append(v)

        for v in list(self.defs):
            visit(v)
        # Op variables that nothing defines but guards read are tensors too (not lists:
        # a Cons or Nil is no tensor, its elements are)
        op_vars = {v for v, (c, _) in self.defs.items() if self.prog.ctors[c][0] == "Op"}
        for _v, (ctor, args) in self.defs.items():
            sorts = self.prog.ctors[ctor][1]
            for a, s in zip(args, sorts, strict=False):
                if s == "Op" and is_var(a) and a not in self.defs:
                    op_vars.add(a)
        for v in self.shape_of.values():
            if self.find(v) not in self.defs:
                op_vars.add(self.find(v))
        pending = self._guards_fixpoint(list(self.guards), final=False)
        for v in order:
            self._node(v, contexts.get(v))
            pending = self._guards_fixpoint(pending, final=False)
        for v in sorted(op_vars - set(self.val)):  # tensors that only guards read
            self._leaf(v, contexts.get(v))
        self._guards_fixpoint(pending, final=True)
        for v in self.folded:
            name = self.val.get(self.find(v))
            if any(self.gb.reads_input(x) for x in (name if isinstance(name, tuple) else (name,)) if x):
                raise Reject(f"{v} is matched as a constant but reads a graph input")
        self._actions()

    def _leaf(self, v: str, ctx, op_args: list | None = None) -> None:
        role = _int_role(self, ctx, op_args or [])
        if role is not None:
            self.val[v] = self.gb.add_const(v.split("~")[0], role) if isinstance(role, np.ndarray) else role
            if isinstance(role, np.ndarray):
                self.leaves.append((v, self.val[v]))
            return
        sh = self._shape_from_guards(v) or self._context_shape(v, ctx, op_args or []) or self._leaf_shape(v, ctx)
        if ctx is not None and (ctx[0] in BOOL_OPS or (ctx[0] == "Where" and ctx[1] == 0)):  # booleans
            arr = self.rng.random(sh) < 0.5
        elif ctx is not None and ctx[0] == "Clip" and ctx[1] in (1, 2):  # min and max are scalars
            arr = self._random((), self.dtype)
        else:
            arr = self._random(sh, self.dtype)
        name = self.gb.add_input(v.split("~")[0], arr)
        self.val[v] = name
        self.leaves.append((v, name))

    def out_rank(self, ctx) -> int | None:
        """The rank a guard asks of the output of the node being built (its leaf inputs are
        made while it is: `self._building`)."""
        v = self._building
        return self.rank_hint.get(str(v)) if v is not None and ctx is not None else None

    def _siblings(self, v: str, ctx) -> list:
        """The Op arguments of the node that reads v, the free tensors before v made first
        (a Conv's x before its constant filter, whose shape follows x's)."""
        cons = self._consumer.get(v)
        if ctx is None or cons is None or self.find(cons) not in self.defs:
            return []
        ctor, args = self.defs[self.find(cons)]
        sorts = self.prog.ctors[ctor][1]
        op_args = [a for a, s in zip(args, sorts, strict=False) if s == "Op"]
        for i, (a, s) in enumerate(zip(args, sorts, strict=False)):
            if i >= ctx[1]:
                break
            if s == "Op" and is_var(a) and self.find(a) not in self.defs and self.find(a) not in self.val:
                self._leaf(self.find(a), (ctor, i), op_args)
        return op_args

    def _context_shape(self, v: str, ctx, op_args: list) -> tuple | None:
        """The shape the op's inputs before this one ask of it (a LayerNormalization's scale)."""
        if ctx is None:
            return None
        shapes = []
        for a in op_args:
            name = self.val.get(self.find(a)) if is_var(a) else None
            t = self.gb.types.get(name) if isinstance(name, str) and name else None
            shapes.append(t[1] if t else None)
        sh = context_shape(ctx[0], ctx[1], shapes)
        if sh is None and ctx[0] in ELEMENTWISE and len(shapes) == 2:
            # the second input of every other try does not broadcast the first (broadcasting
            # is tried too); a first input that must be 1-D (a bias) is the second's last dim
            r = self.rank_hint.get(v)
            if ctx[1] == 1 and self.trial % 2 == 0 or ctx[1] == 0 and r == 1:
                sh = elementwise_shape(shapes[1 - ctx[1]], r)
        if sh is None or self.rank_hint.get(v, len(sh)) != len(sh):
            return None
        sh = tuple(self.D if d is None else d for d in sh)
        if not all(isinstance(d, int) and d >= 1 for d in sh):
            return None
        return self.dimg.fix(v, sh, self.rng)

    def _shape_from_guards(self, v: str) -> tuple | None:
        """A shape the guards already fix for tensor v: (= S (shape v)) with S known."""
        for g in self.guards:
            if isinstance(g, SList) and len(g) == 3 and g[0] == "=":
                for x, y in ((g[1], g[2]), (g[2], g[1])):
                    if isinstance(y, SList) and len(y) == 2 and y[0] == "shape" and is_var(y[1]) \
                            and self.find(y[1]) == v:
                        try:
                            sh = self.eval(x)
                        except (Unbound, NoMatch, Unsupported, Reject):
                            continue
                        if isinstance(sh, tuple) and all(isinstance(d, int) and d >= 1 for d in sh):
                            return sh
        return None

    def _arg_value(self, a, sort: str, ctor: str, pos: int, op_args: list):
        if sort == "Op":
            v = self.find(a) if is_var(a) else a
            if v not in self.val:
                self._leaf(v, (ctor, pos), op_args)
            return self.val[v]
        if sort == "OpList":
            return self._oplist(a)
        if is_var(a):
            v = self.find(a)
            if v not in self.env:
                for g in list(self.guards):  # a guard that defines it from known values
                    if isinstance(g, SList) and len(g) == 3 and g[0] == "=":
                        for x, y in ((g[1], g[2]), (g[2], g[1])):
                            if is_var(x) and self.find(x) == v:
                                try:
                                    self.env[v] = self.eval(y)
                                except (Unbound, NoMatch, Unsupported):
                                    pass
                if v not in self.env:
                    self.env[v] = self.choose_value(v, sort, ctor, pos, op_args)
            return self.env[v]
        if isinstance(a, SList):
            # a pattern over values: (SomeInt k), (vec-of ...), (F32): choose its variables
            for sub in a[1:]:
                if is_var(sub) and self.find(sub) not in self.env:
                    c = _sorted_ctor(self.prog, a[0])
                    s = c[1][list(a[1:]).index(sub)] if c else ("i64" if a[0] == "vec-of" else "f64")
                    self.env[self.find(sub)] = self._by_sort(str(sub), s, None)
            try:
                return self.eval(a)
            except Unbound as e:
                raise Unsupported(f"cannot choose {e} in {show(a)}") from None
        return self.eval(a)

    def _ints_for_role(self, v: str, args: list, ctx) -> None:
        """An (Ints s) literal whose s the guards leave free, read as a Reshape's target, an
        Expand's shape, a Pad's pads, ...: s as `_int_role` draws that input for the op's data
        input (built first), not the empty vector `_by_sort` gives an IVec of unknown length
        (a Reshape to [] fits a one-element tensor alone)."""
        if self.defs.get(v, ("",))[0] != "Ints" or ctx is None or not args or not is_var(args[0]):
            return
        s = self.find(args[0])
        if s in self.env or any(s in h or str(args[0]) in h for h in (self.len_hint, self.elem_hint, self.hints)):
            return  # the guards say what it is
        role = _int_role(self, ctx, self._siblings(v, ctx))
        if isinstance(role, np.ndarray) and role.ndim == 1:
            self.env[self.find(args[0])] = tuple(int(i) for i in role)

    def _oplist(self, a) -> list:
        """The value names of an OpList variable's elements (leaves created as needed)."""
        v = self.find(a) if is_var(a) else a
        out = []
        while True:
            d = self.defs.get(v)
            if d is None:
                raise Unsupported(f"a list of tensors ({v}) with unknown length")
            if d[0] == "Nil":
                return out
            if d[0] != "Cons":
                raise Unsupported(f"an OpList built by {d[0]}")
            x = self.find(d[1][0])
            if x not in self.val:
                self._leaf(x, None)
            out.append(self.val[x])
            v = self.find(d[1][1])

    def _node(self, v: str, ctx) -> None:
        ctor, args = self.defs[v]
        sorts = self.prog.ctors[ctor][1]
        if ctor in ("Cons", "Nil"):
            return
        if ctor == "Absent":
            self.val[v] = ""
            return
        if ctor == "Out":
            tup = self.val[self.find(args[0])]
            k = self._arg_value(args[1], "i64", ctor, 1, [])
            if not isinstance(tup, tuple) or not (0 <= k < len(tup)):
                raise Reject("Out of a node without that output")
            self.val[v] = tup[k]
            return
        if ctor == "Opaque":
            raise Unsupported("an Opaque op has no ONNX meaning the checker knows")
        if ctor in LEAF_CTORS:
            self._ints_for_role(v, args, ctx)
            vals = [self._arg_value(a, s, ctor, i, []) for i, (a, s) in enumerate(zip(args, sorts, strict=True))]
            if ctor == "Input":
                self._leaf(v, None)
                return
            if ctor == "Const":
                sh = (self._shape_from_guards(v) or self._context_shape(v, ctx, self._siblings(v, ctx))
                      or self._leaf_shape(v, ctx))
                self.val[v] = self.gb.add_const(str(vals[0]), self._const_values(sh))
                self.leaves.append((v, self.val[v]))
                return
            try:
                self.val[v] = self.gb.literal(ctor, vals, v.split("~")[0])
            except (ValueError, KeyError, TypeError) as e:
                raise Reject(f"bad literal {ctor}: {e}") from None
            return
        op_args = [a for a, s in zip(args, sorts, strict=False) if s == "Op"]
        self._building = v
        vals = [self._arg_value(a, s, ctor, i, op_args) for i, (a, s) in enumerate(zip(args, sorts, strict=True))]
        self._building = None
        try:
            outs = self.gb.add_node(ctor, vals, v.split("~")[0])
            self.gb.infer()
        except BuildError as e:
            raise Reject(str(e)) from None
        spec = BY_CTOR[ctor]
        self.val[v] = tuple(outs) if spec.n_outputs else outs[0]

    # ---- actions: the terms the rule creates
    def _term(self, x) -> object:
        """Build an action's term; returns its value (an ONNX name, tuple, or a plain value)."""
        if is_var(x):
            v = self.find(x)
            if v in self.val:
                return self.val[v]
            if v in self.env:
                return self.env[v]
            raise Unsupported(f"the action uses {x}, which the query does not bind")
        c = _sorted_ctor(self.prog, x[0]) if isinstance(x, SList) and x else None
        if c is None or c[0] not in ("Op",):
            return self.eval(x)
        ctor, sorts = str(x[0]), c[1]
        if ctor == "Absent":
            return ""
        if ctor == "Out":
            tup = self._term(x[1])
            return tup[self.eval(x[2])]
        vals = []
        for a, s in zip(x[1:], sorts, strict=True):
            if s == "Op":
                vals.append(self._term(a))
            elif s == "OpList":
                items, t = [], a
                while isinstance(t, SList) and str(t[0]) == "Cons":
                    items.append(self._term(t[1]))
                    t = t[2]
                if not (isinstance(t, SList) and str(t[0]) == "Nil"):
                    if is_var(t):
                        items = self._oplist(t)
                    else:
                        raise Unsupported(f"cannot build the list {show(a)}")
                vals.append(items)
            else:
                vals.append(self.eval(a))
        if ctor in LEAF_CTORS:
            if ctor in ("Const", "Input"):
                raise Unsupported(f"the action creates ({ctor} ...), a tensor the checker cannot know")
            return self.gb.literal(ctor, vals, "rhs")
        try:
            outs = self.gb.add_node(ctor, vals, "rhs")
        except BuildError as e:
            raise Unsupported(f"cannot write {ctor} as ONNX: {e}") from None
        return tuple(outs) if BY_CTOR[ctor].n_outputs else outs[0]

    def _actions(self) -> None:
        for a in self.actions:
            if not (isinstance(a, SList) and a):
                continue
            head = str(a[0])
            if head == "let":
                v = str(a[1])
                r = self._term(self._sub(a[2]))
                ctor = a[2][0] if isinstance(a[2], SList) and a[2] else None
                if isinstance(r, (str, tuple)) and _sorted_ctor(self.prog, ctor):
                    self.val[v] = r
                else:
                    self.env[v] = r
            elif head == "union":
                lhs = self._term(self._sub(a[1]))
                rhs = self._term(self._sub(a[2]))
                self.checks.append((self.display(a[1]), lhs, rhs))
            elif head == "set" and isinstance(a[1], SList) and str(a[1][0]) in ("shape", "dtype"):
                target = self._term(self._sub(a[1][1]))
                self.claims.append((show(a), target, str(a[1][0]), self.eval(self._sub(a[2]))))


__all__ = ["Instance", "Reject", "Unsupported"]


_BIG = np.iinfo(np.int64).max
# ops with a sliding window: strides, dilations and pads apply to the input's spatial axes
POOLS = frozenset({"MaxPool", "AveragePool", "LpPool", "NchwcMaxPool", "NchwcAveragePool"})
WINDOWED = POOLS | {"Conv", "FusedConv", "NchwcConv", "NchwcConvPlain"}


def _reshaped(xs: tuple, rank: int) -> tuple:
    """A target of `rank` dims for a tensor of shape xs: leading dims merged, or ones added."""
    if rank < len(xs):
        k = len(xs) - rank + 1
        return (int(np.prod(xs[:k])),) + tuple(xs[k:])
    return tuple(xs) + (1,) * (rank - len(xs))


def _int_role(inst: Instance, ctx, op_args: list):
    """A constant (or '' for absent) for a free tensor in an input that must be an integer
    tensor (a shape, axes, pads, ...), valid for the op's data input; None otherwise."""
    if ctx is None:
        return None
    ctor, pos = ctx
    spec = BY_CTOR.get(ctor)
    if spec is None or pos == 0 or pos >= len(spec.inputs):
        return None
    name = spec.inputs[pos].rstrip("?*")
    x = inst.val.get(inst.find(op_args[0])) if op_args and is_var(op_args[0]) else None
    xs = inst.gb.types.get(x, (None, None))[1] if isinstance(x, str) and x else None
    rng = inst.rng
    i64 = lambda v: np.array(list(v), dtype=np.int64)  # noqa: E731
    r = len(xs) if xs is not None else None
    if ctor == "Reshape" and name == "shape" and xs is not None:
        opts = [xs, (-1,), xs[::-1], (0,) * r, (int(np.prod(xs[:-1])), xs[-1]) if r >= 2 else xs]
        want = inst.out_rank(ctx)  # the rank a guard asks of the Reshape's output
        if want is not None:
            opts = [o for o in opts if len(o) == want] or [_reshaped(xs, want)]
        return i64(opts[0 if inst.trial == 0 else int(rng.integers(len(opts)))])
    if ctor == "Unsqueeze" and r is not None:
        return i64([int(rng.integers(0, r + 1))])
    if ctor == "Squeeze" and xs is not None:
        ones = [i for i, d in enumerate(xs) if d == 1]
        return i64(ones[:1]) if ones else ""
    if ctor == "Expand" and xs is not None:
        return i64(xs if inst.trial % 2 == 0 else (2,) + tuple(xs))
    if ctor == "Tile" and r is not None:
        return i64([1 + int(rng.integers(2)) for _ in range(r)])
    if ctor == "Pad" and name == "pads" and r is not None:
        return i64([int(rng.integers(0, 2)) for _ in range(2 * r)])
    if ctor == "Slice" and r is not None:
        if name == "starts":
            return i64([0] * r)
        if name == "ends":
            return i64([_BIG] * r)
        return ""
    if ctor in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin") and r:
        return i64([int(rng.integers(-r, r))])
    if ctor == "Gather" and xs is not None:
        return i64([int(rng.integers(0, min(xs)))]) if min(xs) > 0 else ""
    if ctor == "Dropout":
        return "" if inst.trial % 2 == 0 or name == "training_mode" else np.array(0.5, dtype=np.float32)
    if ctor == "Trilu":
        return np.array(int(rng.integers(-1, 2)), dtype=np.int64)
    if ctor == "Split":
        return ""
    if spec.inputs[pos].endswith("?") and name in ("axes", "steps"):
        return ""
    if spec.inputs[pos].endswith("?") and name in ("bias", "B", "Z", "Sum", "constant_value"):
        return "" if inst.trial % 2 == 0 else None
    return None
