"""Argument types the command lines share (`eqsat` and its subcommands, the benchmarks).

Each takes the argument's text and returns its value, or raises
`argparse.ArgumentTypeError` with a message that says what was expected.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .errors import InputError, output_folder


def _number(s: str, cast, kind: str, ok, bound: str):
    try:
        v = cast(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {kind}: {s!r}") from None
    if not ok(v):  # NaN fails every bound
        raise argparse.ArgumentTypeError(f"must be {bound}: {s}")
    return v


def positive_int(s: str) -> int:
    """An integer > 0 (`--runs 20`)."""
    return _number(s, int, "an integer", lambda v: v > 0, "> 0")


def positive_float(s: str) -> float:
    """A number > 0 (`--time-limit 2.5`)."""
    return _number(s, float, "a number", lambda v: v > 0, "> 0")


def nonnegative_float(s: str) -> float:
    """A number >= 0 (`--atol 0`)."""
    return _number(s, float, "a number", lambda v: v >= 0, ">= 0")


def dim(s: str) -> tuple[str, int]:
    """A symbolic dimension's size, `NAME=VALUE` with VALUE > 0 (`--dim batch=8` -> ("batch", 8))."""
    name, _, value = s.partition("=")
    try:
        v = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with an integer value: {s!r}") from None
    if not name or v <= 0:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with VALUE > 0: {s!r}")
    return name, v


def output_file(s: str) -> Path:
    """A file to write (`--report out/r.json`): its folder must exist when the command starts,
    so that a long run does not end in an error with its result unwritten."""
    p = Path(s)
    try:
        output_folder(p)
    except InputError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if p.is_dir():
        raise argparse.ArgumentTypeError(f"{s} is a folder; give a file name")
    return p
