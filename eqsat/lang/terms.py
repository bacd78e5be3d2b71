"""Building op-language terms as egglog bindings expressions (no text parsing).

Loading a model builds these objects directly: DESIGN.md measured text programs as
quadratic to parse on egglog 13.2.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from egglog import bindings as b

from eqsat.lang.dtypes import CODE_TO_CTOR

SPAN = b.PanicSpan()
Expr = object  # an egglog bindings expression


def call(name: str, *args: Expr) -> Expr:
    return b.Call(SPAN, name, list(args))


def var(name: str) -> Expr:
    return b.Var(SPAN, name)


def i64(v: int) -> Expr:
    return b.Lit(SPAN, b.Int(int(v)))


def f64(v: float) -> Expr:
    return b.Lit(SPAN, b.Float(float(v)))


def bool_(v: bool) -> Expr:
    return b.Lit(SPAN, b.Bool(bool(v)))


def string(v: str) -> Expr:
    return b.Lit(SPAN, b.String(v))


def ivec(values: Iterable[int]) -> Expr:
    vals = [i64(v) for v in values]
    return call("vec-of", *vals) if vals else call("vec-empty")


def fvec(values: Iterable[float]) -> Expr:
    vals = [f64(v) for v in values]
    return call("vec-of", *vals) if vals else call("vec-empty")


def svec(values: Iterable[str]) -> Expr:
    vals = [string(v) for v in values]
    return call("vec-of", *vals) if vals else call("vec-empty")


def dtype(code: int) -> Expr:
    ctor = CODE_TO_CTOR.get(int(code))
    return call(ctor) if ctor else call("DTypeCode", i64(code))


def opt_int(v: int | None) -> Expr:
    return call("NoInt") if v is None else call("SomeInt", i64(v))


def opt_float(v: float | None) -> Expr:
    return call("NoFloat") if v is None else call("SomeFloat", f64(v))


def oplist(items: Sequence[Expr]) -> Expr:
    out = call("Nil")
    for item in reversed(items):
        out = call("Cons", item, out)
    return out


def let(name: str, expr: Expr):
    """A binding local to the batch it is sent in (`Saturator.run_batch` runs consecutive
    actions as one rule): the name must not start with `$`, which egglog keeps for globals."""
    return b.ActionCommand(b.Let(SPAN, name, expr))


def value(vid: int) -> Expr:
    """The handle `(Value vid)` on encoded value number `vid` (rules/lang.egg): it is in that
    value's e-class, so any batch of actions can name the class."""
    return call("Value", i64(vid))


def union(a: Expr, c: Expr):
    return b.ActionCommand(b.Union(SPAN, a, c))


def set_fn(fn: str, args: Sequence[Expr], value: Expr):
    return b.ActionCommand(b.Set(SPAN, fn, list(args), value))


def fact(relation: str, *args: Expr):
    """The action that adds the tuple `args` to `relation`."""
    return b.ActionCommand(b.Expr_(SPAN, call(relation, *args)))


def is_finite(v: float) -> bool:
    return not (math.isnan(v) or math.isinf(v))
