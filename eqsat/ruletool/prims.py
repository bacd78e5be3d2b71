"""egglog's primitives, evaluated in Python over concrete values, for rule guards.

Values: i64 -> int, f64 -> float, String -> str, bool -> bool, vectors -> tuple, a value of
a datatype other than Op (DType, OptInt, ...) -> `DV(ctor, args)`. A primitive that fails
(an index out of range, a division by zero, i64 arithmetic out of range: egglog's is
checked) raises `NoMatch`: in a rule's query that just means the rule does not match, as in
egglog.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class NoMatch(Exception):
    """The guard does not hold for these values (or a primitive failed)."""


class DV(NamedTuple):
    ctor: str
    args: tuple = ()

    def __str__(self) -> str:
        return f"({self.ctor}{''.join(' ' + str(a) for a in self.args)})"


def _get(v, i):
    if not (0 <= i < len(v)):
        raise NoMatch(f"vec-get index {i} out of range")
    return v[i]


def _set(v, i, x):
    if not (0 <= i < len(v)):
        raise NoMatch(f"vec-set index {i} out of range")
    return v[:i] + (x,) + v[i + 1:]


_I64 = (-(1 << 63), (1 << 63) - 1)


def _i64(v):
    """An i64 result in range (egglog's checked arithmetic), a float as is."""
    if isinstance(v, int) and not isinstance(v, bool) and not _I64[0] <= v <= _I64[1]:
        raise NoMatch(f"i64 overflow ({v})")
    return v


def _div(a, b):
    if b == 0:
        raise NoMatch("division by zero")
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)  # Rust's integer division truncates toward zero
        return _i64(q if (a >= 0) == (b >= 0) else -q)
    return a / b


def _rem(a, b):
    if b == 0:
        raise NoMatch("remainder by zero")
    if isinstance(a, int) and isinstance(b, int):  # exact, the sign of a (Rust's %)
        r = abs(a) % abs(b)
        return r if a >= 0 else -r
    return math.fmod(a, b)


def _pow(a, b):
    try:
        return a ** b
    except (OverflowError, ZeroDivisionError, ValueError):
        raise NoMatch("pow failed") from None


def _check(ok: bool) -> bool:
    if not ok:
        raise NoMatch("guard false")
    return True


# name -> (function, is_predicate): a predicate in a query holds or the match fails.
PRIMS: dict = {
    "+": lambda a, b: _i64(a + b),
    "-": lambda a, b=None: _i64(-a if b is None else a - b),
    "*": lambda a, b: _i64(a * b),
    "/": _div,
    "%": _rem,
    "^": _pow,
    "abs": abs,
    "neg": lambda a: -a,
    "min": min,
    "max": max,
    "to-f64": float,
    "to-i64": int,
    "log": lambda a: math.log(a) if a > 0 else (_ for _ in ()).throw(NoMatch("log")),
    "sqrt": lambda a: math.sqrt(a) if a >= 0 else (_ for _ in ()).throw(NoMatch("sqrt")),
    "ordering-max": max,
    "ordering-min": min,
    "not": lambda a: not a,
    "and": lambda a, b: a and b,
    "or": lambda a, b: a or b,
    "vec-of": lambda *xs: tuple(xs),
    "vec-empty": lambda: (),
    "vec-get": _get,
    "vec-length": len,
    "vec-set": _set,
    "vec-push": lambda v, x: v + (x,),
    "vec-pop": lambda v: v[:-1],
    "vec-append": lambda *vs: tuple(x for v in vs for x in v),
    "vec-range": lambda n: tuple(range(n)),
    "vec-remove": lambda v, i: v[:i] + v[i + 1:],
}
PREDICATES: dict = {
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
    "!=": lambda a, b: a != b,
    "vec-contains": lambda v, x: x in v,
    "vec-not-contains": lambda v, x: x not in v,
}
