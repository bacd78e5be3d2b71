"""A small s-expression reader for egglog rule files that keeps where each form starts.

Contract: `read(text, path)` returns the top-level forms and the comments. A list is an
`SList` (a Python list with `.line`, `.col`, `.end_line`), a symbol a `Sym` (a str with
`.line`, `.col`), a string literal a `Str` (a str with `.line`, `.col`), numbers are int or
float (egglog's f64 literals have a decimal point or an exponent). Lines and columns count
from 1. A malformed file raises `SexpError` with `FILE:LINE:COL: message`; rule files are
type-checked by egglog itself (eqsat/core/rulefiles.py), this reader only has to see their
structure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUM_INT = re.compile(r"^[+-]?\d+$")
_NUM_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\d*\.\d+|\d+)([eE][+-]?\d+)?$|^[+-]?(inf|NaN)$")


class SexpError(ValueError):
    pass


class Sym(str):
    line: int = 0
    col: int = 0


class Str(str):
    line: int = 0
    col: int = 0


class SList(list):
    line: int = 0
    col: int = 0
    end_line: int = 0


@dataclass(frozen=True)
class Comment:
    line: int
    col: int
    text: str  # without the leading ';' characters and surrounding blanks


def _mk(cls, value, line, col):
    o = cls(value)
    o.line, o.col = line, col
    return o


def read(text: str, path: str = "<text>") -> tuple[list, list[Comment]]:
    """Top-level forms and comments of `text`."""
    forms: list = []
    comments: list[Comment] = []
    stack: list[SList] = []
    i, n, line, col = 0, len(text), 1, 1

    def add(x) -> None:
        (stack[-1] if stack else forms).append(x)

    while i < n:
        c = text[i]
        if c == "\n":
            i, line, col = i + 1, line + 1, 1
            continue
        if c.isspace():
            i, col = i + 1, col + 1
            continue
        if c == ";":
            j = text.find("\n", i)
            j = n if j < 0 else j
            comments.append(Comment(line, col, text[i:j].lstrip(";").strip()))
            col += j - i
            i = j
            continue
        if c == "(":
            lst = _mk(SList, [], line, col)
            add(lst)
            stack.append(lst)
            i, col = i + 1, col + 1
            continue
        if c == ")":
            if not stack:
                raise SexpError(f"{path}:{line}:{col}: unexpected ')': nothing to close here")
            stack.pop().end_line = line
            i, col = i + 1, col + 1
            continue
        if c == '"':
            j, buf, l0, c0 = i + 1, [], line, col
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n:
                    buf.append({"n": "\n", "t": "\t"}.get(text[j + 1], text[j + 1]))
                    j += 2
                    continue
                if text[j] == "\n":
                    line, col = line + 1, 0
                buf.append(text[j])
                j += 1
            if j >= n:
                raise SexpError(f"{path}:{l0}:{c0}: unclosed string literal")
            add(_mk(Str, "".join(buf), l0, c0))
            col += j + 1 - i
            i = j + 1
            continue
        j = i
        while j < n and not text[j].isspace() and text[j] not in '();"':
            j += 1
        tok = text[i:j]
        if _NUM_INT.match(tok):
            add(int(tok))
        elif _NUM_FLOAT.match(tok) and any(ch.isdigit() for ch in tok) or tok in ("inf", "-inf", "NaN"):
            add(float(tok))
        else:
            add(_mk(Sym, tok, line, col))
        col += j - i
        i = j
    if stack:
        s = stack[0]
        raise SexpError(f"{path}:{s.line}:{s.col}: unclosed '(': this parenthesis is never closed")
    return forms, comments


def show(x) -> str:
    """The expression as egglog text."""
    if isinstance(x, SList):
        return "(" + " ".join(show(y) for y in x) + ")"
    if isinstance(x, Str):
        return '"' + x.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(x, float):
        return repr(x)
    return str(x)
